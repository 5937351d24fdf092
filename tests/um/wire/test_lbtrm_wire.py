"""LBT-RM packet codec (router.um.wire.lbtrm): layouts, round trips, malformed input, tshark.

What is checked, and why:

- Exact byte layouts of DATA, SM, NAK and NCF (the structs of Wireshark's packet-lbtrm.c), and
  round trips through ``decode_lbtrm`` for every flag, list length and NCF reason, plus a
  hypothesis property over random sqns, session ids, ports and payloads: a transport's
  receiver decodes what its source encodes.
- Malformed input (truncated headers, a NAK/NCF count larger than its list, unknown type, wrong
  version, non-DATA next header, parity format) raises ``WireError`` saying where, and arbitrary
  or damaged bytes never raise anything else: a receiver counts a bad datagram and carries on.
- tshark 4.0.17, the independent oracle (wire.md §4): one capture of a small LBT-RM session
  (DATA carrying real LBMC MESSAGE frames, SMs, a unicast NAK, a retransmission, an NCF for each
  reason) must decode as LBT-RM with the values we encoded, the DATA payloads as the LBMC
  messages we framed, and with no expert info beyond the markers the lbtrm dissector adds to
  every NAK/NCF/SM/retransmission by design (see ``expected_expert_rows``). A second capture on
  non-default ports decodes only once tshark gets the matching ``lbtrm.*`` preferences.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.um.wire import lbtrm as t
from router.um.wire.errors import WireError
from router.um.wire.lbmc import LBMC_TYPE_MESSAGE, MESSAGE_HEADER, NHDR_DATA
from router.um.wire.lbtrm import LbtrmData, LbtrmNak, LbtrmNcf, LbtrmSm
from tests.support.pcap import PcapWriter
from tests.support.tshark import decode, expert_frames, expert_info, tshark_path

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# The lbtrm dissector's defaults: groups 224.10.10.10-14, destination port 14400, source
# (unicast NAK) ports 14390-14399.
SOURCE = ("127.0.0.1", 14390)
GROUP = ("224.10.10.10", 14400)
RECEIVER = ("127.0.0.1", 40000)
SESSION = 0x0000CAFE
UCAST = t.FLAG_UCAST_NAKS
RX = t.FLAG_UCAST_NAKS | t.FLAG_RETRANSMISSION

# Non-default ports and group, with the preferences that make tshark claim them.
OTHER_SOURCE = ("127.0.0.1", 15391)
OTHER_GROUP = ("239.192.10.1", 15500)
OTHER_PREFS = ["lbtrm.mc_address_low:239.192.10.1", "lbtrm.mc_address_high:239.192.10.1",
               "lbtrm.dport_low:15500", "lbtrm.dport_high:15500",
               "lbtrm.sport_low:15390", "lbtrm.sport_high:15399"]

# packet-lbtrm.c's lbtrm_ncf_reason strings, as its expert info quotes them.
NCF_REASON_NAMES = {t.NCF_NO_RETRY: "Do not retry", t.NCF_IGNORED: "NAK Ignored",
                    t.NCF_RX_DELAY: "Retransmit Delay", t.NCF_SHED: "NAK Shed"}
PACKET_TYPES = (LbtrmData, LbtrmSm, LbtrmNak, LbtrmNcf)


# ---- helpers ---------------------------------------------------------------------------------

def lbmc_frames(*messages: tuple[int, int, bytes]) -> bytes:
    """LBMC MESSAGE frames for (topic_index, sqn, payload) triples, framed as batching_session does."""
    return b"".join(MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, len(payload) + MESSAGE_HEADER.size,
                                        topic_index, sqn) + payload
                    for topic_index, sqn, payload in messages)


def encode(packet) -> bytes:
    """The encoder call for a packet value (the inverse of decode_lbtrm)."""
    if isinstance(packet, LbtrmData):
        return t.encode_lbtrm_data(packet.session_id, packet.sqn, packet.payload, packet.trail_sqn,
                                   packet.ucast_port, packet.flags)
    if isinstance(packet, LbtrmSm):
        return t.encode_lbtrm_sm(packet.session_id, packet.ucast_port, packet.sm_sqn, packet.lead_sqn,
                                 packet.trail_sqn, packet.flags)
    if isinstance(packet, LbtrmNak):
        return t.encode_lbtrm_nak(packet.session_id, packet.ucast_port, packet.sqns)
    if isinstance(packet, LbtrmNcf):
        return t.encode_lbtrm_ncf(packet.session_id, packet.ucast_port, packet.trail_sqn, packet.reason,
                                  packet.sqns)
    raise TypeError(packet)


def plain(packet):
    """The packet with a DATA payload as bytes (a decoded one is a memoryview: compares, but prints badly)."""
    if isinstance(packet, LbtrmData):
        return dataclasses.replace(packet, payload=bytes(packet.payload))
    return packet


def round_trip(packet):
    return plain(t.decode_lbtrm(encode(packet)))


def assert_rejected(datagram, *patterns: str) -> str:
    """decode_lbtrm raises WireError (nothing else) whose message matches every pattern."""
    with pytest.raises(WireError) as caught:
        t.decode_lbtrm(datagram)
    message = str(caught.value)
    for pattern in patterns:
        assert re.search(pattern, message), f"{message!r} does not match {pattern!r}"
    return message


# ---- exact layouts ---------------------------------------------------------------------------

def test_data_layout_is_header_then_lbmc_bytes():
    raw = t.encode_lbtrm_data(0x01020304, 5, b"xy", trail_sqn=3, ucast_port=14390, flags=RX)
    assert raw == bytes.fromhex("00 00 3836 01020304 00000005 00000003 a0 00 0000") + b"xy"
    assert len(raw) == t.HEADER_SIZE + 2


def test_sm_layout():
    raw = t.encode_lbtrm_sm(0x01020304, 14390, sm_sqn=7, lead_sqn=9, trail_sqn=2)
    assert raw == bytes.fromhex("02 00 3836 01020304 00000007 00000009 00000002 80 00 0000")


def test_nak_layout():
    raw = t.encode_lbtrm_nak(0x01020304, 14390, [1, 0xFFFFFFFF])
    assert raw == bytes.fromhex("03 00 3836 01020304 0002 0000 00000001 ffffffff")


def test_ncf_layout_puts_the_reason_in_the_high_nibble():
    raw = t.encode_lbtrm_ncf(0x01020304, 14390, trail_sqn=4, reason=t.NCF_SHED, sqns=[5])
    assert raw == bytes.fromhex("04 00 3836 01020304 00000004 0001 00 30 00000005")


# ---- round trips -----------------------------------------------------------------------------

@pytest.mark.parametrize("flags", [0, UCAST, RX, t.FLAG_MCAST_NAKS | t.FLAG_LATE_JOIN, 0xF0],
                         ids=["none", "ucast_naks", "retransmission", "mcast_late_join", "all"])
def test_data_round_trip(flags):
    packet = LbtrmData(SESSION, 41, 37, 14390, lbmc_frames((5, 0, b"alpha"), (9, 3, b"beta")), flags)
    decoded = t.decode_lbtrm(encode(packet))
    assert plain(decoded) == packet
    assert decoded.retransmission == bool(flags & t.FLAG_RETRANSMISSION)
    assert plain(t.decode_lbtrm_data(encode(packet))) == packet


def test_data_defaults_trail_to_sqn_and_drops_the_fec_type_nibble():
    decoded = t.decode_lbtrm_data(t.encode_lbtrm_data(SESSION, 12, b"", flags=RX | 0x0F))
    assert (decoded.sqn, decoded.trail_sqn, decoded.flags, decoded.ucast_port) == (12, 12, RX, 0)
    assert bytes(decoded.payload) == b""


def test_decode_accepts_bytes_bytearray_and_memoryview():
    raw = t.encode_lbtrm_data(SESSION, 1, b"payload", ucast_port=14390, flags=UCAST)
    decoded = [plain(t.decode_lbtrm(kind(raw))) for kind in (bytes, bytearray, memoryview)]
    assert decoded[0] == decoded[1] == decoded[2] == LbtrmData(SESSION, 1, 1, 14390, b"payload", UCAST)


@pytest.mark.parametrize("flags", [UCAST, 0, t.FLAG_MCAST_NAKS])
def test_sm_round_trip(flags):
    packet = LbtrmSm(SESSION, 14390, sm_sqn=3, lead_sqn=0xFFFFFFFF, trail_sqn=0xFFFFFF00, flags=flags)
    assert round_trip(packet) == packet


@pytest.mark.parametrize("sqns", [(), (7,), (1, 2, 3, 0xFFFFFFFF, 0), tuple(range(1000, 1300))],
                         ids=["empty", "one", "several", "300"])
def test_nak_round_trip(sqns):
    packet = LbtrmNak(SESSION, 14390, sqns)
    assert round_trip(packet) == packet


@pytest.mark.parametrize("reason", sorted(NCF_REASON_NAMES), ids=lambda r: NCF_REASON_NAMES[r])
def test_ncf_round_trip_for_every_reason(reason):
    packet = LbtrmNcf(SESSION, 14390, trail_sqn=100, reason=reason, sqns=(101, 102, 150))
    assert round_trip(packet) == packet


def test_sequence_numbers_wrap_modulo_2_32():
    assert t.decode_lbtrm(t.encode_lbtrm_data(1, 2**32 + 7, b"", trail_sqn=-1)).sqn == 7
    assert t.decode_lbtrm(t.encode_lbtrm_data(1, 2**32 + 7, b"", trail_sqn=-1)).trail_sqn == 0xFFFFFFFF
    assert t.decode_lbtrm(t.encode_lbtrm_sm(1, 2, -1, 2**32, 2**33 + 1)) == LbtrmSm(1, 2, 0xFFFFFFFF, 0, 1)
    assert t.decode_lbtrm(t.encode_lbtrm_nak(1, 2, [-1, 2**32])).sqns == (0xFFFFFFFF, 0)
    assert t.decode_lbtrm(t.encode_lbtrm_ncf(1, 2, -1, t.NCF_SHED, [2**32 + 1])) == LbtrmNcf(
        1, 2, 0xFFFFFFFF, t.NCF_SHED, (1,))


@pytest.mark.parametrize("call", [
    lambda: t.encode_lbtrm_data(2**32, 0, b""),
    lambda: t.encode_lbtrm_data(1, 0, b"", ucast_port=65536),
    lambda: t.encode_lbtrm_sm(-1, 0, 0, 0, 0),
    lambda: t.encode_lbtrm_sm(1, -1, 0, 0, 0),
    lambda: t.encode_lbtrm_nak(2**32, 0, [1]),
    lambda: t.encode_lbtrm_nak(1, 70000, [1]),
    lambda: t.encode_lbtrm_nak(1, 0, range(t.MAX_LIST + 1)),
    lambda: t.encode_lbtrm_ncf(1, 65536, 0, t.NCF_SHED, [1]),
    lambda: t.encode_lbtrm_ncf(1, 0, 0, t.NCF_SHED, [0] * (t.MAX_LIST + 1)),
], ids=["data_session", "data_port", "sm_session", "sm_port", "nak_session", "nak_port", "nak_list",
        "ncf_port", "ncf_list"])
def test_encoders_reject_values_that_do_not_fit_with_wire_error(call):
    with pytest.raises(WireError, match="LBT-RM"):
        call()


u32 = st.integers(0, 0xFFFFFFFF)
u16 = st.integers(0, 0xFFFF)
flag_bits = st.integers(0, 15).map(lambda nibble: nibble << 4)
sqn_lists = st.lists(u32, max_size=40).map(tuple)
packets = st.one_of(
    st.builds(LbtrmData, session_id=u32, sqn=u32, trail_sqn=u32, ucast_port=u16,
              payload=st.binary(max_size=200), flags=flag_bits),
    st.builds(LbtrmSm, session_id=u32, ucast_port=u16, sm_sqn=u32, lead_sqn=u32, trail_sqn=u32, flags=flag_bits),
    st.builds(LbtrmNak, session_id=u32, ucast_port=u16, sqns=sqn_lists),
    st.builds(LbtrmNcf, session_id=u32, ucast_port=u16, trail_sqn=u32, reason=st.integers(0, 15), sqns=sqn_lists),
)


@FAST
@given(packets)
def test_every_packet_round_trips(packet):
    raw = encode(packet)
    assert round_trip(packet) == packet
    assert raw[0] >> 4 == t.LBTRM_VERSION and raw[1] == t.LBTRM_NHDR_DATA
    if isinstance(packet, (LbtrmNak, LbtrmNcf)):
        header = t.NAK_HEADER.size if isinstance(packet, LbtrmNak) else t.NCF_HEADER.size
        assert len(raw) == header + 4 * len(packet.sqns)


# ---- malformed input -------------------------------------------------------------------------

VALID = {
    "data": t.encode_lbtrm_data(SESSION, 1, b"", ucast_port=14390, flags=UCAST),
    "sm": t.encode_lbtrm_sm(SESSION, 14390, 0, 1, 0),
    "nak": t.encode_lbtrm_nak(SESSION, 14390, []),
    "ncf": t.encode_lbtrm_ncf(SESSION, 14390, 0, t.NCF_NO_RETRY, []),
}


@pytest.mark.parametrize("name", VALID)
def test_every_truncated_header_is_rejected_naming_its_length(name):
    raw = VALID[name]
    assert t.decode_lbtrm(raw) is not None           # the whole header, with an empty list or payload
    for length in range(len(raw)):
        # The message names the structure and where parsing stopped: today as the datagram's
        # length ("of 11 bytes is shorter than ..."), errors.py's contract asks for an offset.
        assert_rejected(raw[:length], r"^LBT-RM", rf"(\boffset {length}\b|\b{length} bytes)")


@pytest.mark.parametrize("packet, offset", [
    (LbtrmNak(SESSION, 14390, (1, 2, 3)), t.NAK_HEADER.size),
    (LbtrmNcf(SESSION, 14390, 0, t.NCF_SHED, (1, 2, 3)), t.NCF_HEADER.size),
], ids=["nak", "ncf"])
def test_a_list_shorter_than_its_count_is_rejected_at_the_list_offset(packet, offset):
    raw = encode(packet)
    for missing in (1, 3, 4, 12):
        assert_rejected(raw[:-missing], rf"at offset {offset}\b", "3 sequence numbers",
                        rf"{12 - missing} remain")
    count_claims_more = raw[:offset - 4] + (4).to_bytes(2, "big") + raw[offset - 2:]
    assert_rejected(count_claims_more, rf"4 sequence numbers at offset {offset} need 16 bytes, 12 remain")


@pytest.mark.parametrize("kind", [1, *range(5, 16)])
def test_unknown_packet_type_is_rejected_at_offset_0(kind):
    raw = bytes([kind]) + VALID["sm"][1:]
    assert_rejected(raw, rf"packet type {kind} at offset 0")


@pytest.mark.parametrize("version", [1, 2, 15])
@pytest.mark.parametrize("name", VALID)
def test_wrong_version_is_rejected_at_offset_0(version, name):
    raw = VALID[name]
    assert_rejected(bytes([version << 4 | raw[0]]) + raw[1:], rf"version {version} at offset 0")


@pytest.mark.parametrize("name", VALID)
def test_a_next_header_other_than_data_is_rejected_at_offset_1(name):
    raw = VALID[name]
    assert_rejected(raw[:1] + b"\x01" + raw[2:], r"next header 0x01 at offset 1")


@pytest.mark.parametrize("fmt", [1, 2, 15])
def test_non_selective_nak_is_rejected_at_its_format_field(fmt):
    # format is a u16 at offset 10 whose low nibble (byte 11) is the format, as tshark reads it
    raw = t.encode_lbtrm_nak(SESSION, 14390, [5])
    assert_rejected(raw[:10] + fmt.to_bytes(2, "big") + raw[12:], rf"NAK: format {fmt} at offset 10")
    # the high bits of the u16 are not the format: still a selective NAK
    assert t.decode_lbtrm(raw[:10] + b"\x01\x00" + raw[12:]).sqns == (5,)


@pytest.mark.parametrize("fmt", [1, 2, 15])
def test_non_selective_ncf_is_rejected_at_offset_15(fmt):
    raw = t.encode_lbtrm_ncf(SESSION, 14390, 0, t.NCF_SHED, [5])
    assert_rejected(raw[:15] + bytes([t.NCF_SHED << 4 | fmt]) + raw[16:], rf"NCF: format {fmt} at offset 15")


@pytest.mark.parametrize("name", ["sm", "nak", "ncf"])
def test_decode_lbtrm_data_rejects_other_packet_types(name):
    with pytest.raises(WireError, match=rf"packet type {name.upper()} at offset 0 is not DATA"):
        t.decode_lbtrm_data(VALID[name])


@st.composite
def damaged_packets(draw):
    """A valid packet with a few bytes overwritten, then cut anywhere."""
    raw = bytearray(encode(draw(packets)))
    for _ in range(draw(st.integers(0, 3))):
        raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
    return bytes(raw[:draw(st.integers(0, len(raw)))])


@FUZZ
@given(st.one_of(st.binary(max_size=80), damaged_packets()))
def test_arbitrary_bytes_decode_to_a_packet_or_raise_wire_error(datagram):
    try:
        packet = t.decode_lbtrm(datagram)
    except WireError as err:
        assert "LBT-RM" in str(err)
        return
    assert isinstance(packet, PACKET_TYPES)
    assert round_trip(packet) == plain(packet)      # what decodes re-encodes to the same values


# ---- tshark oracle ---------------------------------------------------------------------------

def _data(sqn: int, trail: int, *messages, flags: int = UCAST) -> LbtrmData:
    return LbtrmData(SESSION, sqn, trail, SOURCE[1], lbmc_frames(*messages), flags)


# A short session: the receiver misses DATA 1 and 2, NAKs them by unicast, the source
# retransmits 1 and answers with an NCF for each reason (in life one reason per NCF burst).
DATA_1 = _data(1, 0, (9, 0, b"gamma"))
SESSION_SCRIPT = [
    ("data0", _data(0, 0, (5, 0, b"alpha"), (5, 1, b"beta")), SOURCE, GROUP),
    ("data1", DATA_1, SOURCE, GROUP),
    ("data2", _data(2, 0, (5, 2, b"delta"), (9, 1, b"epsilon")), SOURCE, GROUP),
    ("sm0", LbtrmSm(SESSION, SOURCE[1], 0, 2, 0), SOURCE, GROUP),
    ("nak", LbtrmNak(SESSION, SOURCE[1], (1, 2)), RECEIVER, SOURCE),
    ("rx1", dataclasses.replace(DATA_1, flags=RX), SOURCE, GROUP),
    ("data3", _data(3, 1, (5, 3, b"zeta")), SOURCE, GROUP),
    ("sm1", LbtrmSm(SESSION, SOURCE[1], 1, 3, 1), SOURCE, GROUP),
    ("ncf_no_retry", LbtrmNcf(SESSION, SOURCE[1], 1, t.NCF_NO_RETRY, (0,)), SOURCE, GROUP),
    ("ncf_ignored", LbtrmNcf(SESSION, SOURCE[1], 1, t.NCF_IGNORED, (1,)), SOURCE, GROUP),
    ("ncf_rx_delay", LbtrmNcf(SESSION, SOURCE[1], 1, t.NCF_RX_DELAY, (2, 3)), SOURCE, GROUP),
    ("ncf_shed", LbtrmNcf(SESSION, SOURCE[1], 1, t.NCF_SHED, (2, 3, 4)), SOURCE, GROUP),
    ("sm2", LbtrmSm(SESSION, SOURCE[1], 2, 3, 1), SOURCE, GROUP),
]
OTHER_SESSION = 0x00BEEF01
OTHER_SCRIPT = [
    ("data", LbtrmData(OTHER_SESSION, 0, 0, OTHER_SOURCE[1], lbmc_frames((2, 0, b"other")), UCAST),
     OTHER_SOURCE, OTHER_GROUP),
    ("sm", LbtrmSm(OTHER_SESSION, OTHER_SOURCE[1], 0, 0, 0), OTHER_SOURCE, OTHER_GROUP),
    ("nak", LbtrmNak(OTHER_SESSION, OTHER_SOURCE[1], (1,)), RECEIVER, OTHER_SOURCE),
    ("ncf", LbtrmNcf(OTHER_SESSION, OTHER_SOURCE[1], 0, t.NCF_RX_DELAY, (1,)), OTHER_SOURCE, OTHER_GROUP),
]


def write_capture(path, script) -> dict[str, int]:
    """One UDP datagram per script line; returns name -> frame number."""
    with PcapWriter(path) as pcap:
        return {name: pcap.udp(encode(packet), src, dst) for name, packet, src, dst in script}


def expected_expert_rows(script, sequence_analysis: bool = False) -> list[str]:
    """The expert info packet-lbtrm.c adds to well-formed packets by design, as -z expert rows.

    Checked with ``tshark -r file.pcap -q -z expert`` and against the dissector's ei table:
    every NAK gets "NAK" at Warning severity (ei_lbtrm_analysis_nak: PI_SEQUENCE, PI_WARN,
    added unconditionally by dissect_lbtrm_nak: a NAK means loss, which is what the marker
    reports, not a fault in the packet); every NCF a Note "NCF <reason>"; every retransmission
    a Note "RX 0x<sqn>" (and with sequence analysis also a Note "Data RX"); every SM a Chat
    "SM". Nothing else may appear: no Error, no other Warning, no Malformed, no LBMC info.
    """
    counts: Counter = Counter()
    for _name, packet, _src, _dst in script:
        if isinstance(packet, LbtrmNak):
            counts["Warn/Sequence/LBT-RM: NAK"] += 1
        elif isinstance(packet, LbtrmNcf):
            counts[f"Note/Sequence/LBT-RM: NCF {NCF_REASON_NAMES[packet.reason]}"] += 1
        elif isinstance(packet, LbtrmSm):
            counts["Chat/Sequence/LBT-RM: SM"] += 1
        elif packet.retransmission:
            counts[f"Note/Sequence/LBT-RM: RX 0x{packet.sqn:08x}"] += 1
            if sequence_analysis:
                counts["Note/Sequence/LBT-RM: Data RX"] += 1
    return sorted(f"{row} (x{count})" for row, count in counts.items())


def _ints(frame: dict, field: str) -> list[int]:
    return [int(value, 0) for value in frame.get(field, [])]


def _one(frame: dict, field: str) -> int:
    values = _ints(frame, field)
    assert len(values) == 1, f"{field}: {frame.get(field)!r}"
    return values[0]


def tshark_packet(frame: dict):
    """The packet value rebuilt from tshark's lbtrm fields (DATA payload from its LBMC fields)."""
    kind = _one(frame, "lbtrm.hdr.type")
    session_id, port = _one(frame, "lbtrm.hdr.session_id"), _one(frame, "lbtrm.hdr.ucast_port")
    assert _one(frame, "lbtrm.hdr.ver") == t.LBTRM_VERSION and _one(frame, "lbtrm.hdr.next_hdr") == 0
    if kind == t.LBTRM_TYPE_DATA:
        return LbtrmData(session_id, _one(frame, "lbtrm.data.sqn"), _one(frame, "lbtrm.data.trail_sqn"), port,
                         lbmc_payload(frame), _one(frame, "lbtrm.data.flags_fec_type") & 0xF0)
    if kind == t.LBTRM_TYPE_SM:
        return LbtrmSm(session_id, port, _one(frame, "lbtrm.sm.sm_sqn"), _one(frame, "lbtrm.sm.lead_sqn"),
                       _one(frame, "lbtrm.sm.trail_sqn"), _one(frame, "lbtrm.sm.flags_fec_type") & 0xF0)
    if kind == t.LBTRM_TYPE_NAK:
        sqns = tuple(_ints(frame, "lbtrm.nak.list.nak"))
        assert _one(frame, "lbtrm.nak.num_naks") == len(sqns) and _one(frame, "lbtrm.nak.format") == 0
        return LbtrmNak(session_id, port, sqns)
    if kind == t.LBTRM_TYPE_NCF:
        sqns = tuple(_ints(frame, "lbtrm.ncf.list.ncf"))
        assert _one(frame, "lbtrm.ncf.num_ncfs") == len(sqns) and _one(frame, "lbtrm.ncf.format") == 0
        return LbtrmNcf(session_id, port, _one(frame, "lbtrm.ncf.trail_sqn"), _one(frame, "lbtrm.ncf.reason"), sqns)
    raise AssertionError(f"tshark shows LBT-RM type {kind}")


