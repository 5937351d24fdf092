"""LBT-RU packet codec (router.um.wire.lbtru): layouts, round trips, malformed input, tshark.

What is checked, and why:

- Exact byte layouts of DATA, SM, NAK, NCF, ACK, CREQ and RST (the structs of Wireshark's
  packet-lbtru.h): each type's own header, then its SID option (and a CID after it for what
  receivers send), linked through next_hdr; an RST carries no options. ``data_header`` is
  the first ``HEADER_SIZE`` bytes of a DATA packet and ``RETRANSMISSION_BYTE`` is where its
  flag lives, so a stored DATA packet can be turned into its retransmission in place.
- Round trips through ``decode_lbtru`` for every type, flag, list length and NCF reason, plus
  a hypothesis property over random sqns, session ids, client ids and payloads: a source
  decodes what its receivers encode, and they decode what it encodes.
- Malformed input (truncated headers and options, a NAK/NCF count larger than its list,
  unknown type, wrong version, unknown/zero-length/wrong-length/repeated options, a missing
  SID or CID, an RST with a next header, a non-selective format) raises ``WireError`` naming
  the offset, and arbitrary or damaged bytes never raise anything else: a receiver counts a
  bad datagram and carries on.
- Encoders refuse what does not fit: a list longer than its u16 count, a datagram over
  65507 bytes.
- tshark 4.0.17, the independent oracle (wire.md §4): one capture of a small LBT-RU
  conversation on the dissector's default ports (CREQ, SM SYN, DATA carrying real LBMC
  MESSAGE frames, SMs, an ACK, a NAK, a retransmission, an NCF for each reason, an RST)
  must decode as LBT-RU with the values we encoded, the DATA payloads as the LBMC messages
  we framed, and with no expert info beyond the markers the lbtru dissector adds to every
  CREQ/SM/ACK/RST/NAK/NCF by design (see ``expected_expert_rows``). A second capture on
  non-default ports decodes only once tshark gets the matching ``lbtru.*`` preferences.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.um.wire import lbtru as t
from router.um.wire.errors import WireError
from router.um.wire.lbmc import LBMC_TYPE_MESSAGE, MESSAGE_HEADER, NHDR_DATA
from router.um.wire.lbtru import LbtruAck, LbtruCreq, LbtruData, LbtruNak, LbtruNcf, LbtruRst, LbtruSm
from tests.support.pcap import PcapWriter
from tests.support.tshark import decode, expert_frames, expert_info, tshark_path

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# The lbtru dissector's defaults: source ports 14380-14389, receiver ports 14360-14379; its
# heuristic claims a UDP datagram whose ports are one of each.
SOURCE = ("127.0.0.1", 14380)
RECEIVER = ("127.0.0.1", 14360)
SESSION = 0x0000CAFE
CLIENT = 0x0000BEEF
RX = t.FLAG_RETRANSMISSION

# Non-default ports, with the preferences that make tshark claim them.
OTHER_SOURCE = ("127.0.0.1", 15380)
OTHER_RECEIVER = ("127.0.0.1", 15360)
OTHER_PREFS = ["lbtru.source_port_low:15380", "lbtru.source_port_high:15389",
               "lbtru.receiver_port_low:15360", "lbtru.receiver_port_high:15379"]

# packet-lbtru.c's lbtru_ncf_reason strings, as its expert info quotes them.
NCF_REASON_NAMES = {t.NCF_NO_RETRY: "Do not retry", t.NCF_IGNORED: "NAK Ignored",
                    t.NCF_RX_DELAY: "Retransmit Delay", t.NCF_SHED: "NAK Shed"}
PACKET_TYPES = (LbtruData, LbtruSm, LbtruNak, LbtruNcf, LbtruAck, LbtruCreq, LbtruRst)
SEQUENCE_GROUP = "group 0x02000000"     # PI_SEQUENCE, as expert_frames shows it


# ---- helpers ---------------------------------------------------------------------------------

def lbmc_frames(*messages: tuple[int, int, bytes]) -> bytes:
    """LBMC MESSAGE frames for (topic_index, sqn, payload) triples, framed as batching_session does."""
    return b"".join(MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, len(payload) + MESSAGE_HEADER.size,
                                        topic_index, sqn) + payload
                    for topic_index, sqn, payload in messages)


def encode(packet) -> bytes:
    """The encoder call for a packet value (the inverse of decode_lbtru)."""
    if isinstance(packet, LbtruData):
        return t.encode_lbtru_data(packet.session_id, packet.sqn, packet.payload, packet.trail_sqn, packet.flags)
    if isinstance(packet, LbtruSm):
        return t.encode_lbtru_sm(packet.session_id, packet.sm_sqn, packet.lead_sqn, packet.trail_sqn, packet.syn)
    if isinstance(packet, LbtruNak):
        return t.encode_lbtru_nak(packet.session_id, packet.client_id, packet.sqns)
    if isinstance(packet, LbtruNcf):
        return t.encode_lbtru_ncf(packet.session_id, packet.trail_sqn, packet.reason, packet.sqns)
    if isinstance(packet, LbtruAck):
        return t.encode_lbtru_ack(packet.session_id, packet.client_id, packet.ack_sqn)
    if isinstance(packet, LbtruCreq):
        assert packet.request == t.CREQ_SYN, "encode_lbtru_creq only sends SYN requests"
        return t.encode_lbtru_creq(packet.session_id, packet.client_id)
    if isinstance(packet, LbtruRst):
        return t.encode_lbtru_rst(packet.reason)
    raise TypeError(packet)


def plain(packet):
    """The packet with a DATA payload as bytes (a decoded one is a memoryview: compares, but prints badly)."""
    if isinstance(packet, LbtruData):
        return dataclasses.replace(packet, payload=bytes(packet.payload))
    return packet


def round_trip(packet):
    return plain(t.decode_lbtru(encode(packet)))


def assert_rejected(datagram, *patterns: str) -> str:
    """decode_lbtru raises WireError (nothing else) whose message matches every pattern."""
    with pytest.raises(WireError) as caught:
        t.decode_lbtru(datagram)
    message = str(caught.value)
    for pattern in patterns:
        assert re.search(pattern, message), f"{message!r} does not match {pattern!r}"
    return message


def option(next_hdr: int, value: int, length: int = t.OPTION.size) -> bytes:
    return t.OPTION.pack(next_hdr, length, 0, value)


# ---- exact layouts ---------------------------------------------------------------------------

def test_data_layout_is_header_sid_option_then_lbmc_bytes():
    raw = t.encode_lbtru_data(0x01020304, 5, b"xy", trail_sqn=3, flags=RX)
    assert raw == bytes.fromhex("00 01 4000 00000005 00000003  00 08 0000 01020304") + b"xy"
    assert len(raw) == t.HEADER_SIZE + 2 == 22
    plain_data = t.encode_lbtru_data(0x01020304, 5, b"", trail_sqn=3)
    assert plain_data == bytes.fromhex("00 01 0000 00000005 00000003  00 08 0000 01020304")


@pytest.mark.parametrize("sqn, trail, flags", [(0, 0, 0), (5, 3, RX), (0xFFFFFFFF, 0x12345678, RX)])
def test_data_header_is_the_first_20_bytes_of_a_data_packet(sqn, trail, flags):
    raw = t.encode_lbtru_data(SESSION, sqn, b"lbmc bytes", trail, flags)
    assert t.data_header(SESSION, sqn, trail, flags) == raw[:t.HEADER_SIZE]
    assert raw[t.HEADER_SIZE:] == b"lbmc bytes"
    assert t.HEADER_SIZE == t.SID_DATA_HEADER.size == t.DATA_HEADER.size + t.OPTION.size == 20


def test_retransmission_byte_is_where_the_flag_lives():
    original = t.encode_lbtru_data(SESSION, 9, b"payload", trail_sqn=4)
    retransmission = t.encode_lbtru_data(SESSION, 9, b"payload", trail_sqn=4, flags=RX)
    assert original[t.RETRANSMISSION_BYTE] == 0x00 and retransmission[t.RETRANSMISSION_BYTE] == RX >> 8
    # Setting the bit in a stored DATA packet is all a retransmission changes.
    patched = bytearray(original)
    patched[t.RETRANSMISSION_BYTE] |= RX >> 8
    assert bytes(patched) == retransmission
    assert [i for i, (a, b) in enumerate(zip(original, retransmission)) if a != b] == [t.RETRANSMISSION_BYTE]
    assert t.decode_lbtru(bytes(patched)).retransmission and not t.decode_lbtru(original).retransmission


@pytest.mark.parametrize("syn, flags", [(False, "0000"), (True, "8000")], ids=["sm", "sm_syn"])
def test_sm_layout(syn, flags):
    raw = t.encode_lbtru_sm(0x01020304, sm_sqn=7, lead_sqn=9, trail_sqn=2, syn=syn)
    assert raw == bytes.fromhex(f"02 01 {flags} 00000007 00000009 00000002  00 08 0000 01020304")


def test_nak_layout_is_list_then_sid_then_cid():
    raw = t.encode_lbtru_nak(0x01020304, 0x0A0B0C0D, [1, 0xFFFFFFFF])
    assert raw == bytes.fromhex("03 01 0000 0002 0000 00000001 ffffffff  02 08 0000 01020304  00 08 0000 0a0b0c0d")
    empty = t.encode_lbtru_nak(0x01020304, 0x0A0B0C0D, [])
    assert empty == bytes.fromhex("03 01 0000 0000 0000  02 08 0000 01020304  00 08 0000 0a0b0c0d")


@pytest.mark.parametrize("reason", sorted(NCF_REASON_NAMES), ids=lambda r: NCF_REASON_NAMES[r])
def test_ncf_layout_puts_the_reason_in_the_high_nibble_then_the_sid(reason):
    raw = t.encode_lbtru_ncf(0x01020304, trail_sqn=4, reason=reason, sqns=[5, 6])
    assert raw == bytes.fromhex(f"04 01 0000 00000004 0002 00 {reason}0 00000005 00000006  00 08 0000 01020304")


def test_ack_layout():
    raw = t.encode_lbtru_ack(0x01020304, 0x0A0B0C0D, ack_sqn=9)
    assert raw == bytes.fromhex("05 01 0000 00000009  02 08 0000 01020304  00 08 0000 0a0b0c0d")


def test_creq_layout_is_the_syn_request_then_sid_then_cid():
    raw = t.encode_lbtru_creq(0x01020304, 0x0A0B0C0D)
    assert raw == bytes.fromhex("06 01 0000  02 08 0000 01020304  00 08 0000 0a0b0c0d")


def test_rst_layout_has_the_reason_and_no_options():
    assert t.encode_lbtru_rst() == bytes.fromhex("07 00 0000")
    assert t.encode_lbtru_rst(0x0102) == bytes.fromhex("07 00 0102")


# ---- round trips -----------------------------------------------------------------------------

@pytest.mark.parametrize("flags", [0, RX], ids=["original", "retransmission"])
def test_data_round_trip(flags):
    packet = LbtruData(SESSION, 41, 37, lbmc_frames((5, 0, b"alpha"), (9, 3, b"beta")), flags)
    decoded = t.decode_lbtru(encode(packet))
    assert plain(decoded) == packet
    assert decoded.retransmission == bool(flags)


def test_data_defaults_trail_to_sqn_and_keeps_only_the_retransmission_flag():
    decoded = t.decode_lbtru(t.encode_lbtru_data(SESSION, 12, b"", flags=RX | t.FLAG_SYN | 0x00FF))
    assert (decoded.sqn, decoded.trail_sqn, decoded.flags, decoded.session_id) == (12, 12, RX, SESSION)
    assert bytes(decoded.payload) == b""
    # flag bits other than RETRANSMISSION on the wire are not reported either
    raw = bytearray(t.encode_lbtru_data(SESSION, 12, b""))
    raw[2:4] = b"\xbf\xff"
    assert t.decode_lbtru(bytes(raw)).flags == 0
    raw[2:4] = b"\xff\xff"
    assert t.decode_lbtru(bytes(raw)).flags == RX


def test_decode_accepts_bytes_bytearray_and_memoryview():
    raw = t.encode_lbtru_data(SESSION, 1, b"payload")
    decoded = [plain(t.decode_lbtru(kind(raw))) for kind in (bytes, bytearray, memoryview)]
    assert decoded[0] == decoded[1] == decoded[2] == LbtruData(SESSION, 1, 1, b"payload", 0)


@pytest.mark.parametrize("syn", [False, True], ids=["sm", "sm_syn"])
def test_sm_round_trip(syn):
    packet = LbtruSm(SESSION, sm_sqn=3, lead_sqn=0xFFFFFFFF, trail_sqn=0xFFFFFF00, syn=syn)
    assert round_trip(packet) == packet


@pytest.mark.parametrize("sqns", [(), (7,), (1, 2, 3, 0xFFFFFFFF, 0), tuple(range(1000, 1300))],
                         ids=["empty", "one", "several", "300"])
def test_nak_round_trip(sqns):
    packet = LbtruNak(SESSION, CLIENT, sqns)
    assert round_trip(packet) == packet


@pytest.mark.parametrize("sqns", [(), (7,), (101, 102, 150), tuple(range(300))], ids=["empty", "one", "several", "300"])
@pytest.mark.parametrize("reason", sorted(NCF_REASON_NAMES), ids=lambda r: NCF_REASON_NAMES[r])
def test_ncf_round_trip_for_every_reason(reason, sqns):
    packet = LbtruNcf(SESSION, trail_sqn=100, reason=reason, sqns=sqns)
    assert round_trip(packet) == packet


def test_ack_creq_and_rst_round_trip():
    for packet in (LbtruAck(SESSION, CLIENT, 0xFFFFFFFE), LbtruCreq(SESSION, CLIENT), LbtruRst(),
                   LbtruRst(0xFFFF)):
        assert round_trip(packet) == packet
    assert t.decode_lbtru(t.encode_lbtru_rst()).session_id is None


def test_sequence_numbers_wrap_modulo_2_32():
    assert t.decode_lbtru(t.encode_lbtru_data(1, 2**32 + 7, b"", trail_sqn=-1)).sqn == 7
    assert t.decode_lbtru(t.encode_lbtru_data(1, 2**32 + 7, b"", trail_sqn=-1)).trail_sqn == 0xFFFFFFFF
    assert t.decode_lbtru(t.encode_lbtru_sm(1, -1, 2**32, 2**33 + 1)) == LbtruSm(1, 0xFFFFFFFF, 0, 1)
    assert t.decode_lbtru(t.encode_lbtru_nak(1, 2, [-1, 2**32])).sqns == (0xFFFFFFFF, 0)
    assert t.decode_lbtru(t.encode_lbtru_ncf(1, -1, t.NCF_SHED, [2**32 + 1])) == LbtruNcf(
        1, 0xFFFFFFFF, t.NCF_SHED, (1,))
    assert t.decode_lbtru(t.encode_lbtru_ack(1, 2, -1)) == LbtruAck(1, 2, 0xFFFFFFFF)


u32 = st.integers(0, 0xFFFFFFFF)
u16 = st.integers(0, 0xFFFF)
sqn_lists = st.lists(u32, max_size=40).map(tuple)
packets = st.one_of(
    st.builds(LbtruData, session_id=u32, sqn=u32, trail_sqn=u32, payload=st.binary(max_size=200),
              flags=st.sampled_from([0, RX])),
    st.builds(LbtruSm, session_id=u32, sm_sqn=u32, lead_sqn=u32, trail_sqn=u32, syn=st.booleans()),
    st.builds(LbtruNak, session_id=u32, client_id=u32, sqns=sqn_lists),
    st.builds(LbtruNcf, session_id=u32, trail_sqn=u32, reason=st.integers(0, 15), sqns=sqn_lists),
    st.builds(LbtruAck, session_id=u32, client_id=u32, ack_sqn=u32),
    st.builds(LbtruCreq, session_id=u32, client_id=u32),
    st.builds(LbtruRst, reason=u16),
)


@FAST
@given(packets)
def test_every_packet_round_trips(packet):
    raw = encode(packet)
    assert round_trip(packet) == packet
    assert raw[0] >> 4 == t.LBTRU_VERSION
    if isinstance(packet, LbtruRst):
        assert raw[1] == t.NHDR_DATA and len(raw) == 4
        return
    assert raw[1] == t.NHDR_SID          # every other packet names its session first
    if isinstance(packet, LbtruData):
        assert raw[t.DATA_HEADER.size:t.HEADER_SIZE] == option(t.NHDR_DATA, packet.session_id)
        return
    if isinstance(packet, (LbtruNak, LbtruAck, LbtruCreq)):      # receivers: SID, then CID
        options = option(t.NHDR_CID, packet.session_id) + option(t.NHDR_DATA, packet.client_id)
    else:
        options = option(t.NHDR_DATA, packet.session_id)
    fixed = {LbtruSm: t.SM_HEADER, LbtruNak: t.NAK_HEADER, LbtruNcf: t.NCF_HEADER, LbtruAck: t.ACK_HEADER,
             LbtruCreq: t.MAIN_HEADER}[type(packet)].size
    sqns = getattr(packet, "sqns", ())
    assert raw[fixed + 4 * len(sqns):] == options


@FAST
@given(u32, u32, u32, st.sampled_from([0, RX]), st.binary(max_size=64))
def test_data_header_prefixes_every_data_packet(session_id, sqn, trail_sqn, flags, payload):
    raw = t.encode_lbtru_data(session_id, sqn, payload, trail_sqn, flags)
    assert raw == t.data_header(session_id, sqn, trail_sqn, flags) + payload
    assert raw[t.RETRANSMISSION_BYTE] & (RX >> 8) == flags >> 8


# ---- encoders refuse what does not fit -------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda: t.encode_lbtru_nak(1, 2, range(t.MAX_LIST + 1)),
    lambda: t.encode_lbtru_ncf(1, 0, t.NCF_SHED, [0] * (t.MAX_LIST + 1)),
], ids=["nak", "ncf"])
def test_encoders_reject_a_list_longer_than_its_count_field(call):
    with pytest.raises(WireError, match=r"LBT-RU: a list of 65536 sequence numbers \(at most 65535\)"):
        call()


def test_data_payload_must_leave_the_datagram_within_65507_bytes():
    largest = t.MAX_DATAGRAM - t.HEADER_SIZE
    raw = t.encode_lbtru_data(SESSION, 1, bytes(largest))
    assert len(raw) == t.MAX_DATAGRAM == 65507
    assert len(t.decode_lbtru(raw).payload) == largest
    with pytest.raises(WireError, match=r"LBT-RU DATA: 65508 bytes do not fit a UDP datagram \(65507\)"):
        t.encode_lbtru_data(SESSION, 1, bytes(largest + 1))


@pytest.mark.parametrize("what, encoder, fixed", [
    ("NAK", lambda sqns: t.encode_lbtru_nak(SESSION, CLIENT, sqns), t.NAK_HEADER.size + 2 * t.OPTION.size),
    ("NCF", lambda sqns: t.encode_lbtru_ncf(SESSION, 0, t.NCF_SHED, sqns), t.NCF_HEADER.size + t.OPTION.size),
], ids=["nak", "ncf"])
def test_nak_and_ncf_lists_must_leave_the_datagram_within_65507_bytes(what, encoder, fixed):
    # A u16 count allows 65535 entries, a UDP datagram far fewer: 16370 for a NAK, 16371 for an NCF.
    most = (t.MAX_DATAGRAM - fixed) // 4
    raw = encoder(range(most))
    assert len(raw) <= t.MAX_DATAGRAM < len(raw) + 4
    assert t.decode_lbtru(raw).sqns == tuple(range(most))
    with pytest.raises(WireError, match=rf"LBT-RU {what}: {len(raw) + 4} bytes do not fit a UDP datagram"):
        encoder(range(most + 1))


@pytest.mark.parametrize("call", [
    lambda: t.encode_lbtru_data(2**32, 0, b""),
    lambda: t.data_header(-1, 0, 0),
    lambda: t.encode_lbtru_sm(2**32, 0, 0, 0),
    lambda: t.encode_lbtru_nak(2**32, 1, [1]),
    lambda: t.encode_lbtru_nak(1, 2**32, [1]),
    lambda: t.encode_lbtru_ncf(-1, 0, t.NCF_SHED, [1]),
    lambda: t.encode_lbtru_ack(1, -1, 0),
    lambda: t.encode_lbtru_creq(2**32 + 5, 1),
    lambda: t.encode_lbtru_creq(1, 2**40),
    lambda: t.encode_lbtru_rst(0x10000),
], ids=["data_session", "data_header_session", "sm_session", "nak_session", "nak_client", "ncf_session",
        "ack_client", "creq_session", "creq_client", "rst_reason"])
def test_encoders_reject_ids_that_do_not_fit_32_bits(call):
    with pytest.raises(WireError, match="LBT-RU"):
        call()


# ---- malformed input -------------------------------------------------------------------------

VALID = {
    "data": t.encode_lbtru_data(SESSION, 1, b""),
    "sm": t.encode_lbtru_sm(SESSION, 0, 1, 0),
    "nak": t.encode_lbtru_nak(SESSION, CLIENT, []),
    "ncf": t.encode_lbtru_ncf(SESSION, 0, t.NCF_NO_RETRY, []),
    "ack": t.encode_lbtru_ack(SESSION, CLIENT, 0),
    "creq": t.encode_lbtru_creq(SESSION, CLIENT),
    "rst": t.encode_lbtru_rst(),
}
# Where each type's option chain starts (with an empty list), and who sends it.
OPTIONS_AT = {"data": 12, "sm": 16, "nak": 8, "ncf": 12, "ack": 8, "creq": 4}
SOURCE_SENT = ["data", "sm", "ncf"]          # SID only
RECEIVER_SENT = ["nak", "ack", "creq"]       # SID, then CID


def test_options_at_is_where_the_chain_starts():
    for name, at in OPTIONS_AT.items():
        raw = VALID[name]
        assert raw[at:] == (option(t.NHDR_CID, SESSION) + option(t.NHDR_DATA, CLIENT) if name in RECEIVER_SENT
                            else option(t.NHDR_DATA, SESSION)), name


@pytest.mark.parametrize("name", VALID)
def test_every_truncated_packet_is_rejected_naming_the_offset(name):
    raw = VALID[name]
    assert t.decode_lbtru(raw) is not None           # the whole packet, with an empty list or payload
    for length in range(len(raw)):
        # header, type header or option: the message names where the bytes ran out
        assert_rejected(raw[:length], r"^LBT-RU", rf"truncated at offset {length}\b")


@pytest.mark.parametrize("name", RECEIVER_SENT + SOURCE_SENT)
def test_a_truncated_option_names_the_option(name):
    raw, at = VALID[name], OPTIONS_AT[name]
    last = at + 8 if name in RECEIVER_SENT else at
    kind = t.NHDR_CID if name in RECEIVER_SENT else t.NHDR_SID
    assert_rejected(raw[:last + 1], rf"option header truncated at offset {last + 1}\b")
    for length in range(last + 2, last + 8):
        assert_rejected(raw[:length], rf"option 0x0{kind} truncated at offset {length}\b")


@pytest.mark.parametrize("packet, offset", [
    (LbtruNak(SESSION, CLIENT, (1, 2, 3)), t.NAK_HEADER.size),
    (LbtruNcf(SESSION, 0, t.NCF_SHED, (1, 2, 3)), t.NCF_HEADER.size),
], ids=["nak", "ncf"])
def test_a_list_shorter_than_its_count_is_rejected_at_the_list_offset(packet, offset):
    raw = encode(packet)
    list_end = offset + 12
    for missing in (1, 3, 4, 12):
        assert_rejected(raw[:list_end - missing], rf"3 sequence numbers at offset {offset} need 12 bytes, "
                                                  rf"{12 - missing} remain")
    count_at = offset - 4            # the u16 count is the type header's last-but-one field
    huge = raw[:count_at] + (0xFFFF).to_bytes(2, "big") + raw[count_at + 2:]
    assert_rejected(huge, rf"65535 sequence numbers at offset {offset} need 262140 bytes, {len(raw) - offset} remain")
    # A count a little too large reads into the options: still rejected, at an offset.
    for count in range(4, 4 + len(raw) // 4):
        claims_more = raw[:count_at] + count.to_bytes(2, "big") + raw[count_at + 2:]
        assert_rejected(claims_more, r"^LBT-RU", r"\boffset \d+\b")


def test_count_fields_are_where_the_layouts_say():
    assert t.encode_lbtru_nak(SESSION, CLIENT, [9, 9, 9])[4:6] == b"\x00\x03"
    assert t.encode_lbtru_ncf(SESSION, 0, t.NCF_SHED, [9, 9, 9])[8:10] == b"\x00\x03"


@pytest.mark.parametrize("kind", [1, *range(8, 16)])
def test_unknown_packet_type_is_rejected_at_offset_0(kind):
    raw = bytes([kind]) + VALID["sm"][1:]
    assert_rejected(raw, rf"packet type {kind} at offset 0")


@pytest.mark.parametrize("version", [1, 2, 15])
@pytest.mark.parametrize("name", VALID)
def test_wrong_version_is_rejected_at_offset_0(version, name):
    raw = VALID[name]
    assert_rejected(bytes([version << 4 | raw[0]]) + raw[1:], rf"version {version} at offset 0")


@pytest.mark.parametrize("next_hdr", [t.NHDR_SID, t.NHDR_CID, 0x55])
def test_an_rst_with_a_next_header_is_rejected_at_offset_1(next_hdr):
    raw = bytes([t.LBTRU_TYPE_RST, next_hdr, 0, 0]) + option(t.NHDR_DATA, SESSION)
    assert_rejected(raw, rf"RST: next header 0x{next_hdr:02x} at offset 1 \(an RST carries no options\)")


@pytest.mark.parametrize("unknown", [0x03, 0x7F, 0xFF])
@pytest.mark.parametrize("name", OPTIONS_AT)
def test_an_unknown_option_is_rejected_at_its_offset(name, unknown):
    raw, at = VALID[name], OPTIONS_AT[name]
    assert_rejected(raw[:1] + bytes([unknown]) + raw[2:], rf"unknown option 0x{unknown:02x} at offset {at}\b")
    # second in the chain: the SID option's next header names it
    later = raw[:at] + bytes([unknown]) + raw[at + 1:at + 8] + option(t.NHDR_DATA, 1)
    assert_rejected(later, rf"unknown option 0x{unknown:02x} at offset {at + 8}\b")


@pytest.mark.parametrize("length", [0, 1, 4, 7, 9, 12, 16, 255])
@pytest.mark.parametrize("name", OPTIONS_AT)
def test_an_option_whose_length_is_not_8_is_rejected_at_its_offset(name, length):
    raw, at = VALID[name], OPTIONS_AT[name]
    bad_sid = raw[:at + 1] + bytes([length]) + raw[at + 2:]
    assert_rejected(bad_sid, rf"option 0x01 at offset {at} has length {length} \(it is 8\)")
    if name in RECEIVER_SENT:
        bad_cid = raw[:at + 9] + bytes([length]) + raw[at + 10:]
        assert_rejected(bad_cid, rf"option 0x02 at offset {at + 8} has length {length} \(it is 8\)")


@pytest.mark.parametrize("name", OPTIONS_AT)
def test_a_repeated_option_is_rejected_at_the_repeat(name):
    raw, at = VALID[name], OPTIONS_AT[name]
    # SID -> SID
    sid_twice = raw[:at] + bytes([t.NHDR_SID]) + raw[at + 1:at + 8] + option(t.NHDR_DATA, 2)
    assert_rejected(sid_twice, rf"option 0x01 repeated at offset {at + 8}\b")
    if name in RECEIVER_SENT:
        # SID -> CID -> CID
        cid_twice = raw[:at + 8] + bytes([t.NHDR_CID]) + raw[at + 9:] + option(t.NHDR_DATA, 3)
        assert_rejected(cid_twice, rf"option 0x02 repeated at offset {at + 16}\b")


@pytest.mark.parametrize("name", SOURCE_SENT)
def test_data_sm_and_ncf_without_a_session_id_are_rejected(name):
    raw, at = VALID[name], OPTIONS_AT[name]
    what = name.upper()
    no_options = raw[:1] + bytes([t.NHDR_DATA]) + raw[2:at]
    assert_rejected(no_options, rf"LBT-RU {what}: no session id option \(SID\) after offset {at}\b")
    cid_instead = raw[:1] + bytes([t.NHDR_CID]) + raw[2:]
    assert_rejected(cid_instead, rf"LBT-RU {what}: no session id option \(SID\) after offset {at}\b")


@pytest.mark.parametrize("name", RECEIVER_SENT)
def test_nak_ack_and_creq_need_both_a_session_and_a_client_id(name):
    raw, at = VALID[name], OPTIONS_AT[name]
    what = name.upper()
    sid_only = raw[:at] + bytes([t.NHDR_DATA]) + raw[at + 1:at + 8]
    assert_rejected(sid_only, rf"LBT-RU {what}: no client id option \(CID\) after offset {at}\b")
    cid_only = raw[:1] + bytes([t.NHDR_CID]) + raw[2:at] + raw[at + 8:]
    assert_rejected(cid_only, rf"LBT-RU {what}: no session id option \(SID\) after offset {at}\b")
    no_options = raw[:1] + bytes([t.NHDR_DATA]) + raw[2:at]
    assert_rejected(no_options, rf"LBT-RU {what}: no session id option \(SID\) after offset {at}\b")


def test_cid_before_sid_is_accepted():
    # The chain is linked through next_hdr, so its order is the sender's choice.
    raw = bytes.fromhex("05 02 0000 00000009") + option(t.NHDR_SID, CLIENT) + option(t.NHDR_DATA, SESSION)
    assert t.decode_lbtru(raw) == LbtruAck(SESSION, CLIENT, 9)


@pytest.mark.parametrize("fmt", [1, 2, 15])
def test_non_selective_nak_is_rejected_at_its_format_field(fmt):
    # format is a u16 at offset 6 whose low nibble is the format (LBTRU_NAK_HDR_FORMAT_MASK 0x000F)
    raw = t.encode_lbtru_nak(SESSION, CLIENT, [5])
    assert_rejected(raw[:6] + fmt.to_bytes(2, "big") + raw[8:], rf"NAK: format {fmt} at offset 6\b")
    # the high bits of the u16 are not the format: still a selective NAK
    assert t.decode_lbtru(raw[:6] + b"\x01\x00" + raw[8:]).sqns == (5,)


@pytest.mark.parametrize("fmt", [1, 2, 15])
def test_non_selective_ncf_is_rejected_at_offset_11(fmt):
    raw = t.encode_lbtru_ncf(SESSION, 0, t.NCF_SHED, [5])
    assert_rejected(raw[:11] + bytes([t.NCF_SHED << 4 | fmt]) + raw[12:], rf"NCF: format {fmt} at offset 11\b")


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
        packet = t.decode_lbtru(datagram)
    except WireError as err:
        assert "LBT-RU" in str(err) and re.search(r"\boffset \d+\b", str(err)), str(err)
        return
    assert isinstance(packet, PACKET_TYPES)
    # What decodes re-encodes to the same values (a CREQ's request is always SYN when we send one).
    expected = dataclasses.replace(packet, request=t.CREQ_SYN) if isinstance(packet, LbtruCreq) else plain(packet)
    assert round_trip(expected) == expected


# ---- tshark oracle ---------------------------------------------------------------------------

def _data(sqn: int, trail: int, *messages, flags: int = 0) -> LbtruData:
    return LbtruData(SESSION, sqn, trail, lbmc_frames(*messages), flags)


TO_SOURCE, TO_RECEIVER = (RECEIVER, SOURCE), (SOURCE, RECEIVER)
# A short conversation: the receiver asks for the session, the source answers with a SYN SM
# and sends DATA 0-2; the receiver misses 1 and 2, NAKs them, the source retransmits 1 and
# answers with an NCF for each reason (in life one reason per NCF burst); the receiver keeps
# the session alive with an ACK; the source, restarted, resets it.
DATA_1 = _data(1, 0, (9, 0, b"gamma"))
SESSION_SCRIPT = [
    ("creq", LbtruCreq(SESSION, CLIENT), *TO_SOURCE),
    ("sm_syn", LbtruSm(SESSION, 0, 0xFFFFFFFF, 0, syn=True), *TO_RECEIVER),
    ("data0", _data(0, 0, (5, 0, b"alpha"), (5, 1, b"beta")), *TO_RECEIVER),
    ("data1", DATA_1, *TO_RECEIVER),
    ("data2", _data(2, 0, (5, 2, b"delta"), (9, 1, b"epsilon")), *TO_RECEIVER),
    ("sm1", LbtruSm(SESSION, 1, 2, 0), *TO_RECEIVER),
    ("nak", LbtruNak(SESSION, CLIENT, (1, 2)), *TO_SOURCE),
    ("rx1", dataclasses.replace(DATA_1, flags=RX), *TO_RECEIVER),
    ("data3", _data(3, 1, (5, 3, b"zeta")), *TO_RECEIVER),
    ("sm2", LbtruSm(SESSION, 2, 3, 1), *TO_RECEIVER),
    ("ncf_no_retry", LbtruNcf(SESSION, 1, t.NCF_NO_RETRY, (0,)), *TO_RECEIVER),
    ("ncf_ignored", LbtruNcf(SESSION, 1, t.NCF_IGNORED, (1,)), *TO_RECEIVER),
    ("ncf_rx_delay", LbtruNcf(SESSION, 1, t.NCF_RX_DELAY, (2, 3)), *TO_RECEIVER),
    ("ncf_shed", LbtruNcf(SESSION, 1, t.NCF_SHED, (2, 3, 4)), *TO_RECEIVER),
    ("ack", LbtruAck(SESSION, CLIENT, 3), *TO_SOURCE),
    ("rst", LbtruRst(), *TO_RECEIVER),
]
OTHER_SESSION = 0x00BEEF01
OTHER_CLIENT = 0x00000002
OTHER_SCRIPT = [
    ("creq", LbtruCreq(OTHER_SESSION, OTHER_CLIENT), OTHER_RECEIVER, OTHER_SOURCE),
    ("sm_syn", LbtruSm(OTHER_SESSION, 0, 0xFFFFFFFF, 0, syn=True), OTHER_SOURCE, OTHER_RECEIVER),
    ("data", LbtruData(OTHER_SESSION, 0, 0, lbmc_frames((2, 0, b"other"))), OTHER_SOURCE, OTHER_RECEIVER),
    ("nak", LbtruNak(OTHER_SESSION, OTHER_CLIENT, (1,)), OTHER_RECEIVER, OTHER_SOURCE),
    ("ncf", LbtruNcf(OTHER_SESSION, 0, t.NCF_RX_DELAY, (1,)), OTHER_SOURCE, OTHER_RECEIVER),
    ("ack", LbtruAck(OTHER_SESSION, OTHER_CLIENT, 0), OTHER_RECEIVER, OTHER_SOURCE),
    ("rst", LbtruRst(), OTHER_SOURCE, OTHER_RECEIVER),
]


def write_capture(path, script) -> dict[str, int]:
    """One UDP datagram per script line; returns name -> frame number."""
    with PcapWriter(path) as pcap:
        return {name: pcap.udp(encode(packet), src, dst) for name, packet, src, dst in script}


def expert_marker(packet) -> tuple[str, str] | None:
    """(severity, message) of the expert info packet-lbtru.c adds to a well-formed packet, if any.

    Checked with ``tshark -r file.pcap -q -z expert`` and against the dissector's ei table:
    every NAK gets "NAK" at Warning severity (ei_lbtru_analysis_nak: PI_SEQUENCE, PI_WARN,
    added unconditionally by dissect_lbtru_nak: a NAK means loss, which is what the marker
    reports, not a fault in the packet); every NCF a Note "NCF <reason>"; every CREQ a Chat
    "CREQ SYN", every SM a Chat "SM" or "SM SYN", every ACK a Chat "ACK", every RST a Chat
    "RST Default". DATA, retransmissions included, gets none (without sequence analysis).
    """
    if isinstance(packet, LbtruNak):
        return "Warn", "NAK"
    if isinstance(packet, LbtruNcf):
        return "Note", f"NCF {NCF_REASON_NAMES[packet.reason]}"
    if isinstance(packet, LbtruSm):
        return "Chat", "SM SYN" if packet.syn else "SM"
    if isinstance(packet, LbtruCreq):
        return "Chat", "CREQ SYN"
    if isinstance(packet, LbtruAck):
        return "Chat", "ACK"
    if isinstance(packet, LbtruRst):
        assert packet.reason == t.RST_DEFAULT
        return "Chat", "RST Default"
    return None


def expected_expert_rows(script, sequence_analysis: bool = False) -> list[str]:
    """The -z expert rows for a script: its markers, and nothing else (no Error, no other Warning).

    With lbtru.sequence_analysis a retransmission also gets a Note "Data retransmission".
    """
    counts: Counter = Counter()
    for _name, packet, _src, _dst in script:
        marker = expert_marker(packet)
        if marker:
            counts[f"{marker[0]}/Sequence/LBT-RU: {marker[1]}"] += 1
        if sequence_analysis and isinstance(packet, LbtruData) and packet.retransmission:
            counts["Note/Sequence/LBT-RU: Data retransmission"] += 1
    return sorted(f"{row} (x{count})" for row, count in counts.items())


def _ints(frame: dict, field: str) -> list[int]:
    return [int(value, 0) for value in frame.get(field, [])]


def _one(frame: dict, field: str) -> int:
    values = _ints(frame, field)
    assert len(values) == 1, f"{field}: {frame.get(field)!r}"
    return values[0]


def tshark_options(frame: dict) -> tuple[int | None, int | None]:
    """(session id, client id) from tshark's option fields, checking the chain's links and lengths."""
    session_ids, client_ids = _ints(frame, "lbtru.opt_sid.session_id"), _ints(frame, "lbtru.opt_cid.client_id")
    assert len(session_ids) <= 1 and len(client_ids) <= 1 and "lbtru.opt_unknown" not in frame, frame
    assert set(_ints(frame, "lbtru.opt_sid.hdr_len") + _ints(frame, "lbtru.opt_cid.hdr_len")) <= {t.OPTION.size}
    if client_ids:       # receivers: header -> SID -> CID -> data
        assert _one(frame, "lbtru.hdr.next_hdr") == t.NHDR_SID and session_ids
        assert _one(frame, "lbtru.opt_sid.next_hdr") == t.NHDR_CID
        assert _one(frame, "lbtru.opt_cid.next_hdr") == t.NHDR_DATA
    elif session_ids:    # sources: header -> SID -> data
        assert _one(frame, "lbtru.hdr.next_hdr") == t.NHDR_SID
        assert _one(frame, "lbtru.opt_sid.next_hdr") == t.NHDR_DATA
    else:
        assert _one(frame, "lbtru.hdr.next_hdr") == t.NHDR_DATA
    return (session_ids or [None])[0], (client_ids or [None])[0]


def tshark_packet(frame: dict):
    """The packet value rebuilt from tshark's lbtru fields (DATA payload from its LBMC fields)."""
    kind = _one(frame, "lbtru.hdr.type")
    assert _one(frame, "lbtru.hdr.ver") == t.LBTRU_VERSION
    session_id, client_id = tshark_options(frame)
    if kind == t.LBTRU_TYPE_DATA:
        flags = RX if _one(frame, "lbtru.hdr.flags.rx") else 0
        return LbtruData(session_id, _one(frame, "lbtru.data.sqn"), _one(frame, "lbtru.data.trail"),
                         lbmc_payload(frame), flags)
    if kind == t.LBTRU_TYPE_SM:
        return LbtruSm(session_id, _one(frame, "lbtru.sm.sqn"), _one(frame, "lbtru.sm.lead"),
                       _one(frame, "lbtru.sm.trail"), bool(_one(frame, "lbtru.hdr.flags.syn")))
    if kind == t.LBTRU_TYPE_NAK:
        sqns = tuple(_ints(frame, "lbtru.nak.list.nak"))
        assert _one(frame, "lbtru.nak.num") == len(sqns) and _one(frame, "lbtru.nak.format") == 0
        return LbtruNak(session_id, client_id, sqns)
    if kind == t.LBTRU_TYPE_NCF:
        sqns = tuple(_ints(frame, "lbtru.ncf.list.ncf"))
        assert _one(frame, "lbtru.ncf.num") == len(sqns) and _one(frame, "lbtru.ncf.format") == 0
        return LbtruNcf(session_id, _one(frame, "lbtru.ncf.trail"), _one(frame, "lbtru.ncf.reason"), sqns)
    if kind == t.LBTRU_TYPE_ACK:
        return LbtruAck(session_id, client_id, _one(frame, "lbtru.ack.sqn"))
    if kind == t.LBTRU_TYPE_CREQ:
        return LbtruCreq(session_id, client_id, _one(frame, "lbtru.hdr.request"))
    if kind == t.LBTRU_TYPE_RST:
        assert session_id is None and client_id is None
        return LbtruRst(_one(frame, "lbtru.hdr.reason"))
    raise AssertionError(f"tshark shows LBT-RU type {kind}")


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


