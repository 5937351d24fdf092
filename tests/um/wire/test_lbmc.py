"""LBMC codec and LBT-TCP stream framing: exact layouts, round trips for every header
type, stream splitting at any cut, and robustness against arbitrary bytes."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.um.wire import lbmc as m
from router.um.wire.errors import WireError

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- examples ---------------------------------------------------------------------------------

def test_data_message_layout_matches_the_fast_path_struct():
    msg = m.LbmcMessage(m.LBMC_TYPE_MESSAGE, [], b"hello", tidx=7, sqn=42)
    raw = m.encode_lbmc(msg)
    assert raw == m.MESSAGE_HEADER.pack(0x00, m.NHDR_DATA, 17, 7, 42) + b"hello"
    assert m.decode_lbmc(raw) == (msg, 17)


def test_fragment_and_tcp_sid_layouts_match_the_fast_path_structs():
    frag = m.LbmcMessage(m.LBMC_TYPE_MESSAGE, [m.Frag(3, 100, 250)], b"x" * 10, tidx=1, sqn=4)
    raw = m.encode_lbmc(frag)
    assert raw[1] == m.NHDR_FRAG
    assert raw[12:28] == m.FRAG_HEADER.pack(m.NHDR_DATA, 16, 0, 3, 100, 250)
    control = m.encode_lbmc(m.LbmcMessage(m.LBMC_TYPE_CONTROL, [m.TcpSid(0xCAFE)]))
    assert control == m.CONTROL_HEADER.pack(0x08, m.NHDR_TCP_SID, 12) + m.TCP_SID_HEADER.pack(
        m.NHDR_NONE, 8, 0, 0xCAFE)


def test_header_chain_links_each_header_to_the_next():
    msg = m.LbmcMessage(m.LBMC_TYPE_CONTROL, [m.TopicInterest(m.INTEREST_REFRESH, 5), m.TopicName("foo")])
    raw = m.encode_lbmc(msg)
    assert raw == bytes.fromhex("08 39 0014 | 05 08 2000 00000005 | ff 08 0000 666f6f00".replace("|", ""))
    assert m.decode_lbmc(raw)[0] == msg


@pytest.mark.parametrize("header, size", [
    (m.Frag(1, 2, 3), 16), (m.Batch(m.BATCH_START), 4), (m.Request(1, 2, 3, "1.2.3.4"), 16),
    (m.Otid(bytes(32)), 36), (m.CtxInst(bytes(8)), 12), (m.SrcIdx(bytes(8)), 12),
    (m.Stream(1, 2, bytes(8)), 20), (m.Destination(1, "1.1.1.1", 2, 3, 4, "2.2.2.2", 5), 28),
    (m.TopicIdx(9), 8), (m.TcpSid(1), 8), (m.TnwgKeepalive(m.KA_QUERY, 1, 2, 3), 64),
    (m.TopicInterest(0, 1), 8), (m.PatternInterest(0, 1, 2, bytes(8)), 16),
    (m.TopicMdInterest(0, [1, 2]), 16), (m.PatternMdInterest(0, 1, bytes(8), [1]), 20),
    (m.Advertisement(0, 1, 2, 3, 4, 5, 6, 7, 8, bytes(8), bytes(8)), 48),
    (m.GwCtxInfo(0, 1, 2, "1.2.3.4", 5, bytes(8)), 24), (m.Domain(1), 8), (m.ODomain(1), 8),
    (m.TnwgCapabilities(1), 20), (m.PatIdx(bytes(8)), 12), (m.RouteInfo(1, 2, 3, 4, 5, 6, 7), 32),
    (m.RouteInfoNeighbor(1, 2, 3), 20), (m.GatewayName("gw"), 7), (m.TopicName("abc"), 8),
])
def test_every_header_has_the_size_of_wire_md(header, size):
    raw = m.encode_lbmc(m.LbmcMessage(m.LBMC_TYPE_CONTROL, [header]))
    assert raw[5] == size and len(raw) == 4 + size
    assert m.decode_lbmc(raw)[0].headers == [header]


def test_route_info_node_id_is_64_bit():
    raw = m.encode_lbmc(m.LbmcMessage(m.LBMC_TYPE_CONTROL, [m.RouteInfo(1, 2, 0x0102030405060708, 4, 5, 6, 7)]))
    assert raw[4 + 12:4 + 20] == bytes(range(1, 9))


def test_tnwg_capabilities_shares_the_flags_word_with_the_version():
    raw = m.encode_lbmc(m.LbmcMessage(m.LBMC_TYPE_CONTROL, [m.TnwgCapabilities(3, flags=m.FLAG_IGNORE)]))
    assert raw[6:8] == b"\x80\x03"
    with pytest.raises(WireError):
        m.encode_lbmc(m.LbmcMessage(m.LBMC_TYPE_CONTROL, [m.TnwgCapabilities(0x8000)]))


def test_terminator_rule_and_empty_payloads_round_trip():
    empty_data = m.LbmcMessage(m.LBMC_TYPE_MESSAGE, [], b"", tidx=1, sqn=1)
    raw = m.encode_lbmc(empty_data)
    assert raw[1] == m.NHDR_DATA and len(raw) == 12
    assert m.decode_lbmc(raw)[0] == empty_data
    control = m.LbmcMessage(m.LBMC_TYPE_CONTROL, [m.TcpSid(1)])
    assert m.encode_lbmc(control)[4] == m.NHDR_NONE
    control_with_empty_data = m.LbmcMessage(m.LBMC_TYPE_CONTROL, [m.TcpSid(1)], has_data=True)
    raw = m.encode_lbmc(control_with_empty_data)
    assert raw[4] == m.NHDR_DATA
    assert m.decode_lbmc(raw)[0] == control_with_empty_data
    no_data = m.LbmcMessage(m.LBMC_TYPE_MESSAGE, [m.TopicIdx(3)], has_data=False)
    assert m.decode_lbmc(m.encode_lbmc(no_data))[0] == no_data
    # An EOT without headers says "DATA, empty": a first next_hdr of NONE is not LBMC to tshark.
    eot = m.LbmcMessage(m.LBMC_TYPE_EOT, [], has_data=True)
    assert m.encode_lbmc(eot) == b"\x01\x00\x00\x04"
    with pytest.raises(WireError, match="needs an extension header"):
        m.encode_lbmc(m.LbmcMessage(m.LBMC_TYPE_EOT, []))
    # Others may still send one; it decodes.
    assert m.decode_lbmc(b"\x01\xff\x00\x04")[0] == m.LbmcMessage(m.LBMC_TYPE_EOT, [])


def test_unknown_headers_are_kept_raw():
    msg = m.LbmcMessage(m.LBMC_TYPE_CONTROL, [m.RawHeader(m.NHDR_UME_KEEPALIVE, b"\x00\x00abcd")])
    assert m.decode_lbmc(m.encode_lbmc(msg))[0] == msg
    # A known type with an unexpected size is kept raw too, not misread.
    odd = m.encode_lbmc(m.LbmcMessage(m.LBMC_TYPE_CONTROL, [m.RawHeader(m.NHDR_TCP_SID, b"\x00\x00\x00")]))
    assert m.decode_lbmc(odd)[0].headers == [m.RawHeader(m.NHDR_TCP_SID, b"\x00\x00\x00")]


def test_maximum_message_size():
    biggest = m.LbmcMessage(m.LBMC_TYPE_MESSAGE, [], b"x" * (65535 - 12))
    assert len(m.encode_lbmc(biggest)) == 65535
    with pytest.raises(WireError, match="65535"):
        m.encode_lbmc(m.LbmcMessage(m.LBMC_TYPE_MESSAGE, [], b"x" * (65536 - 12)))


@pytest.mark.parametrize("msg", [
    m.LbmcMessage(0x3, [], has_data=True),
    m.LbmcMessage(m.LBMC_TYPE_CONTROL, []),
    m.LbmcMessage(m.LBMC_TYPE_CONTROL, [], tidx=1),
    m.LbmcMessage(m.LBMC_TYPE_MESSAGE, [], b"x", has_data=False),
    m.LbmcMessage(m.LBMC_TYPE_MESSAGE, [], tidx=1 << 32),
    m.LbmcMessage(m.LBMC_TYPE_CONTROL, [m.TopicName("x" * 300)]),
    m.LbmcMessage(m.LBMC_TYPE_CONTROL, [m.TopicName("a\x00b")]),
    m.LbmcMessage(m.LBMC_TYPE_CONTROL, [m.CtxInst(bytes(8), header_type=0x05)]),
    m.LbmcMessage(m.LBMC_TYPE_CONTROL, [m.RawHeader(m.NHDR_NONE, b"")]),
    m.LbmcMessage(m.LBMC_TYPE_CONTROL, [m.RawHeader(m.NHDR_TCP_SID, bytes(6))]),   # that is a TcpSid
    m.LbmcMessage(m.LBMC_TYPE_CONTROL, [m.Request(1, 2, 3, "not an ip")]),
])
def test_encoder_rejects_what_does_not_fit(msg):
    with pytest.raises(WireError):
        m.encode_lbmc(msg)


@pytest.mark.parametrize("raw, what", [
    (b"\x10\xff\x00\x04", "version 1"),
    (b"\x03\xff\x00\x04", "unknown message type"),
    (b"\x00\x00\x00\x08\x00\x00\x00\x00", "shorter than the 12-byte"),
    (b"\x08\xff\x00\x05", "truncated"),
    (b"\x08\xff\x00\x05\x00", "after a chain that ends in NONE"),
    (b"\x08\x6b\x00\x06\xff\x00", "hdr_len 0"),
    (b"\x08\x6b\x00\x06\xff\x08", "need 6 bytes"),
    (b"\x08", "fewer than 4"),
])
def test_malformed_messages_raise_wire_error(raw, what):
    with pytest.raises(WireError, match=what):
        m.decode_lbmc(raw)


def test_peek_msglen():
    assert m.peek_msglen(b"\x08\xff\x00") is None
    assert m.peek_msglen(b"\x08\xff\x01\x02") == 0x102
    assert m.peek_msglen(b"xx\x08\xff\x00\x04", 2) == 4


def test_decode_at_offset_and_from_memoryview():
    first = m.encode_lbmc(m.LbmcMessage(m.LBMC_TYPE_CONTROL, [m.TcpSid(5)]))
    second = m.encode_lbmc(m.LbmcMessage(m.LBMC_TYPE_MESSAGE, [], b"abc", 1, 2))
    buf = bytearray(first + second)
    msg, end = m.decode_lbmc(memoryview(buf), len(first))
    assert (msg.payload, end) == (b"abc", len(buf))


def test_split_stream_leaves_an_incomplete_tail():
    msgs = [m.LbmcMessage(m.LBMC_TYPE_MESSAGE, [], bytes([i]) * i, 1, i) for i in range(5)]
    stream = b"".join(m.encode_lbmc(msg) for msg in msgs)
    for cut in range(len(stream) + 1):
        done, used = m.split_lbmc_stream(stream[:cut])
        assert done == msgs[:len(done)]
        assert used == sum(len(m.encode_lbmc(msg)) for msg in done)
        rest, used_rest = m.split_lbmc_stream(stream[used:])
        assert done + rest == msgs and used + used_rest == len(stream)


def test_split_stream_raises_on_garbage_without_waiting_for_more():
    good = m.encode_lbmc(m.LbmcMessage(m.LBMC_TYPE_CONTROL, [m.TcpSid(5)]))
    with pytest.raises(WireError):
        m.split_lbmc_stream(good + b"\xf0\x00\x10\x00")       # bad version
    with pytest.raises(WireError):
        m.split_lbmc_stream(good + b"\x08\xff\x00\x00")       # msglen 0 would never advance


# ---- strategies ---------------------------------------------------------------------------------

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, (1 << 64) - 1)
ips = st.builds(lambda n: ".".join(str((n >> s) & 0xFF) for s in (24, 16, 8, 0)), u32)
block8 = st.binary(min_size=8, max_size=8)
names = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)

headers = st.one_of(
    st.builds(m.Frag, u32, u32, u32, u16),
    st.builds(m.Batch, u16),
    st.builds(m.Request, u8, u32, u16, ips, u8),
    st.builds(m.TopicName, names, u16),
    st.builds(m.Otid, st.binary(min_size=32, max_size=32), u16),
    st.builds(m.CtxInst, block8, st.sampled_from(m.CTXINST_HEADER_TYPES), u16),
    st.builds(m.SrcIdx, block8, u16),
    st.builds(m.Stream, u32, u32, block8, u16),
    st.builds(m.Destination, u32, ips, u16, u16, u32, ips, u16, u16),
    st.builds(m.TopicIdx, u32, u8),
    st.builds(m.TcpSid, u32, u16),
    st.builds(m.TnwgKeepalive, u16, u32, u64, u32),
    st.builds(m.TopicInterest, u16, u32),
    st.builds(m.PatternInterest, u8, u8, u32, block8),
    st.builds(m.TopicMdInterest, u16, st.lists(u32, max_size=10)),
    st.builds(m.PatternMdInterest, u8, u8, block8, st.lists(u32, max_size=10)),
    st.builds(m.Advertisement, u8, u8, u32, u32, u32, u32, u32, u32, u32, block8, block8),
    st.builds(m.GwCtxInfo, u16, u8, u16, ips, u32, block8, names),
    st.builds(m.Domain, u32, u16),
    st.builds(m.ODomain, u32, u16),
    st.builds(m.TnwgCapabilities, st.integers(0, 0x7FFF), u32, u32, u32, u32, st.sampled_from([0, 0x8000])),
    st.builds(m.PatIdx, block8, u16),
    st.builds(m.RouteInfo, u32, u32, u64, u32, u16, u16, u8, u16),
    st.builds(m.RouteInfoNeighbor, u64, u32, u32, u16),
    st.builds(m.GatewayName, names, u16),
    st.builds(m.RawHeader, st.sampled_from([0x03, 0x06, 0x12, 0x20, 0x33, 0x60, 0xFE]), st.binary(max_size=20)),
)

def _encodable(msg) -> bool:
    auto = msg.msg_type in m.DATA_MESSAGE_TYPES or bool(msg.payload)
    has_data = auto if msg.has_data is None else msg.has_data
    return (has_data or not msg.payload) and (has_data or bool(msg.headers))


messages = st.one_of(
    st.builds(m.LbmcMessage, st.sampled_from(m.DATA_MESSAGE_TYPES), st.lists(headers, max_size=5),
              st.binary(max_size=100), u32, u32, st.sampled_from([None, False])),
    st.builds(m.LbmcMessage, st.sampled_from(m.SHORT_MESSAGE_TYPES), st.lists(headers, max_size=5),
              st.binary(max_size=100), st.just(0), st.just(0), st.sampled_from([None, True])),
).filter(_encodable)


# ---- properties ---------------------------------------------------------------------------------

@FAST
@given(messages)
def test_round_trip_every_header_type(msg):
    raw = m.encode_lbmc(msg)
    decoded, end = m.decode_lbmc(raw)
    assert end == len(raw)
    assert decoded == msg
    assert m.encode_lbmc(decoded) == raw


@FAST
@given(st.lists(messages, max_size=6), st.lists(st.integers(1, 200), max_size=8))
def test_stream_split_at_arbitrary_chunk_boundaries(msgs, chunks):
    stream = b"".join(m.encode_lbmc(msg) for msg in msgs)
    pending, received, position = b"", [], 0
    for size in chunks + [len(stream)]:
        pending += stream[position:position + size]
        position += size
        done, used = m.split_lbmc_stream(pending)
        received += done
        pending = pending[used:]
    assert received == msgs and pending == b""


def _decode_or_wire_error(raw: bytes) -> None:
    try:
        msg, _end = m.decode_lbmc(raw)
        # Re-encoding what others may send can be refused (e.g. a message whose chain starts
        # with NONE), but only with WireError.
        m.encode_lbmc(msg)
    except WireError:
        pass
    try:
        m.split_lbmc_stream(raw)
    except WireError:
        pass


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_wire_error(raw):
    _decode_or_wire_error(raw)


@FUZZ
@given(st.sampled_from([0x00, 0x01, 0x02, 0x08, 0x0A]), u8, st.binary(max_size=150))
def test_plausible_headers_with_random_chains_raise_only_wire_error(ver_type, next_hdr, rest):
    length = min(len(rest) + 4, 0xFFFF)
    _decode_or_wire_error(bytes((ver_type, next_hdr, length >> 8, length & 0xFF)) + rest)


@FUZZ
@given(messages, st.data())
def test_truncations_and_bit_flips_raise_only_wire_error(msg, data):
    raw = m.encode_lbmc(msg)
    _decode_or_wire_error(raw[:data.draw(st.integers(0, len(raw)))])
    flipped = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(raw) - 1))
        flipped[position] ^= 1 << data.draw(st.integers(0, 7))
    _decode_or_wire_error(bytes(flipped))
