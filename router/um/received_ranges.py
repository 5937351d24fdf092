"""Which bytes of a message in pieces have arrived: a message is whole when every byte has, not when
the pieces' lengths add up to its length.

A piece that arrives twice (a copy brought by a second path, a sender that numbered again from the
start) or overlaps another adds only the bytes not had before; counting it whole would call a
message complete while part of it never came, and deliver zeros in its place.

Ranges are kept merged and sorted: pieces that come in order extend the last one, so adding one
costs a bisection, whatever the number of pieces.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right


class ReceivedRanges:
    __slots__ = ("starts", "ends", "covered")

    def __init__(self):
        self.starts: list[int] = []       # disjoint, not touching, ascending
        self.ends: list[int] = []
        self.covered = 0                  # bytes had

    def add(self, start: int, end: int) -> int:
        """Note bytes start..end-1 as had; how many of them were not had before."""
        if start >= end:
            return 0
        first = bisect_left(self.ends, start)         # the first range ending at or after start
        past = bisect_right(self.starts, end)         # the ranges starting at or before end
        had = 0
        if first < past:                              # those between touch or overlap: merged
            had = sum(self.ends[i] - self.starts[i] for i in range(first, past))
            start, end = min(start, self.starts[first]), max(end, self.ends[past - 1])
        self.starts[first:past] = [start]
        self.ends[first:past] = [end]
        added = end - start - had
        self.covered += added
        return added
