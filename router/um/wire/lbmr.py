"""LBMR, the UM topic resolution protocol over UDP (wire.md §1): the public codec.

Owns the packet envelope, :class:`LbmrPacket` = 4-byte header + body + optional option
trailer, and :func:`encode_lbmr` / :func:`decode_lbmr`. Records, options and extended
bodies live in ``lbmr_records``, ``lbmr_options``, ``lbmr_gateway`` and
``lbmr_gateway_options``; every public name is re-exported here, so callers import only
``router.um.wire.lbmr``.

Round trip: ``decode_lbmr(encode_lbmr(p)) == p`` for every packet the encoder accepts and
``encode_lbmr(decode_lbmr(b)) == b`` for every ``b`` it produced. Anything that does not
parse raises :class:`~router.um.wire.errors.WireError` and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from router.um.wire import lbmr_constants as _constants
from router.um.wire._codec import Reader, as_bytes
from router.um.wire.errors import WireError
from router.um.wire.lbmr_constants import *  # noqa: F403  (re-export: the wire constants)
from router.um.wire.lbmr_constants import (
    LBMR_HDR_SIZE, LBMR_HDR_TYPE_EXT, LBMR_HDR_TYPE_MASK, LBMR_HDR_TYPE_OPTS_MASK)
from router.um.wire.lbmr_gateway import (
    GatewayContextInfo, GatewayInterest, GatewayTopicResRequest, InterestRecord, RawExt,
    RemoteContextInfo, RemoteContextRecord, RemoteDomainRoute, TopicResRequest, decode_ext, encode_ext)
from router.um.wire.lbmr_gateway_options import (
    RawRciOption, RawTnwgOption, RciAddressOption, RciInstanceOption, RciNameOption, RciOdomainOption,
    TnwgAddressOption, TnwgCtxInstOption, TnwgDomainOption, TnwgNameOption)
from router.um.wire.lbmr_options import (
    CostOption, CtxInstOption, DomainIdOption, ExFuncOption, LateJoinOption, LocalDomainOption,
    OtidOption, RawPacketOption, RawTopicOption, SrcIdOption, SrcTypeOption, UlbOption,
    UmeOption, UmeStoreGroupOption, UmeStoreOption, UmqQinfoOption, UmqRcrIdxOption,
    VersionOption, encode_packet_options, split_packet_options)
from router.um.wire.lbmr_records import (
    LbtipcInfo, LbtrdmaInfo, LbtrmInfo, LbtruInfo, LbtsmxInfo, RawBody, RawTransportInfo,
    TcpInfo, Tir, Tmr, TopicManagement, TopicResolution, UnicastAlive, WcTqr, WildcardQuery,
    decode_body, encode_raw_body, encode_topic_management, encode_topic_resolution,
    encode_unicast_alive, encode_wildcard_query, tir_size, tqr_size)


__all__ = [name for name in dir(_constants) if name.isupper()] + [
    "LbmrPacket", "encode_lbmr", "decode_lbmr", "tir_size", "tqr_size", "WireError",
    # records and bodies (§1.4, §1.5, §1.7, §1.8)
    "Tir", "WcTqr", "Tmr", "TopicResolution", "WildcardQuery", "UnicastAlive", "TopicManagement", "RawBody",
    "TcpInfo", "LbtruInfo", "LbtrmInfo", "LbtipcInfo", "LbtsmxInfo", "LbtrdmaInfo", "RawTransportInfo",
    # topic options (§1.6) and packet options (§1.3)
    "UmeOption", "UmeStoreOption", "UmeStoreGroupOption", "LateJoinOption", "UmqRcrIdxOption",
    "UmqQinfoOption", "CostOption", "OtidOption", "CtxInstOption", "UlbOption", "DomainIdOption",
    "ExFuncOption", "RawTopicOption", "SrcIdOption", "SrcTypeOption", "VersionOption",
    "LocalDomainOption", "RawPacketOption",
    # extended types (§1.9)
    "TopicResRequest", "GatewayInterest", "InterestRecord", "GatewayContextInfo", "GatewayTopicResRequest",
    "TnwgCtxInstOption", "TnwgAddressOption", "TnwgDomainOption", "TnwgNameOption", "RawTnwgOption",
    "RemoteDomainRoute", "RemoteContextInfo", "RemoteContextRecord", "RciAddressOption",
    "RciInstanceOption", "RciOdomainOption", "RciNameOption", "RawRciOption", "RawExt",
]


@dataclass(slots=True)
class LbmrPacket:
    """One LBMR datagram. ``version`` is the header nibble (0, or 1 = gateway/UM 6+)."""

    body: object
    options: list = field(default_factory=list)
    version: int = 0


_BODY_ENCODERS = {
    TopicResolution: encode_topic_resolution,
    WildcardQuery: encode_wildcard_query,
    UnicastAlive: encode_unicast_alive,
    TopicManagement: encode_topic_management,
    RawBody: encode_raw_body,
}


def encode_lbmr(packet: LbmrPacket) -> bytes:
    """Encode one LBMR datagram."""
    if not isinstance(packet.version, int) or not 0 <= packet.version <= 0xF:
        raise WireError(f"LBMR: version {packet.version!r} does not fit the 4-bit nibble")
    encoder = _BODY_ENCODERS.get(type(packet.body), encode_ext)
    out = bytearray(encoder(packet.body))
    out[0] |= packet.version << 4
    if packet.options:
        out[0] |= LBMR_HDR_TYPE_OPTS_MASK
        out += encode_packet_options(packet.options)
    return bytes(out)


def decode_lbmr(data: bytes | memoryview) -> LbmrPacket:
    """Decode one LBMR datagram; raises WireError (only) if it does not parse."""
    data = as_bytes(data)
    if len(data) < LBMR_HDR_SIZE:
        raise WireError(f"LBMR: packet of {len(data)} bytes is shorter than the 4-byte header")
    ver_type = data[0]
    options: list = []
    body_end = len(data)
    if ver_type & LBMR_HDR_TYPE_OPTS_MASK:
        body_end, options = split_packet_options(data)
    hdr_type = ver_type & LBMR_HDR_TYPE_MASK
    if hdr_type == LBMR_HDR_TYPE_EXT:
        body = decode_ext(data[1], Reader(data, 2, body_end, "LBMR ext"))
    else:
        body = decode_body(hdr_type, data[1], (data[2] << 8) | data[3],
                           Reader(data, LBMR_HDR_SIZE, body_end, "LBMR body"))
    return LbmrPacket(body, options, ver_type >> 4)
