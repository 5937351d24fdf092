"""LBMR extended (header type 7) bodies, the ones the DRO uses (wire.md §1.9).

Owns TOPIC_RES_REQUEST (ext 0x04), the TNWG_MSG family (ext 0x05: INTEREST, CTXINFO,
TRREQ and their options), REMOTE_DOMAIN_ROUTE (ext 0x06) and REMOTE_CONTEXT_INFO
(ext 0x07). Other ext types (proxy source election, UMQ queue management, the deprecated
CONTEXT_INFO) are carried as :class:`RawExt`.

Length fields the sources only let us infer ([INF] in wire.md: the TNWG_MSG ``len``,
the INTEREST block ``len``, REMOTE_DOMAIN_ROUTE ``length`` and REMOTE_CONTEXT_INFO
``len``) are written as the total size of what they introduce, header included, and
are not checked when read, so a sender with another reading still decodes. Lengths the
dissector walks by (CTXINFO/TRREQ/record ``len``, option ``len``) are checked.

Interest symbols are written NUL-terminated (TRsniffer prints them with %s); when read,
the text ends at the first NUL or at the end of the record. The TNWG and
REMOTE_CONTEXT_INFO options live in ``lbmr_gateway_options``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from router.um.wire import lbmr_constants as c
from router.um.wire._codec import Reader, cstring_bytes, ip_bytes, pack
from router.um.wire.errors import WireError
from router.um.wire.lbmr_gateway_options import RCTX_OPTIONS, TNWG_OPTIONS, name_field

_EXT_HEAD = struct.Struct(">BBH")              # ver_type, ext_type, 16-bit field @2
_TNWG_HEAD = struct.Struct(">BBHHH")           # ver_type, ext_type, len, type, reserved
_INTEREST_HEAD = struct.Struct(">HH")          # len, count
_INTEREST_REC = struct.Struct(">HBBI")         # len, flags, pattype, domain_id
_CTXINFO_HEAD = struct.Struct(">HBBII")        # len, hop_count, reserved, flags1, flags2
_TRREQ_HEAD = struct.Struct(">H")              # len
_ROUTE_HEAD = struct.Struct(">BBH4sHHI")       # ver_type, ext, num_domains, ip, port, res, length
_RCTX_HEAD = struct.Struct(">BBHHH")           # ver_type, ext, len, num_recs, reserved
_RCTX_REC = struct.Struct(">HH")               # len, flags
_RAW_EXT_HEAD = struct.Struct(">BB")           # ver_type, ext_type
_THREE_U16 = struct.Struct(">HHH")             # TNWG len/type/res; RCTXINFO len/num_recs/res
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


@dataclass(slots=True)
class TopicResRequest:
    flags: int


@dataclass(slots=True)
class InterestRecord:
    flags: int
    pattern_type: int
    domain_id: int
    symbol: str


@dataclass(slots=True)
class GatewayInterest:
    records: list


@dataclass(slots=True)
class GatewayContextInfo:
    hop_count: int
    flags1: int
    flags2: int = 0
    options: list = field(default_factory=list)


@dataclass(slots=True)
class GatewayTopicResRequest:
    options: list = field(default_factory=list)


@dataclass(slots=True)
class RemoteDomainRoute:
    ip: str
    port: int
    domains: list


@dataclass(slots=True)
class RemoteContextRecord:
    flags: int
    options: list = field(default_factory=list)


@dataclass(slots=True)
class RemoteContextInfo:
    records: list


@dataclass(slots=True)
class RawExt:
    """An EXT packet this codec does not model; ``data`` is everything after the ext-type byte."""

    ext_type: int
    data: bytes


# ---- encoders: each returns the packet from byte 0 (type 7 only; no version/OPTS bits) ----

def _tnwg_message(tnwg_type: int, body: bytes) -> bytes:
    length = _TNWG_HEAD.size + len(body)
    head = pack(_TNWG_HEAD, "LBMR TNWG message", c.LBMR_HDR_TYPE_EXT, c.LBMR_HDR_EXT_TYPE_TNWG_MSG,
                length, tnwg_type, 0)
    return head + body


def _encode_topic_res_request(body: TopicResRequest) -> bytes:
    return pack(_EXT_HEAD, "LBMR TOPIC_RES_REQUEST", c.LBMR_HDR_TYPE_EXT,
                c.LBMR_HDR_EXT_TYPE_TOPIC_RES_REQUEST, body.flags)


def _encode_interest(body: GatewayInterest) -> bytes:
    records = []
    for rec in body.records:
        symbol = cstring_bytes(rec.symbol, "LBMR TNWG interest symbol")
        head = pack(_INTEREST_REC, "LBMR TNWG interest record", _INTEREST_REC.size + len(symbol),
                    rec.flags, rec.pattern_type, rec.domain_id)
        records.append(head + symbol)
    block = b"".join(records)
    head = pack(_INTEREST_HEAD, "LBMR TNWG interest", _INTEREST_HEAD.size + len(block), len(records))
    return _tnwg_message(c.TNWG_TYPE_INTEREST, head + block)


def _encode_ctxinfo(body: GatewayContextInfo) -> bytes:
    options = TNWG_OPTIONS.encode(body.options)
    head = pack(_CTXINFO_HEAD, "LBMR TNWG ctxinfo", _CTXINFO_HEAD.size + len(options),
                body.hop_count, 0, body.flags1, body.flags2)
    return _tnwg_message(c.TNWG_TYPE_CTXINFO, head + options)


def _encode_trreq(body: GatewayTopicResRequest) -> bytes:
    options = TNWG_OPTIONS.encode(body.options)
    head = pack(_TRREQ_HEAD, "LBMR TNWG trreq", _TRREQ_HEAD.size + len(options))
    return _tnwg_message(c.TNWG_TYPE_TRREQ, head + options)


def _encode_route(body: RemoteDomainRoute) -> bytes:
    domains = b"".join(pack(_U32, "LBMR remote domain", d) for d in body.domains)
    ip = ip_bytes(body.ip, "LBMR REMOTE_DOMAIN_ROUTE ip")
    return pack(_ROUTE_HEAD, "LBMR REMOTE_DOMAIN_ROUTE", c.LBMR_HDR_TYPE_EXT,
                c.LBMR_HDR_EXT_TYPE_REMOTE_DOMAIN_ROUTE, len(body.domains), ip, body.port, 0,
                _ROUTE_HEAD.size + len(domains)) + domains


def _encode_remote_context_info(body: RemoteContextInfo) -> bytes:
    records = []
    for rec in body.records:
        options = RCTX_OPTIONS.encode(rec.options)
        records.append(pack(_RCTX_REC, "LBMR REMOTE_CONTEXT_INFO record",
                            _RCTX_REC.size + len(options), rec.flags) + options)
    block = b"".join(records)
    return pack(_RCTX_HEAD, "LBMR REMOTE_CONTEXT_INFO", c.LBMR_HDR_TYPE_EXT,
                c.LBMR_HDR_EXT_TYPE_REMOTE_CONTEXT_INFO, _RCTX_HEAD.size + len(block),
                len(records), 0) + block


def _encode_raw(body: RawExt) -> bytes:
    data = bytes(body.data)
    if _is_modelled(body.ext_type, data):
        raise WireError(f"LBMR RawExt: ext type 0x{body.ext_type:02x} has a modelled body")
    if len(data) < 2:
        raise WireError("LBMR RawExt: data must fill at least the rest of the 4-byte header")
    return pack(_RAW_EXT_HEAD, "LBMR RawExt", c.LBMR_HDR_TYPE_EXT, body.ext_type) + data


_EXT_ENCODERS = {
    TopicResRequest: _encode_topic_res_request,
    GatewayInterest: _encode_interest,
    GatewayContextInfo: _encode_ctxinfo,
    GatewayTopicResRequest: _encode_trreq,
    RemoteDomainRoute: _encode_route,
    RemoteContextInfo: _encode_remote_context_info,
    RawExt: _encode_raw,
}


def encode_ext(body) -> bytes:
    """Encode an EXT body (any packet-body class of this module)."""
    encoder = _EXT_ENCODERS.get(type(body))
    if encoder is None:
        raise WireError(f"LBMR: {type(body).__name__} is not a packet body")
    return encoder(body)


def _is_modelled(ext_type: int, data: bytes) -> bool:
    if ext_type in (c.LBMR_HDR_EXT_TYPE_TOPIC_RES_REQUEST, c.LBMR_HDR_EXT_TYPE_REMOTE_DOMAIN_ROUTE,
                    c.LBMR_HDR_EXT_TYPE_REMOTE_CONTEXT_INFO):
        return True
    if ext_type == c.LBMR_HDR_EXT_TYPE_TNWG_MSG and len(data) >= 4:
        return _U16.unpack_from(data, 2)[0] in _TNWG_DECODERS
    return False


# ---- decoders: `reader` spans the packet up to the trailer and stands at offset 2 ----------

def decode_ext(ext_type: int, reader: Reader):
    """Decode an EXT body; raises WireError on anything that does not parse."""
    data_start = reader.pos
    if ext_type == c.LBMR_HDR_EXT_TYPE_TOPIC_RES_REQUEST:
        body = TopicResRequest(reader.u16())
    elif ext_type == c.LBMR_HDR_EXT_TYPE_REMOTE_DOMAIN_ROUTE:
        body = _decode_route(reader)
    elif ext_type == c.LBMR_HDR_EXT_TYPE_REMOTE_CONTEXT_INFO:
        body = _decode_remote_context_info(reader)
    elif ext_type == c.LBMR_HDR_EXT_TYPE_TNWG_MSG and reader.remaining >= 6 \
            and _U16.unpack_from(reader.buf, reader.pos + 2)[0] in _TNWG_DECODERS:
        _length, tnwg_type, _reserved = reader.unpack(_THREE_U16)
        body = _TNWG_DECODERS[tnwg_type](reader)
    else:
        reader.pos = data_start
        body = RawExt(ext_type, reader.take(reader.remaining))
    reader.expect_end()
    return body


def _decode_interest(reader: Reader) -> GatewayInterest:
    _length, count = reader.unpack(_INTEREST_HEAD)
    records = []
    for _ in range(count):
        at = reader.pos
        length, flags, pattern_type, domain_id = reader.unpack(_INTEREST_REC)
        if length < _INTEREST_REC.size or length - _INTEREST_REC.size > reader.remaining:
            raise reader.fail(f"TNWG interest record length {length} does not fit", at)
        symbol = name_field(reader.take(length - _INTEREST_REC.size))
        records.append(InterestRecord(flags, pattern_type, domain_id, symbol))
    return GatewayInterest(records)


def _decode_ctxinfo(reader: Reader) -> GatewayContextInfo:
    at = reader.pos
    length, hop_count, _reserved, flags1, flags2 = reader.unpack(_CTXINFO_HEAD)
    if length < _CTXINFO_HEAD.size or length - _CTXINFO_HEAD.size > reader.remaining:
        raise reader.fail(f"TNWG ctxinfo length {length} does not fit", at)
    options = TNWG_OPTIONS.decode(reader.sub(length - _CTXINFO_HEAD.size, "LBMR TNWG ctxinfo"))
    return GatewayContextInfo(hop_count, flags1, flags2, options)


def _decode_trreq(reader: Reader) -> GatewayTopicResRequest:
    at = reader.pos
    length = reader.u16()
    if length < _TRREQ_HEAD.size or length - _TRREQ_HEAD.size > reader.remaining:
        raise reader.fail(f"TNWG trreq length {length} does not fit", at)
    return GatewayTopicResRequest(TNWG_OPTIONS.decode(reader.sub(length - _TRREQ_HEAD.size, "LBMR TNWG trreq")))


_TNWG_DECODERS = {
    c.TNWG_TYPE_INTEREST: _decode_interest,
    c.TNWG_TYPE_CTXINFO: _decode_ctxinfo,
    c.TNWG_TYPE_TRREQ: _decode_trreq,
}


def _decode_route(reader: Reader) -> RemoteDomainRoute:
    count = reader.u16()
    ip, port = reader.ip(), reader.u16()
    reader.skip(2 + 4)   # reserved, length [INF]
    return RemoteDomainRoute(ip, port, [reader.u32() for _ in range(count)])


def _decode_remote_context_info(reader: Reader) -> RemoteContextInfo:
    _length, count, _reserved = reader.unpack(_THREE_U16)
    records = []
    for _ in range(count):
        at = reader.pos
        length, flags = reader.unpack(_RCTX_REC)
        if length < _RCTX_REC.size or length - _RCTX_REC.size > reader.remaining:
            raise reader.fail(f"REMOTE_CONTEXT_INFO record length {length} does not fit", at)
        options = RCTX_OPTIONS.decode(reader.sub(length - _RCTX_REC.size, "LBMR REMOTE_CONTEXT_INFO record"))
        records.append(RemoteContextRecord(flags, options))
    return RemoteContextInfo(records)