def lbmc_messages(frame: dict) -> list[tuple[int, int, bytes]]:
    """(topic_index, sqn, payload) of each LBMC message tshark found in the frame."""
    types, next_hdrs = _ints(frame, "lbmc.type"), _ints(frame, "lbmc.next_hdr")
    assert set(types) <= {LBMC_TYPE_MESSAGE} and set(next_hdrs) <= {NHDR_DATA}, (types, next_hdrs)
    payloads = [bytes.fromhex(value.replace(":", "")) for value in frame.get("data.data", [])]
    rows = list(zip(_ints(frame, "lbmc.tidx"), _ints(frame, "lbmc.sqn"), payloads))
    assert len(rows) == len(types) == len(_ints(frame, "lbmc.msglen")), frame
    assert _ints(frame, "lbmc.msglen") == [len(payload) + MESSAGE_HEADER.size for *_, payload in rows]
    return rows


def lbmc_payload(frame: dict) -> bytes:
    return lbmc_frames(*lbmc_messages(frame))


@pytest.fixture(scope="module")
def session_capture(tmp_path_factory):
    """The session script as a pcap, decoded by tshark; (frames by name, -z expert rows, path)."""
    tshark_path()   # fail, not skip, when the oracle is missing
    path = tmp_path_factory.mktemp("lbtrm") / "session.pcap"
    where = write_capture(path, SESSION_SCRIPT)
    frames = decode(path, [])
    assert len(frames) == len(SESSION_SCRIPT)
    return {"frames": {name: frames[number - 1] for name, number in where.items()},
            "where": where, "expert": expert_info(path, [], min_severity="chat"), "path": path}


