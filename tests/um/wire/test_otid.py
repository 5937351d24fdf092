"""OTID layouts (TRSNIFFER lbmotid.c): byte positions, version byte, description."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.um.wire import otid as o
from router.um.wire.errors import WireError
from router.um.wire.lbmr import TRANSPORT_LBTIPC, TRANSPORT_LBTRM, TRANSPORT_TCP


def test_tcp_otid_layout():
    raw = o.tcp_otid("10.0.0.5", 14371, topic_idx=7, ctx_id=0x11223344, xport_idx=2, session_id=0xABCD)
    assert len(raw) == o.OTID_LENGTH == 32
    assert raw[0] == TRANSPORT_TCP and raw[31] == 1
    assert raw[1:5] == bytes((10, 0, 0, 5)) and raw[5:7] == (14371).to_bytes(2, "big")
    assert raw[7:11] == (7).to_bytes(4, "big")
    assert raw[11:15] == bytes.fromhex("11223344")
    assert raw[15:19] == (2).to_bytes(4, "big")
    assert raw[19:23] == (0xABCD).to_bytes(4, "big")
    assert raw[23:31] == bytes(8)


def test_lbtrm_otid_layout():
    raw = o.lbtrm_otid("10.0.0.1", 14390, "224.10.10.10", 14400, session_id=5, topic_idx=6, ctx_id=7,
                       xport_idx=8)
    assert raw[0] == TRANSPORT_LBTRM
    assert raw[7:11] == bytes((224, 10, 10, 10)) and raw[11:13] == (14400).to_bytes(2, "big")
    assert [int.from_bytes(raw[i:i + 4], "big") for i in (13, 17, 21, 25)] == [5, 6, 7, 8]


def test_lbtipc_otid_layout():
    raw = o.lbtipc_otid(0xC0A80001, 3, session_id=4, topic_idx=5)
    assert raw[0] == TRANSPORT_LBTIPC and raw[1:5] == bytes.fromhex("c0a80001")
    assert raw[5:7] == b"\x00\x03" and raw[7:11] == (4).to_bytes(4, "big") and raw[11:15] == (5).to_bytes(4, "big")


def test_describe_tcp_otid():
    raw = o.tcp_otid("10.0.0.5", 14371, 7, session_id=9)
    assert o.describe_otid(raw) == {"transport": "tcp", "version": 1, "ip": "10.0.0.5", "port": 14371,
                                    "topic_idx": 7, "ctx_id": 0, "xport_idx": 0, "session_id": 9}


def test_describe_unknown_and_bad_lengths():
    assert o.describe_otid(b"\x02" + bytes(31))["transport"] == "unknown(0x02)"
    with pytest.raises(WireError):
        o.describe_otid(bytes(31))
    with pytest.raises(WireError):
        o.tcp_otid("10.0.0.5", 70000, 1)


u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
ips = st.builds(lambda n: ".".join(str((n >> s) & 0xFF) for s in (24, 16, 8, 0)), u32)


@settings(max_examples=100, deadline=None)
@given(st.one_of(
    st.builds(lambda *a: ("tcp", o.tcp_otid(*a), a), ips, u16, u32, u32, u32, u32),
    st.builds(lambda *a: ("lbtrm", o.lbtrm_otid(*a), a), ips, u16, ips, u16, u32, u32, u32, u32),
    st.builds(lambda *a: ("lbtru", o.lbtru_otid(*a), a), ips, u16, u32, u32, u32, u32),
    st.builds(lambda *a: ("lbtrdma", o.lbtrdma_otid(*a), a), ips, u16, u32, u32, u32, u32),
    st.builds(lambda *a: ("lbtipc", o.lbtipc_otid(*a), a), u32, u16, u32, u32, u32, u32),
    st.builds(lambda *a: ("lbtsmx", o.lbtsmx_otid(*a), a), u32, u16, u32, u32, u32, u32),
))
def test_describe_returns_what_was_built(case):
    name, raw, args = case
    described = o.describe_otid(raw)
    assert described.pop("transport") == name and described.pop("version") == 1
    assert list(described.values()) == list(args)   # fields come back in argument order
