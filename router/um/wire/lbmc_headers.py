"""LBMC extension headers of the data path (wire.md §2.3), and the machinery all headers share.

Every header is ``{next_hdr u8, hdr_len u8, body}``. A header object models only the
body: ``next_hdr`` (the type of the *following* header) and ``hdr_len`` are computed by
:func:`router.um.wire.lbmc.encode_lbmc`. Each class provides ``wire_type()``,
``wire_body()`` and ``wire_parse(header_type, reader)``; ``wire_parse`` returns None when
the body does not have the modelled size, and the message codec then keeps it as a
:class:`RawHeader` (Wireshark steps over headers by ``hdr_len`` too, so nothing else in
the message is lost). The method names avoid clashing with the ``header_type``/``body``
fields of :class:`CtxInst` and :class:`RawHeader`.

Text headers (TOPICNAME, GATEWAY_NAME, CTXINFO's name) are written NUL-terminated, as
C senders do; when read, the text ends at the first NUL or at the end of the header.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from router.um.wire import lbmc_constants as c
from router.um.wire._codec import U16, Layout, Reader, cstring_bytes, pack, text_from_bytes
from router.um.wire.errors import WireError


class FixedHeader:
    """Mixin for headers whose body is one fixed :class:`Layout`."""

    __slots__ = ()
    HEADER_TYPE: ClassVar[int]
    LAYOUT: ClassVar[Layout]

    def wire_type(self) -> int:
        return self.HEADER_TYPE

    def wire_body(self) -> bytes:
        return self.LAYOUT.encode(self, f"LBMC {type(self).__name__}")

    @classmethod
    def wire_parse(cls, header_type: int, reader: Reader):
        if reader.remaining != cls.LAYOUT.size:
            return None
        return cls(**cls.LAYOUT.decode(reader))


def text_field(raw: bytes) -> str:
    nul = raw.find(b"\x00")
    return text_from_bytes(raw if nul < 0 else raw[:nul])


class TextHeader:
    """Mixin for ``{flags u16, text}`` headers; the text attribute is ``TEXT_FIELD``."""

    __slots__ = ()
    HEADER_TYPE: ClassVar[int]
    TEXT_FIELD: ClassVar[str]

    def wire_type(self) -> int:
        return self.HEADER_TYPE

    def wire_body(self) -> bytes:
        what = f"LBMC {type(self).__name__}"
        return pack(U16, what, self.flags) + cstring_bytes(getattr(self, self.TEXT_FIELD), what)

    @classmethod
    def wire_parse(cls, header_type: int, reader: Reader):
        if reader.remaining < 2:
            return None
        flags = reader.u16()
        return cls(**{cls.TEXT_FIELD: text_field(reader.take(reader.remaining)), "flags": flags})


@dataclass(slots=True)
class Frag(FixedHeader):
    """A piece of a fragmented message: ``offset`` of this piece, ``length`` of the whole."""

    first_sqn: int
    offset: int
    length: int
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_FRAG
    LAYOUT: ClassVar[Layout] = Layout("flags:H first_sqn:I offset:I length:I")


@dataclass(slots=True)
class Batch(FixedHeader):
    flags: int
    HEADER_TYPE: ClassVar[int] = c.NHDR_BATCH
    LAYOUT: ClassVar[Layout] = Layout("flags:H")


@dataclass(slots=True)
class Request(FixedHeader):
    transport: int
    qidx: int
    port: int
    ipaddr: str
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_REQUEST
    LAYOUT: ClassVar[Layout] = Layout("flags:B transport:B qidx:I port:H x2 ipaddr:ip")


@dataclass(slots=True)
class TopicName(TextHeader):
    topic: str
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_TOPICNAME
    TEXT_FIELD: ClassVar[str] = "topic"


@dataclass(slots=True)
class Otid(FixedHeader):
    otid: bytes
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_OTID
    LAYOUT: ClassVar[Layout] = Layout("flags:H otid:32s")


CTXINST_HEADER_TYPES = (c.NHDR_CTXINSTD, c.NHDR_CTXINSTR, c.NHDR_CTXINST, c.NHDR_UME_CTXINSTS)


@dataclass(slots=True)
class CtxInst(FixedHeader):
    """CTXINST (0x42), CTXINSTD (0x0C), CTXINSTR (0x0D) and UME_CTXINSTS (0x3C): one layout."""

    ctxinst: bytes
    header_type: int = c.NHDR_CTXINST
    flags: int = 0
    LAYOUT: ClassVar[Layout] = Layout("flags:H ctxinst:8s")

    def wire_type(self) -> int:
        if self.header_type not in CTXINST_HEADER_TYPES:
            raise WireError(f"LBMC CtxInst: 0x{self.header_type:02x} is not a context-instance header")
        return self.header_type

    @classmethod
    def wire_parse(cls, header_type: int, reader: Reader):
        if reader.remaining != cls.LAYOUT.size:
            return None
        return cls(header_type=header_type, **cls.LAYOUT.decode(reader))


@dataclass(slots=True)
class SrcIdx(FixedHeader):
    srcidx: bytes
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_SRCIDX
    LAYOUT: ClassVar[Layout] = Layout("flags:H srcidx:8s")


@dataclass(slots=True)
class Stream(FixedHeader):
    stream_id: int
    sqn: int
    ctxinst: bytes
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_STREAM
    LAYOUT: ClassVar[Layout] = Layout("flags:H stream_id:I sqn:I ctxinst:8s")


@dataclass(slots=True)
class Destination(FixedHeader):
    domain_id: int
    ipaddr: str
    port: int
    hops_taken: int
    orig_domain_id: int
    orig_ipaddr: str
    orig_port: int
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_DESTINATION
    LAYOUT: ClassVar[Layout] = Layout(
        "flags:H domain_id:I ipaddr:ip port:H hops_taken:H orig_domain_id:I orig_ipaddr:ip"
        " orig_port:H x2")


@dataclass(slots=True)
class TopicIdx(FixedHeader):
    tidx: int
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_TOPIC_IDX
    # The dissector declares these flags as a u8 (IGNORE 0x80) followed by a reserved byte.
    LAYOUT: ClassVar[Layout] = Layout("flags:B x1 tidx:I")


@dataclass(slots=True)
class TcpSid(FixedHeader):
    """Binds an LBT-TCP stream to the TIR whose TCP info (tlen 10) carries this session id."""

    sid: int
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_TCP_SID
    LAYOUT: ClassVar[Layout] = Layout("flags:H sid:I")


@dataclass(slots=True)
class Domain(FixedHeader):
    domain: int
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_DOMAIN
    LAYOUT: ClassVar[Layout] = Layout("flags:H domain:I")


@dataclass(slots=True)
class ODomain(FixedHeader):
    domain: int
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_ODOMAIN
    LAYOUT: ClassVar[Layout] = Layout("flags:H domain:I")


@dataclass(slots=True)
class PatIdx(FixedHeader):
    patidx: bytes
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_PATIDX
    LAYOUT: ClassVar[Layout] = Layout("flags:H patidx:8s")


@dataclass(slots=True)
class RawHeader:
    """An extension header this codec does not model; ``body`` follows next_hdr/hdr_len."""

    header_type: int
    body: bytes

    def wire_type(self) -> int:
        if self.header_type in (c.NHDR_DATA, c.NHDR_NONE) or not 0 <= self.header_type <= 0xFF:
            raise WireError(f"LBMC RawHeader: 0x{self.header_type:02x} cannot be a header type")
        return self.header_type

    def wire_body(self) -> bytes:
        return bytes(self.body)


CORE_HEADERS = (Frag, Batch, Request, TopicName, Otid, SrcIdx, Stream, Destination, TopicIdx,
                TcpSid, Domain, ODomain, PatIdx)