def is_lbtru(frame: dict) -> bool:
    return "lbtru" in frame["frame.protocols"][0].split(":")


@pytest.fixture(scope="module")
def session_capture(tmp_path_factory):
    """The session script as a pcap, decoded by tshark; (frames by name, -z expert rows, path)."""
    tshark_path()   # fail, not skip, when the oracle is missing
    path = tmp_path_factory.mktemp("lbtru") / "session.pcap"
    where = write_capture(path, SESSION_SCRIPT)
    frames = decode(path, [])
    assert len(frames) == len(SESSION_SCRIPT)
    return {"frames": {name: frames[number - 1] for name, number in where.items()},
            "where": where, "expert": expert_info(path, [], min_severity="chat"), "path": path}


def test_tshark_decodes_every_packet_as_lbtru_with_our_values(session_capture):
    for name, packet, src, dst in SESSION_SCRIPT:
        frame = session_capture["frames"][name]
        assert frame["ip.src"] == [src[0]] and frame["ip.dst"] == [dst[0]], name
        assert _ints(frame, "udp.srcport") == [src[1]] and _ints(frame, "udp.dstport") == [dst[1]], name
        assert is_lbtru(frame), name
        assert "_ws.malformed" not in frame, name
        assert tshark_packet(frame) == packet, name