def test_tshark_decodes_every_packet_as_lbtrm_with_our_values(session_capture):
    for name, packet, src, dst in SESSION_SCRIPT:
        frame = session_capture["frames"][name]
        assert frame["ip.src"] == [src[0]] and frame["ip.dst"] == [dst[0]], name
        assert _ints(frame, "udp.srcport") == [src[1]] and _ints(frame, "udp.dstport") == [dst[1]], name
        assert "lbtrm" in frame["frame.protocols"][0].split(":"), name
        assert tshark_packet(frame) == packet, name


def test_tshark_sees_the_flags_and_lists(session_capture):
    frames = session_capture["frames"]
    for name in ("data0", "data1", "data2", "data3"):
        assert _ints(frames[name], "lbtrm.data.flags_fec_type.rx") == [0], name
        assert _ints(frames[name], "lbtrm.data.flags_fec_type.ucast_naks") == [1], name
    assert _ints(frames["rx1"], "lbtrm.data.flags_fec_type.rx") == [1]
    assert _ints(frames["rx1"], "lbtrm.data.flags_fec_type.ucast_naks") == [1]
    assert [_one(frames[f"sm{i}"], "lbtrm.sm.sm_sqn") for i in range(3)] == [0, 1, 2]
    assert [_one(frames[f"sm{i}"], "lbtrm.sm.lead_sqn") for i in range(3)] == [2, 3, 3]
    assert _ints(frames["nak"], "lbtrm.nak.list.nak") == [1, 2]
    reasons = {name: _one(frames[name], "lbtrm.ncf.reason") for name in frames if name.startswith("ncf")}
    assert reasons == {"ncf_no_retry": 0, "ncf_ignored": 1, "ncf_rx_delay": 2, "ncf_shed": 3}
    assert _ints(frames["ncf_shed"], "lbtrm.ncf.list.ncf") == [2, 3, 4]


