"""32-bit sequence number arithmetic: numbers wrap, so order is a distance on the circle.

A source at a million messages a second wraps its topic's sequence numbers every 71 minutes; every
comparison of two of them is made as how far one is past the other (RFC 1982's serial numbers).
"""
from __future__ import annotations

MASK = 0xFFFFFFFF
HALF = 0x80000000


def distance(start: int, sqn: int) -> int:
    """How far `sqn` is past `start` on the 32-bit circle (negative when behind)."""
    ahead = (sqn - start) & MASK
    return ahead - (1 << 32) if ahead >= HALF else ahead
