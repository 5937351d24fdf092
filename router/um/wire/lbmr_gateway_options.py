"""Options of the DRO's LBMR messages (wire.md §1.9): the TNWG options carried by
TNWG_MSG CTXINFO/TRREQ, and the REMOTE_CONTEXT_INFO record options.

Both sets are ``{type u8, len u8, flags u16, ...}``; each has a NAME option of variable
length, written NUL-terminated (TRsniffer prints names with %s) and read up to the first
NUL or the end of the option. Unknown types are kept as ``Raw*Option`` and round-trip.

Wireshark 4.0.17 walks TNWG options with a running total (wire.md §1.10.1), so more than
two in one message misdecode there; that limits what we may send, not what we accept.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from router.um.wire import lbmr_constants as c
from router.um.wire._codec import Layout, Reader, cstring_bytes, pack, text_from_bytes
from router.um.wire.errors import WireError
from router.um.wire.lbmr_options import tlv

_U16 = struct.Struct(">H")


@dataclass(slots=True)
class TnwgCtxInstOption:
    instance: bytes
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.TNWG_OPT_CTXINST
    LAYOUT: ClassVar[Layout] = Layout("flags:H instance:8s")


@dataclass(slots=True)
class TnwgAddressOption:
    ip: str
    port: int
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.TNWG_OPT_ADDRESS
    LAYOUT: ClassVar[Layout] = Layout("flags:H port:H x2 ip:ip")


@dataclass(slots=True)
class TnwgDomainOption:
    domain_id: int
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.TNWG_OPT_DOMAIN
    LAYOUT: ClassVar[Layout] = Layout("flags:H domain_id:I")


@dataclass(slots=True)
class TnwgNameOption:
    name: str
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.TNWG_OPT_NAME


@dataclass(slots=True)
class RawTnwgOption:
    option_type: int
    body: bytes


@dataclass(slots=True)
class RciAddressOption:
    domain_id: int
    ip: str
    port: int
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.RCTXINFO_OPT_ADDRESS
    LAYOUT: ClassVar[Layout] = Layout("flags:H domain_id:I ip:ip port:H x2")


@dataclass(slots=True)
class RciInstanceOption:
    instance: bytes
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.RCTXINFO_OPT_INSTANCE
    LAYOUT: ClassVar[Layout] = Layout("flags:H instance:8s")


@dataclass(slots=True)
class RciOdomainOption:
    domain_id: int
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.RCTXINFO_OPT_ODOMAIN
    LAYOUT: ClassVar[Layout] = Layout("flags:H domain_id:I")


@dataclass(slots=True)
class RciNameOption:
    name: str
    flags: int = 0
    OPTION_TYPE: ClassVar[int] = c.RCTXINFO_OPT_NAME


@dataclass(slots=True)
class RawRciOption:
    option_type: int
    body: bytes


def name_field(raw: bytes) -> str:
    nul = raw.find(b"\x00")
    return text_from_bytes(raw if nul < 0 else raw[:nul])


class OptionFamily:
    """``{type u8, len u8, flags u16, ...}`` options: the TNWG and the REMOTE_CONTEXT_INFO sets."""

    def __init__(self, what: str, fixed: tuple, name_cls: type, raw_cls: type) -> None:
        self.what = what
        self.fixed = {cls.OPTION_TYPE: cls for cls in fixed}
        self.name_cls = name_cls
        self.raw_cls = raw_cls

    def encode(self, options: list) -> bytes:
        parts = []
        for option in options:
            what = f"{self.what} {type(option).__name__}"
            if isinstance(option, self.raw_cls):
                if option.option_type in self.fixed or option.option_type == self.name_cls.OPTION_TYPE:
                    raise WireError(f"{what}: type 0x{option.option_type:02x} is a modelled option")
                parts.append(tlv(option.option_type, bytes(option.body), what))
            elif isinstance(option, self.name_cls):
                body = pack(_U16, what, option.flags) + cstring_bytes(option.name, what)
                parts.append(tlv(option.OPTION_TYPE, body, what))
            elif type(option) in self.fixed.values():
                parts.append(tlv(option.OPTION_TYPE, option.LAYOUT.encode(option, what), what))
            else:
                raise WireError(f"{what}: not a {self.what}")
        return b"".join(parts)

    def decode(self, reader: Reader) -> list:
        options = []
        while reader.remaining:
            at = reader.pos
            option_type, length = reader.u8(), reader.u8()
            if length < 4 or length - 2 > reader.remaining:
                raise reader.fail(f"{self.what} 0x{option_type:02x} has bad length {length}", at)
            body = reader.sub(length - 2, self.what)
            cls = self.fixed.get(option_type)
            if option_type == self.name_cls.OPTION_TYPE:
                flags = body.u16()
                options.append(self.name_cls(name_field(body.take(body.remaining)), flags))
            elif cls is None:
                options.append(self.raw_cls(option_type, body.take(body.remaining)))
            elif body.remaining != cls.LAYOUT.size:
                # REMOTE_CONTEXT_INFO options are stepped over by this fixed size whatever `len`
                # says, so a wrong length would shift everything after it.
                raise reader.fail(f"{self.what} 0x{option_type:02x} must be {cls.LAYOUT.size + 2} bytes", at)
            else:
                options.append(cls(**cls.LAYOUT.decode(body)))
        return options


TNWG_OPTIONS = OptionFamily(
    "LBMR TNWG option", (TnwgCtxInstOption, TnwgAddressOption, TnwgDomainOption),
    TnwgNameOption, RawTnwgOption)
RCTX_OPTIONS = OptionFamily(
    "LBMR REMOTE_CONTEXT_INFO option", (RciAddressOption, RciInstanceOption, RciOdomainOption),
    RciNameOption, RawRciOption)
