"""What a late-join source keeps of what it sent, for receivers that join later (UM's retention).

Each LBMC frame the source sent (a message, or one fragment of a larger one) is kept by its
sequence number, oldest first, as it went out; a late joiner asks for them by number and gets
them back as RETRANS messages (router.um.late_join). The buffer holds at most
`retransmit_retention_size_limit` bytes; with `retransmit_retention_age_threshold` (seconds) set,
frames older than that go too. The oldest go first, a whole message at a time is not guaranteed:
a receiver asking for a fragment that went gets none, and gives that message up. The sending
thread adds while the context's loop reads (advertisements, retransmissions): a lock of its own.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict


class Retention:
    def __init__(self, size_limit: int, age_threshold: float = 0.0):
        self.size_limit = size_limit
        self.age_threshold = age_threshold
        self.frames: OrderedDict[int, tuple[float, bytes]] = OrderedDict()    # sqn -> (when, frame)
        self.bytes = 0
        self.counters = {"retained_frames": 0, "retention_dropped_frames": 0}
        self.lock = threading.Lock()

    def add(self, sqn: int, frame: bytes, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self.lock:
            old = self.frames.pop(sqn, None)
            if old is not None:
                self.bytes -= len(old[1])
            self.frames[sqn] = (now, frame)
            self.bytes += len(frame)
            self.counters["retained_frames"] += 1
            self._trim(now)

    def _trim(self, now: float) -> None:
        """Lock held."""
        frames = self.frames
        while frames and (self.bytes > self.size_limit
                          or (self.age_threshold and now - next(iter(frames.values()))[0] > self.age_threshold)):
            _, (_, frame) = frames.popitem(last=False)
            self.bytes -= len(frame)
            self.counters["retention_dropped_frames"] += 1

    def get(self, sqn: int) -> bytes | None:
        with self.lock:
            if self.age_threshold:
                self._trim(time.monotonic())
            entry = self.frames.get(sqn)
        return None if entry is None else entry[1]

    def bounds(self) -> tuple[int, int] | None:
        """(lowest, highest) sequence number retained, or None when nothing is."""
        with self.lock:
            if self.age_threshold:
                self._trim(time.monotonic())
            if not self.frames:
                return None
            return next(iter(self.frames)), next(reversed(self.frames))
