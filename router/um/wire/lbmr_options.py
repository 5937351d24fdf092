"""LBMR options: the per-TIR topic-option block (wire.md §1.6) and the packet trailer (§1.3).

Both are type/length/value lists whose ``len`` byte covers the whole option. The leading
(topic block) or trailing (packet) OPT_LEN record is implicit: encoders compute it and
decoders check it, so callers only ever handle the real options.

Reading choices where the sources leave room:
- A topic option of a known type but an unexpected length decodes as
  :class:`RawTopicOption` (Wireshark advances by ``len`` too, so the rest of the TIR is
  still sound); a packet option of a known type must have its exact length, because
  Wireshark advances packet options by the fixed size and would misparse the rest.
- A UMQ_QINFO queue name is the ``len - 4`` bytes as they are (no NUL is added or removed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from router.um.wire import lbmr_constants as c
from router.um.wire._codec import U16, Layout, Reader, pack, text_bytes, text_from_bytes
from router.um.wire.errors import WireError

_OPT_LEN = Layout("type:B len:B total_len:H")


@dataclass(slots=True)
class UmeOption:
    store_tcp_port: int
    src_tcp_port: int
    store_tcp_addr: str
    src_tcp_addr: str
    src_reg_id: int
    transport_idx: int
    high_seqnum: int
    low_seqnum: int
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.TOPT_UME
    LAYOUT: ClassVar[Layout] = Layout(
        "flags:H store_tcp_port:H src_tcp_port:H store_tcp_addr:ip src_tcp_addr:ip"
        " src_reg_id:I transport_idx:I high_seqnum:I low_seqnum:I")


@dataclass(slots=True)
class UmeStoreOption:
    grp_idx: int
    store_tcp_port: int
    store_idx: int
    store_ip_addr: str
    src_reg_id: int
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.TOPT_UME_STORE
    LAYOUT: ClassVar[Layout] = Layout(
        "flags:B grp_idx:B store_tcp_port:H store_idx:H store_ip_addr:ip src_reg_id:I")


@dataclass(slots=True)
class UmeStoreGroupOption:
    grp_idx: int
    grp_sz: int
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.TOPT_UME_STORE_GROUP
    LAYOUT: ClassVar[Layout] = Layout("flags:B grp_idx:B grp_sz:H x2")


@dataclass(slots=True)
class LateJoinOption:
    src_tcp_port: int
    src_ip: str
    transport_idx: int
    high_seqnum: int
    low_seqnum: int
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.TOPT_LATEJOIN
    LAYOUT: ClassVar[Layout] = Layout(
        "flags:H src_tcp_port:H x2 src_ip:ip transport_idx:I high_seqnum:I low_seqnum:I")


@dataclass(slots=True)
class UmqRcrIdxOption:
    rcr_idx: int
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.TOPT_UMQ_RCRIDX
    LAYOUT: ClassVar[Layout] = Layout("flags:H rcr_idx:I")


@dataclass(slots=True)
class UmqQinfoOption:
    queue: str
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.TOPT_UMQ_QINFO


@dataclass(slots=True)
class CostOption:
    hop_count: int
    cost: int
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.TOPT_COST
    LAYOUT: ClassVar[Layout] = Layout("flags:B hop_count:B cost:I")


@dataclass(slots=True)
class OtidOption:
    otid: bytes
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.TOPT_OTID
    LAYOUT: ClassVar[Layout] = Layout("flags:H otid:32s")


@dataclass(slots=True)
class CtxInstOption:
    """CTXINST (0x09), CTXINSTS (0x0A, store) and CTXINSTQ (0x0C, queue) share one layout."""

    ctxinst: bytes
    option_type: int = c.TOPT_CTXINST
    idx: int = 0
    flags: int = 0
    LAYOUT: ClassVar[Layout] = Layout("flags:B idx:B ctxinst:8s")


@dataclass(slots=True)
class UlbOption:
    queue_id: int
    regid: bytes
    ulb_src_id: int
    src_ip: str
    src_tcp_port: int
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.TOPT_ULB
    LAYOUT: ClassVar[Layout] = Layout(
        "flags:H queue_id:I regid:8s ulb_src_id:I src_ip:ip src_tcp_port:H x2")


@dataclass(slots=True)
class DomainIdOption:
    domain_id: int
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.TOPT_DOMAIN_ID
    LAYOUT: ClassVar[Layout] = Layout("flags:H domain_id:I")


@dataclass(slots=True)
class ExFuncOption:
    src_tcp_port: int
    src_ip: str
    functionality_flags: int
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.TOPT_EXFUNC
    LAYOUT: ClassVar[Layout] = Layout("flags:H src_tcp_port:H x2 src_ip:ip functionality_flags:I")


@dataclass(slots=True)
class RawTopicOption:
    """A topic option this codec does not model; ``body`` is everything after type/len."""

    option_type: int
    body: bytes


_CTXINST_TYPES = (c.TOPT_CTXINST, c.TOPT_CTXINSTS, c.TOPT_CTXINSTQ)
_TOPIC_OPTIONS = {cls.OPTION_TYPE: cls for cls in (
    UmeOption, UmeStoreOption, UmeStoreGroupOption, LateJoinOption, UmqRcrIdxOption,
    CostOption, OtidOption, UlbOption, DomainIdOption, ExFuncOption)}
_TOPIC_OPTIONS.update({t: CtxInstOption for t in _CTXINST_TYPES})


_TLV_HEAD = Layout("type:B len:B").struct


def tlv(option_type: int, body: bytes, what: str) -> bytes:
    """``{type u8, len u8 (whole option), body}``, the framing every LBMR option shares."""
    if len(body) + 2 > 0xFF:
        raise WireError(f"{what}: option of {len(body) + 2} bytes exceeds 255")
    return pack(_TLV_HEAD, what, option_type, len(body) + 2) + body


def _encode_topic_option(option) -> bytes:
    what = f"LBMR topic option {type(option).__name__}"
    if isinstance(option, RawTopicOption):
        body = bytes(option.body)
        if _decodes_as_modelled(option.option_type, body):
            raise WireError(f"{what}: type 0x{option.option_type:02x} with this body is a modelled option")
        return tlv(option.option_type, body, what)
    if isinstance(option, UmqQinfoOption):
        body = pack(U16, what, option.flags) + text_bytes(option.queue, what, allow_nul=True)
        return tlv(c.TOPT_UMQ_QINFO, body, what)
    if isinstance(option, CtxInstOption):
        if option.option_type not in _CTXINST_TYPES:
            raise WireError(f"{what}: option_type 0x{option.option_type:02x} is not a CTXINST type")
        return tlv(option.option_type, option.LAYOUT.encode(option, what), what)
    if type(option) not in _TOPIC_OPTIONS.values():
        raise WireError(f"{what}: not a topic option")
    return tlv(option.OPTION_TYPE, option.LAYOUT.encode(option, what), what)


def _decodes_as_modelled(option_type: int, body: bytes) -> bool:
    """Would the decoder turn this raw option into a typed one? (Then the raw form cannot
    round-trip, and the caller should have used the typed class.)"""
    if option_type == c.TOPT_UMQ_QINFO:
        return len(body) >= 2
    cls = _TOPIC_OPTIONS.get(option_type)
    return cls is not None and len(body) == cls.LAYOUT.size


def encode_topic_options(options: list) -> bytes:
    """The whole topic-option block, leading OPT_LEN {0x00, 4, total_len} included."""
    body = b"".join(_encode_topic_option(option) for option in options)
    total = len(body) + _OPT_LEN.size
    if total > 0xFFFF:
        raise WireError(f"LBMR topic options: block of {total} bytes exceeds 65535")
    return pack(_OPT_LEN.struct, "LBMR topic options", c.TOPT_LEN, _OPT_LEN.size, total) + body


def topic_options_size(options: list) -> int:
    """Encoded size of a topic-option block, computed without encoding it."""
    size = _OPT_LEN.size
    for option in options:
        if isinstance(option, RawTopicOption):
            size += 2 + len(option.body)
        elif isinstance(option, UmqQinfoOption):
            size += 4 + len(text_bytes(option.queue, "LBMR UMQ_QINFO option", allow_nul=True))
        else:
            size += 2 + option.LAYOUT.size
    return size


def _decode_topic_option(option_type: int, reader: Reader):
    cls = _TOPIC_OPTIONS.get(option_type)
    if option_type == c.TOPT_UMQ_QINFO and reader.remaining >= 2:
        flags = reader.u16()
        return UmqQinfoOption(text_from_bytes(reader.take(reader.remaining)), flags)
    if cls is None or reader.remaining != cls.LAYOUT.size:
        return RawTopicOption(option_type, reader.take(reader.remaining))
    fields = cls.LAYOUT.decode(reader)
    if cls is CtxInstOption:
        fields["option_type"] = option_type
    return cls(**fields)


def decode_topic_options(reader: Reader) -> list:
    """Read a topic-option block at the reader's position and return its options."""
    start = reader.pos
    head = _OPT_LEN.decode(reader)
    if head["type"] != c.TOPT_LEN or head["len"] != _OPT_LEN.size:
        raise reader.fail("topic options must start with OPT_LEN {0x00, 4}", start)
    total = head["total_len"]
    if total < _OPT_LEN.size or total - _OPT_LEN.size > reader.remaining:
        raise reader.fail(f"topic option block length {total} does not fit", start)
    block = reader.sub(total - _OPT_LEN.size, "LBMR topic options")
    options = []
    while block.remaining:
        at = block.pos
        option_type, length = block.u8(), block.u8()
        if length < 2:
            raise block.fail(f"option 0x{option_type:02x} has length {length}", at)
        if length - 2 > block.remaining:
            raise block.fail(f"option 0x{option_type:02x} of {length} bytes overruns the block", at)
        options.append(_decode_topic_option(option_type, block.sub(length - 2, "LBMR topic option")))
    return options


