"""LBMC extension headers of the DRO peer link (wire.md §3 b): keepalive, interest,
advertisement, context info, capabilities, route info and gateway name.

Peer portals exchange these in LBMC CONTROL messages over TCP. The dissector gives the
field layouts only; which headers travel together is the peer-link code's business.
The machinery (``wire_type``/``wire_body``/``wire_parse``) is described in
:mod:`router.um.wire.lbmc_headers`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import ClassVar

from router.um.wire import lbmc_constants as c
from router.um.wire._codec import Layout, Reader, cstring_bytes, pack
from router.um.wire.errors import WireError
from router.um.wire.lbmc_headers import FixedHeader, TextHeader, text_field

_U32 = struct.Struct(">I")


@dataclass(slots=True)
class TnwgKeepalive(FixedHeader):
    """Peer keepalive: ``flags`` KA_QUERY or KA_RESPONSE; the timestamp is echoed back."""

    flags: int
    idx: int
    ts_seconds: int
    ts_microseconds: int
    HEADER_TYPE: ClassVar[int] = c.NHDR_TNWG_KA
    LAYOUT: ClassVar[Layout] = Layout("flags:H idx:I ts_seconds:Q ts_microseconds:I x4 x40")


@dataclass(slots=True)
class TopicInterest(FixedHeader):
    """Interest in one topic; the topic itself follows in a TOPICNAME header."""

    flags: int
    domain_id: int
    HEADER_TYPE: ClassVar[int] = c.NHDR_TOPIC_INTEREST
    LAYOUT: ClassVar[Layout] = Layout("flags:H domain_id:I")


@dataclass(slots=True)
class PatternInterest(FixedHeader):
    flags: int
    pattern_type: int
    domain_id: int
    idx: bytes
    HEADER_TYPE: ClassVar[int] = c.NHDR_PATTERN_INTEREST
    LAYOUT: ClassVar[Layout] = Layout("flags:B pattern_type:B domain_id:I idx:8s")


def _domain_list(domain_ids: list, what: str) -> bytes:
    return b"".join(pack(_U32, what, d) for d in domain_ids)


def _read_domains(reader: Reader, count: int):
    if reader.remaining != 4 * count:
        return None
    return [reader.u32() for _ in range(count)]


@dataclass(slots=True)
class TopicMdInterest:
    """Topic interest on behalf of several domains (the topic follows in TOPICNAME)."""

    flags: int
    domain_ids: list = field(default_factory=list)
    HEADER_TYPE: ClassVar[int] = c.NHDR_TOPIC_MD_INTEREST
    HEAD: ClassVar[struct.Struct] = struct.Struct(">HHH")    # flags, domain_count, res

    def wire_type(self) -> int:
        return self.HEADER_TYPE

    def wire_body(self) -> bytes:
        what = "LBMC TopicMdInterest"
        return pack(self.HEAD, what, self.flags, len(self.domain_ids), 0) + _domain_list(self.domain_ids, what)

    @classmethod
    def wire_parse(cls, header_type: int, reader: Reader):
        if reader.remaining < cls.HEAD.size:
            return None
        flags, count, _res = reader.unpack(cls.HEAD)
        domains = _read_domains(reader, count)
        return None if domains is None else cls(flags, domains)


@dataclass(slots=True)
class PatternMdInterest:
    flags: int
    pattern_type: int
    idx: bytes
    domain_ids: list = field(default_factory=list)
    HEADER_TYPE: ClassVar[int] = c.NHDR_PATTERN_MD_INTEREST
    HEAD: ClassVar[Layout] = Layout("flags:B pattern_type:B count:H x2 idx:8s")

    def wire_type(self) -> int:
        return self.HEADER_TYPE

    @property
    def count(self) -> int:
        return len(self.domain_ids)

    def wire_body(self) -> bytes:
        what = "LBMC PatternMdInterest"
        return self.HEAD.encode(self, what) + _domain_list(self.domain_ids, what)

    @classmethod
    def wire_parse(cls, header_type: int, reader: Reader):
        if reader.remaining < cls.HEAD.size:
            return None
        head = cls.HEAD.decode(reader)
        domains = _read_domains(reader, head["count"])
        if domains is None:
            return None
        return cls(head["flags"], head["pattern_type"], head["idx"], domains)


@dataclass(slots=True)
class Advertisement(FixedHeader):
    flags: int
    hop_count: int
    ad_flags: int
    cost: int
    transport_idx: int
    topic_idx: int
    low_seqno: int
    high_seqno: int
    domain_id: int
    pat_idx: bytes
    ctxinst: bytes
    HEADER_TYPE: ClassVar[int] = c.NHDR_ADVERTISEMENT
    LAYOUT: ClassVar[Layout] = Layout(
        "flags:B hop_count:B ad_flags:I cost:I transport_idx:I topic_idx:I low_seqno:I"
        " high_seqno:I domain_id:I pat_idx:8s ctxinst:8s")


@dataclass(slots=True)
class GwCtxInfo:
    """CTXINFO (0x40): a peer's address, domain and context instance; ``name`` is optional."""

    flags: int
    hop_count: int
    port: int
    addr: str
    domain_id: int
    ctxinst: bytes
    name: str = ""
    HEADER_TYPE: ClassVar[int] = c.NHDR_CTXINFO
    LAYOUT: ClassVar[Layout] = Layout(
        "flags:H x1 hop_count:B port:H addr:ip domain_id:I ctxinst:8s")

    def wire_type(self) -> int:
        return self.HEADER_TYPE

    def wire_body(self) -> bytes:
        what = "LBMC GwCtxInfo"
        return self.LAYOUT.encode(self, what) + (cstring_bytes(self.name, what) if self.name else b"")

    @classmethod
    def wire_parse(cls, header_type: int, reader: Reader):
        if reader.remaining < cls.LAYOUT.size:
            return None
        fields = cls.LAYOUT.decode(reader)
        return cls(name=text_field(reader.take(reader.remaining)), **fields)


