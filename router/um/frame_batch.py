"""Whole-frame pieces gathered to be parsed at once: the datagrams of one read of an LBT-RM or
LBT-RU socket, the records of one read of an LBT-IPC ring.

Parsed one by one, each piece went through a stream's whole Python path on its own, and a router
made a ring record of each (a message of 2 KB or more is a piece of its own). Gathered, one read
is one parse and one ring record, as a read of a TCP stream is. A piece is taken only if it is
whole frames (its transport frames each on its own: a broken one must not mis-frame the next);
one that is not is for the caller to parse alone, after what was gathered before it.
"""
from __future__ import annotations

from router.um.frame_runs import is_whole_frames

BATCH_BYTES = 256 * 1024      # parsed at once, at most (as a TCP read); a piece is at most 64 KB


class FrameBatch:
    def __init__(self, stream, capacity: int = BATCH_BYTES):
        self.stream = stream                    # a router.um.frame_stream.FrameStream
        self.buffer = bytearray(capacity)
        self.view = memoryview(self.buffer)
        self.size = 0

    def add(self, piece) -> bool:
        """Take a copy of `piece` (parsing what is gathered first if it does not fit); False if
        it is not whole frames or larger than the batch: the caller parses it alone, after
        calling parse()."""
        size = len(piece)
        if size > len(self.buffer) - self.size:
            self.parse()
        if size > len(self.buffer) or not is_whole_frames(piece):
            return False
        self.view[self.size:self.size + size] = piece
        self.size += size
        return True

    def parse(self) -> None:
        """Parse what is gathered, in order (nothing once the stream is closed)."""
        size, self.size = self.size, 0
        if size and not self.stream.closed:
            self.stream.counters["bytes"] += size
            self.stream.parse_reused(self.buffer, size, self.view)