# ---- packet options (trailer) -------------------------------------------------------------

@dataclass(slots=True)
class SrcIdOption:
    src_id: bytes
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.LBMR_OPT_SRC_ID
    LAYOUT: ClassVar[Layout] = Layout("flags:H src_id:8s")


@dataclass(slots=True)
class SrcTypeOption:
    src_type: int
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.LBMR_OPT_SRC_TYPE
    LAYOUT: ClassVar[Layout] = Layout("flags:B src_type:B")


@dataclass(slots=True)
class VersionOption:
    version: int
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.LBMR_OPT_VERSION
    LAYOUT: ClassVar[Layout] = Layout("flags:H version:I")


@dataclass(slots=True)
class LocalDomainOption:
    domain_id: int
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.LBMR_OPT_LOCAL_DOMAIN
    LAYOUT: ClassVar[Layout] = Layout("flags:H domain_id:I")


@dataclass(slots=True)
class RawPacketOption:
    """A packet option this codec does not model; ``body`` is everything after type/len."""

    option_type: int
    body: bytes


_PACKET_OPTIONS = {cls.OPTION_TYPE: cls for cls in (
    SrcIdOption, SrcTypeOption, VersionOption, LocalDomainOption)}


def encode_packet_options(options: list) -> bytes:
    """The trailer: the options, then the OPT_LEN record {0x80, 4, total_len} at the very end."""
    parts = []
    for option in options:
        what = f"LBMR packet option {type(option).__name__}"
        if isinstance(option, RawPacketOption):
            if option.option_type in _PACKET_OPTIONS:
                raise WireError(f"{what}: type 0x{option.option_type:02x} is a modelled option")
            parts.append(tlv(option.option_type, bytes(option.body), what))
        elif type(option) in _PACKET_OPTIONS.values():
            parts.append(tlv(option.OPTION_TYPE, option.LAYOUT.encode(option, what), what))
        else:
            raise WireError(f"{what}: not a packet option")
    body = b"".join(parts)
    total = len(body) + _OPT_LEN.size
    if total > 0xFFFF:
        raise WireError(f"LBMR packet options: trailer of {total} bytes exceeds 65535")
    return body + pack(_OPT_LEN.struct, "LBMR packet options", c.LBMR_OPT_LEN, _OPT_LEN.size, total)