def test_tshark_sees_the_flags_lists_and_ids(session_capture):
    frames = session_capture["frames"]
    for name in ("data0", "data1", "data2", "data3"):
        assert _ints(frames[name], "lbtru.hdr.flags.rx") == [0], name
    assert _ints(frames["rx1"], "lbtru.hdr.flags.rx") == [1]
    assert _ints(frames["sm_syn"], "lbtru.hdr.flags.syn") == [1]
    assert [_one(frames[f"sm{i}"], "lbtru.hdr.flags.syn") for i in (1, 2)] == [0, 0]
    assert [_one(frames[name], "lbtru.sm.sqn") for name in ("sm_syn", "sm1", "sm2")] == [0, 1, 2]
    assert [_one(frames[name], "lbtru.sm.lead") for name in ("sm_syn", "sm1", "sm2")] == [0xFFFFFFFF, 2, 3]
    assert [_one(frames[name], "lbtru.data.sqn") for name in ("data0", "data1", "data2", "rx1", "data3")] == \
        [0, 1, 2, 1, 3]
    assert _ints(frames["nak"], "lbtru.nak.list.nak") == [1, 2]
    reasons = {name: _one(frames[name], "lbtru.ncf.reason") for name in frames if name.startswith("ncf")}
    assert reasons == {"ncf_no_retry": 0, "ncf_ignored": 1, "ncf_rx_delay": 2, "ncf_shed": 3}
    assert _ints(frames["ncf_shed"], "lbtru.ncf.list.ncf") == [2, 3, 4]
    assert _one(frames["ack"], "lbtru.ack.sqn") == 3
    for name in ("creq", "nak", "ack"):
        assert _one(frames[name], "lbtru.opt_cid.client_id") == CLIENT, name
    for name, frame in frames.items():
        expected = [] if name == "rst" else [SESSION]
        assert _ints(frame, "lbtru.opt_sid.session_id") == expected, name