def test_tshark_puts_every_packet_on_one_lbtrm_channel(session_capture):
    # The NAK is found by its destination (the source) and ucast_port: it joins the same transport.
    channels = {name: frame.get("lbtrm.channel") for name, frame in session_capture["frames"].items()}
    assert len({tuple(channel or ()) for channel in channels.values()}) == 1, channels
    assert channels["nak"], channels


def test_tshark_decodes_data_payloads_as_our_lbmc_messages(session_capture):
    expected = {
        "data0": [(5, 0, b"alpha"), (5, 1, b"beta")],
        "data1": [(9, 0, b"gamma")],
        "data2": [(5, 2, b"delta"), (9, 1, b"epsilon")],
        "rx1": [(9, 0, b"gamma")],
        "data3": [(5, 3, b"zeta")],
    }
    for name, frame in session_capture["frames"].items():
        assert lbmc_messages(frame) == expected.get(name, []), name


def test_tshark_reports_only_the_dissectors_per_packet_markers(session_capture):
    assert sorted(session_capture["expert"]) == expected_expert_rows(SESSION_SCRIPT), session_capture["expert"]


def test_the_only_warning_is_the_nak_marker_on_the_nak_frame(session_capture):
    path, where = session_capture["path"], session_capture["where"]
    assert expert_info(path, [], min_severity="warn") == ["Warn/Sequence/LBT-RM: NAK (x1)"]
    # Per frame (expert_frames reads the tree; the NCF notes are not attached to it, -z expert has them)
    assert expert_frames(path, [], min_severity="warn") == {where["nak"]: ["Warn/group 0x02000000: NAK"]}


