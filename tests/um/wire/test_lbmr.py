"""LBMR codec: exact bytes for known packets, round trips for every record type, and
robustness: no input makes decode_lbmr raise anything but WireError."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.um.wire import lbmr as m
from router.um.wire.errors import WireError
from router.um.wire.lbmr_records import encode_tir

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# wire.md §4.3: topic "foo", TCP 10.0.0.5:14371, idx 1.
MINIMAL_TIR = bytes.fromhex("00000001 666f6f00 00060000 00000001 0a000005 3823")


# ---- examples ---------------------------------------------------------------------------------

def test_minimal_tir_is_the_22_bytes_of_the_spec():
    packet = m.LbmrPacket(m.TopicResolution([], [m.Tir("foo", m.TcpInfo("10.0.0.5", 14371), 1)]))
    assert m.encode_lbmr(packet) == MINIMAL_TIR
    assert len(MINIMAL_TIR) == 22
    assert m.decode_lbmr(MINIMAL_TIR) == packet
    assert m.decode_lbmr(memoryview(MINIMAL_TIR)) == packet


def test_tcp_info_length_follows_session_id():
    with_sid = m.Tir("foo", m.TcpInfo("10.0.0.5", 14371, session_id=0x1234), 7)
    raw = encode_tir(with_sid)
    assert raw[4:6] == b"\x00\x0a"            # transport TCP, tlen 10
    assert raw[-10:] == bytes.fromhex("0a000005 00001234 3823")
    assert m.tir_size(with_sid) == len(raw)


def test_gateway_tir_with_topic_options_and_trailer():
    otid = bytes(range(32))
    tir = m.Tir("foo", m.TcpInfo("10.0.0.5", 14371, 0x1234), 1,
                options=[m.CostOption(1, 0), m.OtidOption(otid), m.DomainIdOption(17)])
    trailer = [m.SrcIdOption(b"ABCDEFGH"), m.SrcTypeOption(m.SRC_TYPE_TNWGD),
               m.VersionOption(0x06090000), m.LocalDomainOption(17)]
    packet = m.LbmrPacket(m.TopicResolution([], [tir]), trailer, version=1)
    raw = m.encode_lbmr(packet)
    assert raw[0] == 0x18                      # version 1, OPTS, NORMAL
    topic_opts = raw[8 + 8:8 + 8 + 56]
    assert topic_opts[:4] == b"\x00\x04\x00\x38"  # OPT_LEN total 56 = 4 + 8 + 36 + 8
    assert topic_opts[4:12] == bytes.fromhex("0708 00 01 00000000")
    assert raw[-4:] == b"\x80\x04\x00\x24"       # trailer OPT_LEN, total 36, at the very end
    assert raw[-36:-24] == b"\x81\x0c\x00\x00ABCDEFGH"
    assert m.decode_lbmr(raw) == packet


def test_final_advertisement_carries_infinite_cost():
    tir = m.Tir("t", m.TcpInfo("1.2.3.4", 5), 3, options=[m.CostOption(2, m.COST_INFINITE)])
    raw = encode_tir(tir)
    assert raw.find(bytes.fromhex("0708 00 02 ffffffff")) > 0
    decoded = m.decode_lbmr(m.encode_lbmr(m.LbmrPacket(m.TopicResolution([], [tir]))))
    assert decoded.body.tirs[0].options[0].cost == m.COST_INFINITE


def test_remote_domain_route_is_0x1f_with_trailer():
    packet = m.LbmrPacket(m.RemoteDomainRoute("10.1.2.3", 4000, [5, 6]),
                          [m.SrcTypeOption(m.SRC_TYPE_TNWGD)], version=1)
    raw = m.encode_lbmr(packet)
    assert raw[0] == 0x1F and raw[1] == m.LBMR_HDR_EXT_TYPE_REMOTE_DOMAIN_ROUTE
    assert raw[:24] == bytes.fromhex("1f06 0002 0a010203 0fa0 0000 00000018 00000005 00000006")
    assert m.decode_lbmr(raw) == packet


def test_topic_management_layout():
    body = m.TopicManagement([m.Tmr(m.TMR_TOPIC_USE, m.TMR_FLAG_RESPONSE, "ab")])
    raw = m.encode_lbmr(m.LbmrPacket(body))
    assert raw == bytes.fromhex("04000000 000b 0001 0007 01 80 616200")


def test_tnwg_interest_layout():
    body = m.GatewayInterest([m.InterestRecord(m.INTEREST_PATTERN, m.PATTERN_PCRE, 9, "a.*")])
    raw = m.encode_lbmr(m.LbmrPacket(body))
    assert raw == bytes.fromhex("0705 0018 0000 0000 0010 0001 000c 80 01 00000009 612e2a00")


def test_unicast_keepalive_and_alive_types():
    assert m.encode_lbmr(m.LbmrPacket(m.TopicResolution([], []))) == b"\x00\x00\x00\x00"
    assert m.decode_lbmr(b"\x02\x00\x00\x00").body == m.UnicastAlive(2)
    assert m.decode_lbmr(b"\x03\x00\x00\x00").body == m.UnicastAlive(3)
    assert m.decode_lbmr(b"\x03\x01\x00\x00").body == m.RawBody(3, 1, 0, b"")


def test_tir_and_tqr_sizes_match_encoding():
    tir = m.Tir("topic/é", m.LbtrmInfo("1.1.1.1", "224.1.1.1", 9, 14400, 14390), 4,
                options=[m.UmqQinfoOption("queue"), m.RawTopicOption(0x33, b"xyz"), m.UlbOption(
                    1, bytes(8), 2, "3.3.3.3", 4)])
    assert m.tir_size(tir) == len(encode_tir(tir))
    assert m.tqr_size("topic/é") == len("topic/é".encode()) + 1


def test_non_utf8_names_from_other_senders_round_trip_byte_for_byte():
    raw = b"\x00\x01\x00\x00caf\xe9\xff\x00"          # latin-1 topic name in a TQR
    packet = m.decode_lbmr(raw)
    assert packet.body.tqrs[0].startswith("caf")
    assert m.encode_lbmr(packet) == raw


@pytest.mark.parametrize("raw, what", [
    (b"", "shorter than"),
    (b"\x00\x01\x00\x00foo", "NUL"),
    (MINIMAL_TIR[:-1], "need 6 bytes, only 5 left at offset 16"),
    (MINIMAL_TIR + b"\x00", "trailing"),
    (bytes.fromhex("00000001 666f6f00 00080000 00000001 0a000005 38230000"), "tlen"),
    (b"\x08\x00\x00\x00\x80\x04\x00\x03", "trailer"),
    (b"\x08\x00\x00\x00\x81\x04\x00\x08", "OPT_LEN"),
    (b"\x08\x00\x00\x00\x81\x04\x00\x00\x80\x04\x00\x08", "must be"),
    (bytes.fromhex("00000001 666f6f00 80060000 00000001 00040008 07000000"), "has length 0"),
    (bytes.fromhex("00000001 666f6f00 80060000 00000001 00040040 07080000"), "does not fit"),
    (bytes.fromhex("04000000 0004 0001 0003 0100"), "TMR length"),
    (bytes.fromhex("0705 0014 0001 0000 0010 01 00 00000000 00000000 02030000"), "bad length 3"),
    (bytes.fromhex("0705 0014 0001 0000 0011 01 00 00000000 00000000 02040000"), "ctxinfo length 17"),
])
def test_malformed_packets_raise_wire_error_naming_the_problem(raw, what):
    with pytest.raises(WireError, match=what):
        m.decode_lbmr(raw)


@pytest.mark.parametrize("body", [
    m.TopicResolution(["a\x00b"], []),
    m.TopicResolution([], [m.Tir("t", m.TcpInfo("10.0.0.256", 1), 1)]),
    m.TopicResolution([], [m.Tir("t", m.TcpInfo("10.0.0.1", 70000), 1)]),
    m.TopicResolution([], [m.Tir("t", m.TcpInfo("1.2.3", 1), 1)]),
    m.TopicResolution([], [m.Tir("t", m.RawTransportInfo(m.TRANSPORT_TCP, b"123456"), 1)]),
    m.TopicResolution([], [m.Tir("t", m.TcpInfo("1.2.3.4", 1), 1, options=[m.OtidOption(b"short")])]),
    m.TopicResolution(["q"] * 256, []),
    m.UnicastAlive(4),
    m.RawBody(0, 0, 0, b""),
    m.RawBody(2, 0, 0, b""),
    m.RawExt(m.LBMR_HDR_EXT_TYPE_TOPIC_RES_REQUEST, b"\x00\x01"),
    m.RawExt(0x01, b"\x00"),
    m.GatewayContextInfo(1, 0, 0, [m.CostOption(1, 1)]),
    m.GatewayContextInfo(1, 0, 0, [m.RawTnwgOption(m.TNWG_OPT_DOMAIN, b"\x00\x00\x00\x00\x00\x01")]),
    m.TopicResolution([], [m.Tir("t", m.TcpInfo("1.2.3.4", 1), 1, options=[m.RawTopicOption(m.TOPT_COST, bytes(6))])]),
    "not a body",
])
def test_encoder_rejects_values_that_do_not_fit_with_wire_error(body):
    with pytest.raises(WireError):
        m.encode_lbmr(m.LbmrPacket(body))


def test_raw_forms_of_modelled_packet_options_are_refused():
    # They would come back as the typed option, so decode(encode(p)) == p would not hold.
    with pytest.raises(WireError, match="modelled"):
        m.encode_lbmr(m.LbmrPacket(m.TopicResolution([], []), [m.RawPacketOption(m.LBMR_OPT_SRC_TYPE, b"\x00\x01")]))


def test_encoder_rejects_bad_version():
    with pytest.raises(WireError):
        m.encode_lbmr(m.LbmrPacket(m.TopicResolution([], []), version=16))


# ---- strategies ---------------------------------------------------------------------------------

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
ips = st.builds(lambda n: ".".join(str((n >> s) & 0xFF) for s in (24, 16, 8, 0)), u32)
ctxinsts = st.binary(min_size=8, max_size=8)
texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)

transports = st.one_of(
    st.builds(m.TcpInfo, ips, u16, st.none() | u32),
    st.builds(m.LbtruInfo, ips, u16, st.none() | u32),
    st.builds(m.LbtrmInfo, ips, ips, u32, u16, u16),
    st.builds(m.LbtipcInfo, u32, u32, u16),
    st.builds(m.LbtsmxInfo, u32, u32, u16),
    st.builds(m.LbtrdmaInfo, ips, u32, u16),
    st.builds(m.RawTransportInfo, st.sampled_from([0x02, 0x11, 0x7F, 0x30]), st.binary(max_size=30)),
)

topic_options = st.one_of(
    st.builds(m.UmeOption, u16, u16, ips, ips, u32, u32, u32, u32, u16),
    st.builds(m.UmeStoreOption, u8, u16, u16, ips, u32, u8),
    st.builds(m.UmeStoreGroupOption, u8, u16, u8),
    st.builds(m.LateJoinOption, u16, ips, u32, u32, u32, u16),
    st.builds(m.UmqRcrIdxOption, u32, u16),
    st.builds(m.UmqQinfoOption, st.text(st.characters(blacklist_categories=("Cs",)), max_size=20), u16),
    st.builds(m.CostOption, u8, u32, u8),
    st.builds(m.OtidOption, st.binary(min_size=32, max_size=32), u16),
    st.builds(m.CtxInstOption, ctxinsts, st.sampled_from([0x09, 0x0A, 0x0C]), u8, u8),
    st.builds(m.UlbOption, u32, ctxinsts, u32, ips, u16, u16),
    st.builds(m.DomainIdOption, u32, u16),
    st.builds(m.ExFuncOption, u16, ips, u32, u16),
    st.builds(m.RawTopicOption, st.sampled_from([0x0F, 0x10, 0x7F, 0xFF]), st.binary(max_size=20)),
)

tirs = st.builds(m.Tir, texts, transports, u32, u16, st.lists(topic_options, max_size=4))

packet_options = st.one_of(
    st.builds(m.SrcIdOption, ctxinsts, u16),
    st.builds(m.SrcTypeOption, u8, u8),
    st.builds(m.VersionOption, u32, u16),
    st.builds(m.LocalDomainOption, u32, u16),
    st.builds(m.RawPacketOption, st.sampled_from([0x85, 0x90, 0x01]), st.binary(max_size=10)),
)

tnwg_options = st.one_of(
    st.builds(m.TnwgCtxInstOption, ctxinsts, u16),
    st.builds(m.TnwgAddressOption, ips, u16, u16),
    st.builds(m.TnwgDomainOption, u32, u16),
    st.builds(m.TnwgNameOption, texts, u16),
    st.builds(m.RawTnwgOption, st.sampled_from([0x04, 0x10, 0xFF]), st.binary(min_size=2, max_size=10)),
)

rci_options = st.one_of(
    st.builds(m.RciAddressOption, u32, ips, u16, u16),
    st.builds(m.RciInstanceOption, ctxinsts, u16),
    st.builds(m.RciOdomainOption, u32, u16),
    st.builds(m.RciNameOption, texts, u16),
    st.builds(m.RawRciOption, st.sampled_from([0x00, 0x05, 0x80]), st.binary(min_size=2, max_size=10)),
)

bodies = st.one_of(
    st.builds(m.TopicResolution, st.lists(texts, max_size=5), st.lists(tirs, max_size=4)),
    st.builds(m.WildcardQuery, st.lists(st.builds(m.WcTqr, texts, u8), max_size=5), st.lists(tirs, max_size=2)),
    st.builds(m.UnicastAlive, st.sampled_from([2, 3])),
    st.builds(m.TopicManagement, st.lists(st.builds(m.Tmr, u8, u8, texts), max_size=6)),
    st.builds(m.RawBody, st.sampled_from([2, 3, 5, 6]), u8, u16, st.binary(max_size=40)).filter(
        lambda body: body.hdr_type in (5, 6) or body.tqrs or body.tirs or body.data),
    st.builds(m.TopicResRequest, u16),
    st.builds(m.GatewayInterest, st.lists(st.builds(m.InterestRecord, u8, u8, u32, texts), max_size=5)),
    st.builds(m.GatewayContextInfo, u8, u32, u32, st.lists(tnwg_options, max_size=4)),
    st.builds(m.GatewayTopicResRequest, st.lists(tnwg_options, max_size=4)),
    st.builds(m.RemoteDomainRoute, ips, u16, st.lists(u32, max_size=8)),
    st.builds(m.RemoteContextInfo, st.lists(
        st.builds(m.RemoteContextRecord, u16, st.lists(rci_options, max_size=4)), max_size=3)),
    st.builds(m.RawExt, st.sampled_from([0x01, 0x02, 0x03, 0x08, 0xFF]), st.binary(min_size=2, max_size=40)),
)

packets = st.builds(m.LbmrPacket, bodies, st.lists(packet_options, max_size=4), st.integers(0, 15))


# ---- properties ---------------------------------------------------------------------------------

@FAST
@given(packets)
def test_round_trip_every_record_type(packet):
    raw = m.encode_lbmr(packet)
    decoded = m.decode_lbmr(raw)
    assert decoded == packet
    assert m.encode_lbmr(decoded) == raw


@FAST
@given(tirs)
def test_tir_size_is_exact(tir):
    assert m.tir_size(tir) == len(encode_tir(tir))


def _decode_or_wire_error(raw: bytes) -> None:
    try:
        packet = m.decode_lbmr(raw)
    except WireError:
        return
    # Whatever decodes must encode again without surprises (WireError is allowed: e.g.
    # non-canonical reserved bytes are dropped, so the bytes may differ).
    try:
        m.encode_lbmr(packet)
    except WireError:
        pass


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes_raise_only_wire_error(raw):
    _decode_or_wire_error(raw)


@FUZZ
@given(st.binary(max_size=120), st.sampled_from([0x00, 0x01, 0x04, 0x07, 0x08, 0x09, 0x0C, 0x0F, 0x17, 0x1F]),
       u8)
def test_random_bodies_behind_every_header_type_raise_only_wire_error(body, ver_type, second):
    _decode_or_wire_error(bytes((ver_type, second)) + body)


@FUZZ
@given(packets, st.data())
def test_truncations_and_bit_flips_raise_only_wire_error(packet, data):
    raw = m.encode_lbmr(packet)
    cut = data.draw(st.integers(0, len(raw)))
    _decode_or_wire_error(raw[:cut])
    flipped = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(raw) - 1))
        flipped[position] ^= 1 << data.draw(st.integers(0, 7))
    _decode_or_wire_error(bytes(flipped))


def test_decoder_never_reads_past_a_counted_structure():
    # A TIR count larger than what is present must not wrap or loop.
    raw = struct.pack(">BBH", 0, 0, 0xFFFF) + MINIMAL_TIR[4:]
    with pytest.raises(WireError):
        m.decode_lbmr(raw)