def test_tshark_puts_every_session_packet_on_one_lbtru_channel_and_client(session_capture):
    # tshark keys a transport by source address, port and session id, and a client by the
    # receiver's address and port: packets both ways join them. The RST names no session
    # (see the codec's note), so tshark files it under session 0 of the same source port.
    frames = session_capture["frames"]
    channels = {name: tuple(frame.get("lbtru.channel.channel", ())) for name, frame in frames.items()}
    clients = {name: tuple(frame.get("lbtru.channel.client", ())) for name, frame in frames.items()}
    session_channels = {channel for name, channel in channels.items() if name != "rst"}
    assert len(session_channels) == 1 and () not in session_channels, channels
    assert channels["rst"] and channels["rst"] not in session_channels, channels
    assert set(clients.values()) == {("1",)}, clients


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


def test_each_frame_carries_exactly_its_marker(session_capture):
    path, where = session_capture["path"], session_capture["where"]
    expected = {}
    for name, packet, _src, _dst in SESSION_SCRIPT:
        marker = expert_marker(packet)
        if marker:
            expected[where[name]] = [f"{marker[0]}/{SEQUENCE_GROUP}: {marker[1]}"]
    assert expert_frames(path, [], min_severity="chat") == expected
    # the one Warning is the NAK marker on the NAK frame
    assert expert_info(path, [], min_severity="warn") == ["Warn/Sequence/LBT-RU: NAK (x1)"]
    assert expert_frames(path, [], min_severity="warn") == {where["nak"]: [f"Warn/{SEQUENCE_GROUP}: NAK"]}