def test_sequence_analysis_finds_no_gap_duplicate_or_reordering(session_capture):
    # With lbtrm.sequence_analysis the dissector tracks DATA and SM sqns per transport: our
    # in-order stream adds only the "Data RX" note of the retransmission.
    rows = expert_info(session_capture["path"], [], ["lbtrm.sequence_analysis:TRUE"], min_severity="chat")
    assert sorted(rows) == expected_expert_rows(SESSION_SCRIPT, sequence_analysis=True), rows


def test_non_default_ports_decode_with_matching_lbtrm_preferences(tmp_path):
    path = tmp_path / "other_ports.pcap"
    where = write_capture(path, OTHER_SCRIPT)
    without = decode(path, [])
    assert all("lbtrm" not in frame["frame.protocols"][0].split(":") for frame in without), \
        [frame["frame.protocols"] for frame in without]
    frames = decode(path, [], OTHER_PREFS)
    for name, packet, _src, _dst in OTHER_SCRIPT:
        frame = frames[where[name] - 1]
        assert "lbtrm" in frame["frame.protocols"][0].split(":"), name
        assert tshark_packet(frame) == packet, name
    assert lbmc_messages(frames[where["data"] - 1]) == [(2, 0, b"other")]
    rows = expert_info(path, [], OTHER_PREFS, min_severity="chat")
    assert sorted(rows) == expected_expert_rows(OTHER_SCRIPT), rows
