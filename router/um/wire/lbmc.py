"""LBMC messages and LBT-TCP framing (wire.md §2, §3 b): the public codec.

An LBMC message is a base header (12 bytes for MESSAGE/PRORX/RETRANS, which carry the
topic index and sequence number; 4 bytes for CONTROL/EOT), a chain of extension headers
and, if the chain ends in DATA, a payload. An LBT-TCP stream, and the DRO peer link, is
a plain concatenation of such messages; :func:`split_lbmc_stream` cuts a receive buffer.

Chain terminator: ``LbmcMessage.has_data`` chooses DATA (True) or NONE (False). Left at
None it is decided by the rule data-path types (MESSAGE, PRORX, RETRANS) always end in
DATA, so an empty user message survives, while CONTROL/EOT end in DATA only when they
carry a payload. An explicit value that agrees with the rule is normalised to None when
the message is built, and the decoder stores an explicit bool only where the wire
disagrees with the rule, so both ``decode(encode(m)) == m`` and ``encode(decode(b)) == b``
hold.

Header classes live in ``lbmc_headers`` (data path) and ``lbmc_gateway`` (peer link);
every public name is re-exported here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from router.um.wire import lbmc_constants as _constants
from router.um.wire._codec import Reader, as_bytes, byte_indexable, pack
from router.um.wire.errors import WireError
from router.um.wire.lbmc_constants import *  # noqa: F403  (re-export: the wire constants)
from router.um.wire.lbmc_constants import (
    LBMC_HDR_SIZE_DATA, LBMC_HDR_SIZE_SHORT, LBMC_MAX_MESSAGE, LBMC_TYPE_CONTROL, LBMC_TYPE_EOT,
    LBMC_TYPE_MESSAGE, LBMC_TYPE_PRORX, LBMC_TYPE_RETRANS, NHDR_DATA, NHDR_NONE)
from router.um.wire.lbmc_gateway import (
    GATEWAY_HEADERS, Advertisement, GatewayName, GwCtxInfo, PatternInterest, PatternMdInterest,
    RouteInfo, RouteInfoNeighbor, TnwgCapabilities, TnwgKeepalive, TopicInterest, TopicMdInterest)
from router.um.wire.lbmc_late_join import LATE_JOIN_HEADERS, LjiRequest, UmeLjInfo, UmeRxReq
from router.um.wire.lbmc_tsni import Tsni
from router.um.wire.lbmc_headers import (
    CORE_HEADERS, CTXINST_HEADER_TYPES, Batch, CtxInst, Destination, Domain, Frag, ODomain, Otid,
    PatIdx, RawHeader, Request, SrcIdx, Stream, TcpSid, TopicIdx, TopicName)

__all__ = [name for name in dir(_constants) if name.isupper()] + [
    "LbmcMessage", "encode_lbmc", "decode_lbmc", "split_lbmc_stream", "peek_msglen", "check_message_start",
    "WireError",
    "MESSAGE_HEADER", "CONTROL_HEADER", "FRAG_HEADER", "TCP_SID_HEADER",
    "DATA_MESSAGE_TYPES", "SHORT_MESSAGE_TYPES", "CTXINST_HEADER_TYPES",
    # data-path headers (§2.3)
    "Frag", "Batch", "Request", "TopicName", "Otid", "CtxInst", "SrcIdx", "Stream", "Destination",
    "TopicIdx", "TcpSid", "Domain", "ODomain", "PatIdx", "RawHeader",
    # peer-link headers (§3)
    "TnwgKeepalive", "TopicInterest", "PatternInterest", "TopicMdInterest", "PatternMdInterest",
    "Advertisement", "GwCtxInfo", "TnwgCapabilities", "RouteInfo", "RouteInfoNeighbor", "GatewayName",
    # late join and off-transport recovery
    "LjiRequest", "UmeLjInfo", "UmeRxReq", "Tsni",
]

# Precompiled layouts for code on the data fast path (they match what encode_lbmc writes).
MESSAGE_HEADER = struct.Struct(">BBHII")    # ver_type, next_hdr, msglen, tidx, sqn
CONTROL_HEADER = struct.Struct(">BBH")      # ver_type, next_hdr, msglen
FRAG_HEADER = struct.Struct(">BBHIII")      # next_hdr, hdr_len=16, flags, first_sqn, offset, len
TCP_SID_HEADER = struct.Struct(">BBHI")     # next_hdr, hdr_len=8, flags, sid

DATA_MESSAGE_TYPES = (LBMC_TYPE_MESSAGE, LBMC_TYPE_PRORX, LBMC_TYPE_RETRANS)
SHORT_MESSAGE_TYPES = (LBMC_TYPE_CONTROL, LBMC_TYPE_EOT)

_HEADER_CLASSES = {cls.HEADER_TYPE: cls for cls in CORE_HEADERS + GATEWAY_HEADERS + LATE_JOIN_HEADERS + (Tsni,)}
_HEADER_CLASSES.update({t: CtxInst for t in CTXINST_HEADER_TYPES})
_TIDX_SQN = struct.Struct(">II")
_CHAIN_LINK = struct.Struct(">BB")
_HEADER_LABELS = [f"LBMC header 0x{header_type:02x}" for header_type in range(256)]   # made once, not per header


@dataclass(slots=True)
class LbmcMessage:
    msg_type: int
    headers: list = field(default_factory=list)
    payload: bytes = b""
    tidx: int = 0
    sqn: int = 0
    has_data: bool | None = None

    def __post_init__(self) -> None:
        # An explicit has_data that agrees with the rule is the same message as None;
        # normalising here keeps == meaningful (and decode(encode(m)) == m).
        if self.has_data is not None and self.has_data == _auto_has_data(self.msg_type, self.payload):
            self.has_data = None


def _auto_has_data(msg_type: int, payload: bytes) -> bool:
    return msg_type in DATA_MESSAGE_TYPES or len(payload) > 0


def encode_lbmc(msg: LbmcMessage) -> bytes:
    """Encode one LBMC message; WireError if it would exceed 65535 bytes or a field overflows."""
    payload = bytes(msg.payload)
    has_data = _auto_has_data(msg.msg_type, payload) if msg.has_data is None else msg.has_data
    if payload and not has_data:
        raise WireError("LBMC: a message with has_data=False cannot carry a payload")
    if not has_data and not msg.headers:
        # Its first next_hdr would be NONE, which Wireshark's LBMC test rejects: the message
        # (and the TCP segment around it) would not be recognised as LBMC at all.
        raise WireError("LBMC: a message needs an extension header or DATA (has_data=True)")
    first, chain = _encode_chain(msg.headers, NHDR_DATA if has_data else NHDR_NONE)
    if msg.msg_type in DATA_MESSAGE_TYPES:
        msglen = LBMC_HDR_SIZE_DATA + len(chain) + len(payload)
        _check_length(msglen)
        head = pack(MESSAGE_HEADER, "LBMC message header", msg.msg_type, first, msglen, msg.tidx, msg.sqn)
    elif msg.msg_type in SHORT_MESSAGE_TYPES:
        if msg.tidx or msg.sqn:
            raise WireError(f"LBMC: type 0x{msg.msg_type:x} has no tidx/sqn fields to carry them")
        msglen = LBMC_HDR_SIZE_SHORT + len(chain) + len(payload)
        _check_length(msglen)
        head = pack(CONTROL_HEADER, "LBMC message header", msg.msg_type, first, msglen)
    else:
        raise WireError(f"LBMC: unknown message type {msg.msg_type!r}")
    return head + chain + payload


def _encode_chain(headers: list, terminator: int) -> tuple[int, bytes]:
    """Return (type of the first header, the encoded headers): each header's first byte
    names the header after it, the last one names ``terminator``."""
    types = [header.wire_type() for header in headers]
    for header in headers:
        if isinstance(header, RawHeader) and _decodes_as_modelled(header.header_type, bytes(header.body)):
            raise WireError(f"LBMC RawHeader: 0x{header.header_type:02x} with this body is a modelled header")
    parts = []
    for header, next_type in zip(headers, types[1:] + [terminator]):
        body = header.wire_body()
        if len(body) + 2 > 0xFF:
            raise WireError(f"LBMC {type(header).__name__}: header of {len(body) + 2} bytes exceeds 255")
        parts.append(_CHAIN_LINK.pack(next_type, len(body) + 2))
        parts.append(body)
    return (types[0] if types else terminator), b"".join(parts)


def _decodes_as_modelled(header_type: int, body: bytes) -> bool:
    """Would the decoder turn this raw header into a typed one (so it could not round-trip)?"""
    cls = _HEADER_CLASSES.get(header_type)
    if cls is None:
        return False
    reader = Reader(body, 0, len(body), "LBMC header")
    return cls.wire_parse(header_type, reader) is not None and not reader.remaining


def _check_length(msglen: int) -> None:
    if msglen > LBMC_MAX_MESSAGE:
        raise WireError(f"LBMC: message of {msglen} bytes exceeds the u16 msglen limit of 65535")


def peek_msglen(buf, offset: int = 0) -> int | None:
    """The ``msglen`` of the message at ``offset``, or None if fewer than 4 bytes are there."""
    if offset < 0:
        raise WireError(f"LBMC: negative offset {offset}")
    buf = byte_indexable(buf)
    if len(buf) - offset < LBMC_HDR_SIZE_SHORT:
        return None
    return (buf[offset + 2] << 8) | buf[offset + 3]


def check_message_start(buf, offset: int) -> int:
    """Validate the 4 bytes at ``offset``; return the base-header size of that message type."""
    ver_type, msglen = buf[offset], (buf[offset + 2] << 8) | buf[offset + 3]
    if ver_type >> 4:
        raise WireError(f"LBMC: version {ver_type >> 4} is not 0 at offset {offset}")
    msg_type = ver_type & 0x0F
    if msg_type in DATA_MESSAGE_TYPES:
        base = LBMC_HDR_SIZE_DATA
    elif msg_type in SHORT_MESSAGE_TYPES:
        base = LBMC_HDR_SIZE_SHORT
    else:
        raise WireError(f"LBMC: unknown message type 0x{msg_type:x} at offset {offset}")
    if msglen < base:
        raise WireError(f"LBMC: msglen {msglen} is shorter than the {base}-byte header at offset {offset}")
    return base


def decode_lbmc(buf, offset: int = 0) -> tuple[LbmcMessage, int]:
    """Decode the message at ``offset``; return it and the offset just past it."""
    buf = byte_indexable(buf)
    msglen = peek_msglen(buf, offset)
    if msglen is None:
        raise WireError(f"LBMC: fewer than 4 bytes at offset {offset}")
    if not isinstance(buf, bytes):
        # Copy only this message, not the whole (possibly large) receive buffer.
        message, used = _decode_at(as_bytes(buf[offset:offset + msglen]), 0)
        return message, offset + used
    return _decode_at(buf, offset)


def _decode_at(buf: bytes, offset: int) -> tuple[LbmcMessage, int]:
    if len(buf) - offset < LBMC_HDR_SIZE_SHORT:
        raise WireError(f"LBMC: fewer than 4 bytes at offset {offset}")
    base = check_message_start(buf, offset)
    ver_type, next_type, msglen = CONTROL_HEADER.unpack_from(buf, offset)
    end = offset + msglen
    if end > len(buf):
        raise WireError(f"LBMC: message of {msglen} bytes at offset {offset} is truncated at {len(buf)}")
    msg_type = ver_type & 0x0F
    tidx = sqn = 0
    if base == LBMC_HDR_SIZE_DATA:
        tidx, sqn = _TIDX_SQN.unpack_from(buf, offset + 4)
    reader = Reader(buf, offset + base, end, "LBMC message")
    headers = []
    while next_type != NHDR_DATA and next_type != NHDR_NONE:
        header, next_type = _decode_header(next_type, reader)
        headers.append(header)
    has_data = next_type == NHDR_DATA
    if has_data:
        payload = buf[reader.pos:end]
    elif reader.remaining:
        raise reader.fail(f"{reader.remaining} bytes after a chain that ends in NONE")
    else:
        payload = b""
    auto = _auto_has_data(msg_type, payload)
    return LbmcMessage(msg_type, headers, payload, tidx, sqn, None if has_data == auto else has_data), end


def _decode_header(header_type: int, reader: Reader) -> tuple[object, int]:
    """Read one extension header; return it and the type of the header after it."""
    start = reader.pos
    next_type, length = reader.unpack(_CHAIN_LINK)
    if length < 2:
        raise reader.fail(f"extension header 0x{header_type:02x} has hdr_len {length}", start)
    body = reader.sub(length - 2, _HEADER_LABELS[header_type])
    cls = _HEADER_CLASSES.get(header_type)
    header = cls.wire_parse(header_type, body) if cls is not None else None
    if header is None or body.remaining:
        body.pos = start + 2
        header = RawHeader(header_type, body.take(body.remaining))
    return header, next_type


def split_lbmc_stream(buf) -> tuple[list[LbmcMessage], int]:
    """Decode every complete message at the front of a TCP receive buffer.

    Returns the messages and the number of bytes they used; an incomplete message at the
    end is left for the next call. A malformed message raises WireError as soon as its
    first 4 bytes are available, so a corrupt stream is detected without waiting for
    (possibly never arriving) bytes.
    """
    buf = as_bytes(buf)
    messages = []
    offset = 0
    while True:
        msglen = peek_msglen(buf, offset)
        if msglen is None:
            break
        check_message_start(buf, offset)
        if offset + msglen > len(buf):
            break
        message, offset = _decode_at(buf, offset)
        messages.append(message)
    return messages, offset
