"""LBMR topic records and the non-extended packet bodies (wire.md §1.4, §1.5, §1.7, §1.8).

Owns the TIR (with its transport info block), TQR, wildcard TQR and TMR records, and
the bodies of header types 0 (TQRs + TIRs), 1 (wildcard TQRs), 2/3 (unicast alive),
4 (topic management) and anything modelled only as raw bytes (type 6 UMQ queue
resolution, unknown type 5). Each body encoder returns the packet from its header byte
on; :mod:`router.um.wire.lbmr` adds version, OPTS bit and trailer.

Reading choices:
- A known transport with a ``tlen`` the dissector rejects (e.g. TCP with tlen 8) is a
  WireError, as in Wireshark and TRsniffer; only unknown transport codes become
  :class:`RawTransportInfo`.
- The TMB ``len`` field is written as 4 + sum of TMR lengths [INF] and not checked when
  read (Wireshark ignores it); each TMR's own ``len`` is structural and is checked.
- Bytes left over after the counted records are a WireError, so decode never drops data.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import ClassVar

from router.um.wire import lbmr_constants as c
from router.um.wire._codec import (
    Layout, Reader, cstring_bytes, ip_bytes, pack, text_bytes)
from router.um.wire.errors import WireError
from router.um.wire.lbmr_options import (
    decode_topic_options, encode_topic_options, topic_options_size)

_HEADER = struct.Struct(">BBH")
_TIR_FIXED = struct.Struct(">BBHI")
_TMR_HEAD = struct.Struct(">HBB")
_TMB_HEAD = struct.Struct(">HH")
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32_U16 = struct.Struct(">IH")


@dataclass(slots=True)
class TcpInfo:
    """TCP (and, via LbtruInfo, LBT-RU): tlen 6 without a session id, 10 with one."""

    ip: str
    port: int
    session_id: int | None = None
    TRANSPORT: ClassVar[int] = c.TRANSPORT_TCP


@dataclass(slots=True)
class LbtruInfo:
    ip: str
    port: int
    session_id: int | None = None
    TRANSPORT: ClassVar[int] = c.TRANSPORT_LBTRU


@dataclass(slots=True)
class LbtrmInfo:
    src_addr: str
    mcast_addr: str
    session_id: int
    udp_dest_port: int
    src_ucast_port: int
    TRANSPORT: ClassVar[int] = c.TRANSPORT_LBTRM
    LAYOUT: ClassVar[Layout] = Layout(
        "src_addr:ip mcast_addr:ip session_id:I udp_dest_port:H src_ucast_port:H")


@dataclass(slots=True)
class LbtipcInfo:
    host_id: int
    session_id: int
    xport_id: int
    TRANSPORT: ClassVar[int] = c.TRANSPORT_LBTIPC
    LAYOUT: ClassVar[Layout] = Layout("host_id:I session_id:I xport_id:H")


@dataclass(slots=True)
class LbtsmxInfo:
    host_id: int
    session_id: int
    xport_id: int
    TRANSPORT: ClassVar[int] = c.TRANSPORT_LBTSMX
    LAYOUT: ClassVar[Layout] = Layout("host_id:I session_id:I xport_id:H")


@dataclass(slots=True)
class LbtrdmaInfo:
    ip: str
    session_id: int
    port: int
    TRANSPORT: ClassVar[int] = c.TRANSPORT_LBTRDMA
    LAYOUT: ClassVar[Layout] = Layout("ip:ip session_id:I port:H")


@dataclass(slots=True)
class RawTransportInfo:
    """Transport info for a code this codec does not model (TCP6, PGM, future ones)."""

    transport: int
    data: bytes


_FIXED_TRANSPORTS = {cls.TRANSPORT: cls for cls in (LbtrmInfo, LbtipcInfo, LbtsmxInfo, LbtrdmaInfo)}
_IP_PORT_TRANSPORTS = {TcpInfo.TRANSPORT: TcpInfo, LbtruInfo.TRANSPORT: LbtruInfo}
_KNOWN_TRANSPORTS = set(_FIXED_TRANSPORTS) | set(_IP_PORT_TRANSPORTS)


def encode_transport(info) -> tuple[int, bytes]:
    """Return (transport code, info block) for a transport-info record."""
    what = f"LBMR TIR {type(info).__name__}"
    if isinstance(info, (TcpInfo, LbtruInfo)):
        ip = ip_bytes(info.ip, what)
        if info.session_id is None:
            return info.TRANSPORT, ip + pack(_U16, what, info.port)
        return info.TRANSPORT, ip + pack(_U32_U16, what, info.session_id, info.port)
    if isinstance(info, RawTransportInfo):
        if not 0 <= info.transport <= c.LBMR_TIR_TRANSPORT_MASK or info.transport in _KNOWN_TRANSPORTS:
            raise WireError(f"{what}: transport 0x{info.transport:02x} must be an unmodelled 7-bit code")
        return info.transport, bytes(info.data)
    if type(info) in _FIXED_TRANSPORTS.values():
        return info.TRANSPORT, info.LAYOUT.encode(info, what)
    raise WireError(f"{what}: not a transport info record")


def transport_size(info) -> int:
    if isinstance(info, (TcpInfo, LbtruInfo)):
        return 6 if info.session_id is None else 10
    if isinstance(info, RawTransportInfo):
        return len(info.data)
    return info.LAYOUT.size


def decode_transport(code: int, reader: Reader):
    if code in _IP_PORT_TRANSPORTS:
        cls = _IP_PORT_TRANSPORTS[code]
        if reader.remaining == 6:
            return cls(reader.ip(), reader.u16())
        if reader.remaining == 10:
            ip, session_id, port = reader.ip(), reader.u32(), reader.u16()
            return cls(ip, port, session_id)
        raise reader.fail(f"transport 0x{code:02x} needs tlen 6 or 10, got {reader.remaining}")
    cls = _FIXED_TRANSPORTS.get(code)
    if cls is None:
        return RawTransportInfo(code, reader.take(reader.remaining))
    if reader.remaining != cls.LAYOUT.size:
        raise reader.fail(f"transport 0x{code:02x} needs tlen {cls.LAYOUT.size}, got {reader.remaining}")
    return cls(**cls.LAYOUT.decode(reader))


@dataclass(slots=True)
class Tir:
    """Topic information record: the advertisement of one topic on one transport."""

    topic: str
    transport: object
    index: int
    ttl: int = 0
    options: list = field(default_factory=list)


@dataclass(slots=True)
class WcTqr:
    pattern: str
    pattern_type: int = c.PATTERN_PCRE


@dataclass(slots=True)
class Tmr:
    tmr_type: int
    flags: int
    name: str


def encode_tir(tir: Tir) -> bytes:
    code, info = encode_transport(tir.transport)
    if len(info) > 0xFF:
        raise WireError(f"LBMR TIR {tir.topic!r}: transport info of {len(info)} bytes exceeds 255")
    options = encode_topic_options(tir.options) if tir.options else b""
    code |= c.LBMR_TIR_OPTIONS if tir.options else 0
    fixed = pack(_TIR_FIXED, f"LBMR TIR {tir.topic!r}", code, len(info), tir.ttl, tir.index)
    return cstring_bytes(tir.topic, "LBMR TIR topic") + fixed + options + info


def tir_size(tir: Tir) -> int:
    """Encoded size of one TIR, so a resolver can pack datagrams without trial encoding."""
    size = tqr_size(tir.topic) + _TIR_FIXED.size + transport_size(tir.transport)
    return size + (topic_options_size(tir.options) if tir.options else 0)


def tqr_size(name: str) -> int:
    """Encoded size of one TQR (the NUL-terminated topic name)."""
    return len(text_bytes(name, "LBMR TQR")) + 1


def decode_tir(reader: Reader) -> Tir:
    topic = reader.cstring()
    code, tlen, ttl, index = reader.unpack(_TIR_FIXED)
    options = decode_topic_options(reader) if code & c.LBMR_TIR_OPTIONS else []
    info = decode_transport(code & c.LBMR_TIR_TRANSPORT_MASK, reader.sub(tlen, "LBMR TIR transport"))
    return Tir(topic, info, index, ttl, options)


# ---- bodies ---------------------------------------------------------------------------------

@dataclass(slots=True)
class TopicResolution:
    """Header type 0: TQRs then TIRs. Both empty = unicast resolver keepalive."""

    tqrs: list = field(default_factory=list)
    tirs: list = field(default_factory=list)


@dataclass(slots=True)
class WildcardQuery:
    """Header type 1: wildcard TQRs, optionally followed by TIRs."""

    queries: list
    tirs: list = field(default_factory=list)


@dataclass(slots=True)
class UnicastAlive:
    """Header type 2 (receiver alive) or 3 (source alive), with zero counts and no body."""

    kind: int


@dataclass(slots=True)
class TopicManagement:
    """Header type 4: use queries, use query responses and leave-topic records."""

    tmrs: list


@dataclass(slots=True)
class RawBody:
    """Any non-EXT body not modelled here (type 6 UMQ queue resolution, unknown type 5,
    or a type 2/3 with non-zero counts); round-trips byte for byte."""

    hdr_type: int
    tqrs: int
    tirs: int
    data: bytes


def _header(hdr_type: int, tqrs: int, tirs: int, what: str) -> bytes:
    return pack(_HEADER, what, hdr_type, tqrs, tirs)


def encode_topic_resolution(body: TopicResolution) -> bytes:
    parts = [_header(c.LBMR_HDR_TYPE_NORMAL, len(body.tqrs), len(body.tirs), "LBMR TQR/TIR counts")]
    parts += [cstring_bytes(name, "LBMR TQR") for name in body.tqrs]
    parts += [encode_tir(tir) for tir in body.tirs]
    return b"".join(parts)


def encode_wildcard_query(body: WildcardQuery) -> bytes:
    parts = [_header(c.LBMR_HDR_TYPE_WC_TQRS, len(body.queries), len(body.tirs), "LBMR WC-TQR counts")]
    for query in body.queries:
        parts.append(pack(_U8, "LBMR WC-TQR pattern type", query.pattern_type))
        parts.append(cstring_bytes(query.pattern, "LBMR WC-TQR pattern"))
    parts += [encode_tir(tir) for tir in body.tirs]
    return b"".join(parts)


def encode_unicast_alive(body: UnicastAlive) -> bytes:
    if body.kind not in (c.LBMR_HDR_TYPE_UCAST_RCV_ALIVE, c.LBMR_HDR_TYPE_UCAST_SRC_ALIVE):
        raise WireError(f"LBMR UnicastAlive: kind must be 2 or 3, got {body.kind}")
    return _header(body.kind, 0, 0, "LBMR alive")


def encode_topic_management(body: TopicManagement) -> bytes:
    records = []
    for tmr in body.tmrs:
        name = cstring_bytes(tmr.name, "LBMR TMR name")
        records.append(pack(_TMR_HEAD, "LBMR TMR", _TMR_HEAD.size + len(name), tmr.tmr_type, tmr.flags) + name)
    length = _TMB_HEAD.size + sum(len(r) for r in records)
    tmb = pack(_TMB_HEAD, "LBMR TMB", length, len(records))
    return _header(c.LBMR_HDR_TYPE_TOPIC_MGMT, 0, 0, "LBMR TMB") + tmb + b"".join(records)


_ALIVE_TYPES = (c.LBMR_HDR_TYPE_UCAST_RCV_ALIVE, c.LBMR_HDR_TYPE_UCAST_SRC_ALIVE)
_UNDEFINED_HDR_TYPE = 5


def encode_raw_body(body: RawBody) -> bytes:
    data = bytes(body.data)
    if body.hdr_type not in _ALIVE_TYPES + (_UNDEFINED_HDR_TYPE, c.LBMR_HDR_TYPE_QUEUE_RES):
        raise WireError(f"LBMR RawBody: header type {body.hdr_type} has a modelled body")
    if body.hdr_type in _ALIVE_TYPES and body.tqrs == body.tirs == 0 and not data:
        raise WireError("LBMR RawBody: an empty alive packet is an UnicastAlive")
    return _header(body.hdr_type, body.tqrs, body.tirs, "LBMR raw body") + data


def decode_body(hdr_type: int, tqrs: int, tirs: int, reader: Reader):
    """Decode a non-EXT body; ``reader`` spans from just after the 4-byte header to the trailer."""
    if hdr_type == c.LBMR_HDR_TYPE_NORMAL:
        names = [reader.cstring() for _ in range(tqrs)]
        body = TopicResolution(names, [decode_tir(reader) for _ in range(tirs)])
    elif hdr_type == c.LBMR_HDR_TYPE_WC_TQRS:
        queries = []
        for _ in range(tqrs):
            pattern_type = reader.u8()
            queries.append(WcTqr(reader.cstring(), pattern_type))
        body = WildcardQuery(queries, [decode_tir(reader) for _ in range(tirs)])
    elif hdr_type == c.LBMR_HDR_TYPE_TOPIC_MGMT:
        body = _decode_topic_management(reader)
    elif hdr_type in _ALIVE_TYPES and tqrs == tirs == 0 and reader.remaining == 0:
        body = UnicastAlive(hdr_type)
    else:
        body = RawBody(hdr_type, tqrs, tirs, reader.take(reader.remaining))
    reader.expect_end()
    return body


def _decode_topic_management(reader: Reader) -> TopicManagement:
    _length, count = reader.unpack(_TMB_HEAD)
    tmrs = []
    for _ in range(count):
        at = reader.pos
        length, tmr_type, flags = reader.unpack(_TMR_HEAD)
        if length <= _TMR_HEAD.size or length - _TMR_HEAD.size > reader.remaining:
            raise reader.fail(f"TMR length {length} does not fit", at)
        record = reader.sub(length - _TMR_HEAD.size, "LBMR TMR")
        # Bytes after the name's NUL, inside `len`, are padding: Wireshark skips them too.
        tmrs.append(Tmr(tmr_type, flags, record.cstring()))
    return TopicManagement(tmrs)