def test_sequence_analysis_finds_no_gap_duplicate_or_reordering(session_capture):
    # With lbtru.sequence_analysis the dissector tracks DATA and SM sqns per client: our
    # in-order stream adds only the "Data retransmission" note of the retransmission.
    rows = expert_info(session_capture["path"], [], ["lbtru.sequence_analysis:TRUE"], min_severity="chat")
    assert sorted(rows) == expected_expert_rows(SESSION_SCRIPT, sequence_analysis=True), rows


def test_tshark_confirms_an_rst_cannot_carry_options(tmp_path):
    # Why decode_lbtru rejects an RST with a next header: packet-lbtru.c reads the option chain
    # of an RST from offset 2 (it does not step over the reason), so the SID option we would
    # append is never seen; the reason's low byte is taken for an option length of 0.
    path = tmp_path / "rst_with_sid.pcap"
    with PcapWriter(path) as pcap:
        pcap.udp(bytes([t.LBTRU_TYPE_RST, t.NHDR_SID, 0, 0]) + option(t.NHDR_DATA, SESSION), SOURCE, RECEIVER)
    [frame] = decode(path, [])
    assert is_lbtru(frame) and "lbtru.opt_sid.session_id" not in frame, frame
    assert _ints(frame, "lbtru.opt_sid.hdr_len") == [0] and "_ws.malformed" in frame, frame
    rows = expert_info(path, [], min_severity="chat")
    assert sorted(rows) == ["Chat/Sequence/LBT-RU: RST Default (x1)",
                            "Error/Malformed/LBT-RU: Zero-length header (x1)"], rows


def test_non_default_ports_decode_with_matching_lbtru_preferences(tmp_path):
    path = tmp_path / "other_ports.pcap"
    where = write_capture(path, OTHER_SCRIPT)
    without = decode(path, [])
    assert not any(is_lbtru(frame) for frame in without), [frame["frame.protocols"] for frame in without]
    frames = decode(path, [], OTHER_PREFS)
    for name, packet, _src, _dst in OTHER_SCRIPT:
        frame = frames[where[name] - 1]
        assert is_lbtru(frame), name
        assert tshark_packet(frame) == packet, name
    assert lbmc_messages(frames[where["data"] - 1]) == [(2, 0, b"other")]
    rows = expert_info(path, [], OTHER_PREFS, min_severity="chat")
    assert sorted(rows) == expected_expert_rows(OTHER_SCRIPT), rows
