"""The LBMC TSNI header (0x20): a source's topic sequence number info (Wireshark's packet-lbmc.c).

A source that has sent nothing for a while says, per topic of its transport session, the sequence
number of the last message it sent; a receiver whose next expected one is at or below it lost the
rest (the tail of a burst: no later message would ever show the gap). Carried in a CONTROL message.

    @2  u16   IGNORE 0x8000 | number of records (low 15 bits)
    @4  per record, 8 bytes: topic index u32, sequence number u32
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import ClassVar

from router.um.wire import lbmc_constants as c
from router.um.wire._codec import U16, Reader, pack
from router.um.wire.errors import WireError

TSNI_IGNORE = 0x8000
_RECORD = struct.Struct(">II")
MAX_RECORDS = (255 - 4) // _RECORD.size      # hdr_len is one byte


@dataclass(slots=True)
class Tsni:
    records: list[tuple[int, int]] = field(default_factory=list)     # (topic index, last sequence number)
    flags: int = 0                                                    # IGNORE only
    HEADER_TYPE: ClassVar[int] = c.NHDR_TSNI

    def wire_type(self) -> int:
        return self.HEADER_TYPE

    def wire_body(self) -> bytes:
        if len(self.records) > MAX_RECORDS:
            raise WireError(f"LBMC Tsni: {len(self.records)} records, at most {MAX_RECORDS} fit one header")
        body = pack(U16, "LBMC Tsni", (self.flags & TSNI_IGNORE) | len(self.records))
        return body + b"".join(pack(_RECORD, "LBMC Tsni record", tidx, sqn) for tidx, sqn in self.records)

    @classmethod
    def wire_parse(cls, header_type: int, reader: Reader):
        if reader.remaining < 2:
            return None
        word = reader.u16()
        count = word & ~TSNI_IGNORE
        if reader.remaining != count * _RECORD.size:
            return None
        return cls([reader.unpack(_RECORD) for _ in range(count)], word & TSNI_IGNORE)


def tsni_messages(records: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """`records` in groups that each fit one TSNI header."""
    return [records[i:i + MAX_RECORDS] for i in range(0, len(records), MAX_RECORDS)]
