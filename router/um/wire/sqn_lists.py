"""What LBT-RM's and LBT-RU's packets share: lists of 32-bit sequence numbers (NAKs, NCFs) with a
u16 count, in a UDP datagram. Errors name the protocol and the offset."""
from __future__ import annotations

import struct

from router.um.wire.errors import WireError

MAX_LIST = 0xFFFF
MAX_DATAGRAM = 65507                                    # the largest UDP payload over IPv4


def fits(packet: bytes, protocol: str, what: str) -> bytes:
    """`packet`, or WireError if it does not fit one UDP datagram."""
    if len(packet) > MAX_DATAGRAM:
        raise WireError(f"{protocol} {what}: {len(packet)} bytes do not fit a UDP datagram ({MAX_DATAGRAM})")
    return packet


def pack_sqns(sqns, protocol: str) -> bytes:
    if len(sqns) > MAX_LIST:
        raise WireError(f"{protocol}: a list of {len(sqns)} sequence numbers (at most {MAX_LIST})")
    return struct.pack(f">{len(sqns)}I", *(s & 0xFFFFFFFF for s in sqns))


def read_sqns(view: memoryview, offset: int, count: int, protocol: str, what: str) -> tuple[int, ...]:
    if len(view) < offset + 4 * count:
        raise WireError(f"{protocol} {what}: {count} sequence numbers at offset {offset} need {4 * count} bytes, "
                        f"{len(view) - offset} remain")
    return struct.unpack_from(f">{count}I", view, offset)