def split_packet_options(data: bytes) -> tuple[int, list]:
    """Locate the trailer of a packet whose header has the OPTS bit.

    Returns ``(body_end, options)``; the body is ``data[4:body_end]``.
    """
    reader = Reader(data, max(len(data) - _OPT_LEN.size, 0), len(data), "LBMR packet options")
    at = reader.pos
    head = _OPT_LEN.decode(reader)
    if head["type"] != c.LBMR_OPT_LEN or head["len"] != _OPT_LEN.size:
        raise reader.fail("OPTS bit set but the packet does not end with OPT_LEN {0x80, 4}", at)
    total = head["total_len"]
    body_end = len(data) - total
    if total < _OPT_LEN.size or body_end < 4:
        raise reader.fail(f"trailer length {total} does not fit a {len(data)}-byte packet", at)
    block = Reader(data, body_end, at, "LBMR packet options")
    options = []
    while block.remaining:
        start = block.pos
        option_type, length = block.u8(), block.u8()
        if length < 2 or length - 2 > block.remaining:
            raise block.fail(f"option 0x{option_type:02x} has bad length {length}", start)
        body = block.sub(length - 2, "LBMR packet option")
        cls = _PACKET_OPTIONS.get(option_type)
        if cls is None:
            options.append(RawPacketOption(option_type, body.take(body.remaining)))
        elif body.remaining != cls.LAYOUT.size:
            raise block.fail(f"option 0x{option_type:02x} must be {cls.LAYOUT.size + 2} bytes", start)
        else:
            options.append(cls(**cls.LAYOUT.decode(body)))
    return body_end, options
