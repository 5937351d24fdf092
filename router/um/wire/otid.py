"""Originating transport ids (OTIDs): the 32-byte identity of a source's transport session.

A DRO puts the OTID of the original source into every proxy advertisement (LBMR topic
option 0x08, LBMC header 0x0B), so a receiver that hears the same source along several
paths can tell they are one source. Wireshark shows OTIDs as raw bytes; the layout here
is Informatica's (TRSNIFFER ``lbmotid.c``, wire.md §1.6):

    byte 0      transport type (TRANSPORT_* of §1.5)
    bytes 1..   per-transport fields, below
    byte 31     OTID version; 1 = the transport index is included

    TCP           @1 ip(4) @5 port(2) @7 topic_idx(4) @11 ctx_id(4) @15 xport_idx(4) @19 session_id(4)
    LBT-RM        @1 ip(4) @5 port(2) @7 mc_group(4) @11 dest_port(2) @13 session_id(4)
                  @17 topic_idx(4) @21 ctx_id(4) @25 xport_idx(4)
    LBT-RU, RDMA  @1 ip(4) @5 port(2) @7 session_id(4) @11 topic_idx(4) @15 ctx_id(4) @19 xport_idx(4)
    IPC, SMX      @1 host_id(4) @5 xport_id(2) @7 session_id(4) @11 topic_idx(4) @15 ctx_id(4)
                  @19 xport_idx(4)

Byte order [INF]: network order (lbmotid.c mostly uses ntohs/ntohl). Unused bytes are zero.
"""

from __future__ import annotations

from router.um.wire import lbmr_constants as c
from router.um.wire._codec import Layout, Reader, as_bytes
from router.um.wire.errors import WireError

OTID_LENGTH = 32
OTID_VERSION = 1

_LAYOUTS = {
    c.TRANSPORT_TCP: ("tcp", Layout("ip:ip port:H topic_idx:I ctx_id:I xport_idx:I session_id:I")),
    c.TRANSPORT_LBTRM: ("lbtrm", Layout(
        "ip:ip port:H mc_group:ip dest_port:H session_id:I topic_idx:I ctx_id:I xport_idx:I")),
    c.TRANSPORT_LBTRU: ("lbtru", Layout("ip:ip port:H session_id:I topic_idx:I ctx_id:I xport_idx:I")),
    c.TRANSPORT_LBTRDMA: ("lbtrdma", Layout("ip:ip port:H session_id:I topic_idx:I ctx_id:I xport_idx:I")),
    c.TRANSPORT_LBTIPC: ("lbtipc", Layout(
        "host_id:I xport_id:H session_id:I topic_idx:I ctx_id:I xport_idx:I")),
    c.TRANSPORT_LBTSMX: ("lbtsmx", Layout(
        "host_id:I xport_id:H session_id:I topic_idx:I ctx_id:I xport_idx:I")),
}


class _Fields:
    """Attribute access over keyword arguments, so a Layout can encode them."""

    def __init__(self, **values) -> None:
        self.__dict__.update(values)


def _build(transport: int, **values) -> bytes:
    name, layout = _LAYOUTS[transport]
    body = layout.encode(_Fields(**values), f"{name} OTID")
    return bytes((transport,)) + body + bytes(OTID_LENGTH - 2 - len(body)) + bytes((OTID_VERSION,))


def tcp_otid(ip: str, port: int, topic_idx: int, ctx_id: int = 0, xport_idx: int = 0,
             session_id: int = 0) -> bytes:
    return _build(c.TRANSPORT_TCP, ip=ip, port=port, topic_idx=topic_idx, ctx_id=ctx_id,
                  xport_idx=xport_idx, session_id=session_id)


def lbtrm_otid(ip: str, port: int, mc_group: str, dest_port: int, session_id: int, topic_idx: int,
               ctx_id: int = 0, xport_idx: int = 0) -> bytes:
    return _build(c.TRANSPORT_LBTRM, ip=ip, port=port, mc_group=mc_group, dest_port=dest_port,
                  session_id=session_id, topic_idx=topic_idx, ctx_id=ctx_id, xport_idx=xport_idx)


def lbtru_otid(ip: str, port: int, session_id: int, topic_idx: int, ctx_id: int = 0,
               xport_idx: int = 0) -> bytes:
    return _build(c.TRANSPORT_LBTRU, ip=ip, port=port, session_id=session_id, topic_idx=topic_idx,
                  ctx_id=ctx_id, xport_idx=xport_idx)


def lbtrdma_otid(ip: str, port: int, session_id: int, topic_idx: int, ctx_id: int = 0,
                 xport_idx: int = 0) -> bytes:
    return _build(c.TRANSPORT_LBTRDMA, ip=ip, port=port, session_id=session_id, topic_idx=topic_idx,
                  ctx_id=ctx_id, xport_idx=xport_idx)


def lbtipc_otid(host_id: int, xport_id: int, session_id: int, topic_idx: int, ctx_id: int = 0,
                xport_idx: int = 0) -> bytes:
    return _build(c.TRANSPORT_LBTIPC, host_id=host_id, xport_id=xport_id, session_id=session_id,
                  topic_idx=topic_idx, ctx_id=ctx_id, xport_idx=xport_idx)


def lbtsmx_otid(host_id: int, xport_id: int, session_id: int, topic_idx: int, ctx_id: int = 0,
                xport_idx: int = 0) -> bytes:
    return _build(c.TRANSPORT_LBTSMX, host_id=host_id, xport_id=xport_id, session_id=session_id,
                  topic_idx=topic_idx, ctx_id=ctx_id, xport_idx=xport_idx)


def describe_otid(otid: bytes) -> dict:
    """Fields of an OTID for logs and monitoring, e.g.
    ``{"transport": "tcp", "version": 1, "ip": "10.0.0.5", "port": 14371, ...}``.

    Unknown transport types give ``{"transport": "unknown(0x..)", "version": v, "raw": hex}``;
    anything but 32 bytes is a WireError.
    """
    otid = as_bytes(otid)
    if len(otid) != OTID_LENGTH:
        raise WireError(f"OTID: must be {OTID_LENGTH} bytes, got {len(otid)}")
    transport, version = otid[0], otid[OTID_LENGTH - 1]
    known = _LAYOUTS.get(transport)
    if known is None:
        return {"transport": f"unknown(0x{transport:02x})", "version": version, "raw": otid.hex()}
    name, layout = known
    return {"transport": name, "version": version, **layout.decode(Reader(otid, 1, OTID_LENGTH - 1, "OTID"))}