@dataclass(slots=True)
class TnwgCapabilities:
    """``version`` shares the flags word with IGNORE: flags = IGNORE (0x8000) | version."""

    version: int
    capabilities1: int = 0
    capabilities2: int = 0
    capabilities3: int = 0
    capabilities4: int = 0
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_TNWG_CAPABILITIES
    LAYOUT: ClassVar[struct.Struct] = struct.Struct(">HIIII")

    def wire_type(self) -> int:
        return self.HEADER_TYPE

    def wire_body(self) -> bytes:
        mask = c.TNWG_CAPABILITIES_VERSION_MASK
        if not 0 <= self.version <= mask or self.flags & mask:
            raise WireError("LBMC TnwgCapabilities: version must fit 15 bits and flags only bit 15")
        return pack(self.LAYOUT, "LBMC TnwgCapabilities", self.flags | self.version, self.capabilities1,
                    self.capabilities2, self.capabilities3, self.capabilities4)

    @classmethod
    def wire_parse(cls, header_type: int, reader: Reader):
        if reader.remaining != cls.LAYOUT.size:
            return None
        word, cap1, cap2, cap3, cap4 = reader.unpack(cls.LAYOUT)
        mask = c.TNWG_CAPABILITIES_VERSION_MASK
        return cls(word & mask, cap1, cap2, cap3, cap4, word & ~mask)


@dataclass(slots=True)
class RouteInfo(FixedHeader):
    gateway_version: int
    configuration_signature: int
    node_id: int
    topology: int
    vers: int
    sqn: int
    ttl: int
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_ROUTE_INFO
    LAYOUT: ClassVar[Layout] = Layout(
        "flags:H gateway_version:I configuration_signature:I node_id:Q topology:I vers:H sqn:H"
        " ttl:B x1 x2")


@dataclass(slots=True)
class RouteInfoNeighbor(FixedHeader):
    node_id: int
    ingress_cost: int
    egress_cost: int
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_ROUTE_INFO_NEIGHBOR
    LAYOUT: ClassVar[Layout] = Layout("flags:H node_id:Q ingress_cost:I egress_cost:I")


@dataclass(slots=True)
class GatewayName(TextHeader):
    name: str
    flags: int = 0
    HEADER_TYPE: ClassVar[int] = c.NHDR_GATEWAY_NAME
    TEXT_FIELD: ClassVar[str] = "name"


GATEWAY_HEADERS = (TnwgKeepalive, TopicInterest, PatternInterest, TopicMdInterest, PatternMdInterest,
                   Advertisement, GwCtxInfo, TnwgCapabilities, RouteInfo, RouteInfoNeighbor,
                   GatewayName)
