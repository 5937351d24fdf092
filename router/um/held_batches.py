"""Batches a router's proxy source keeps for the receiver it was made for.

A proxy source exists because a receiver in its domain showed interest, but that receiver joins
only once it has heard the proxy's advertisement; what the proxy is sent in between would reach
nobody. Its session (LBT-TCP or LBT-IPC) keeps those batches here, bounded by `<max-queue>` bytes
(the oldest go first) and by the advertisement's initial phase, and hands them, in order, to the
first receiver. What goes unclaimed is counted as expired.
"""
from __future__ import annotations

import time
from collections import deque


class HeldBatches:
    def __init__(self, max_bytes: int, seconds: float, counters: dict):
        self.max_bytes = max_bytes
        self.seconds = seconds
        self.counters = counters
        self.batches: deque[tuple[float, bytes]] = deque()     # (when held, batch), oldest first
        self.bytes = 0
        counters["held_batches_delivered"] = 0
        counters["held_batches_expired"] = 0

    def __bool__(self) -> bool:
        return bool(self.batches)

    def __len__(self) -> int:
        return len(self.batches)

    def hold(self, data) -> None:
        """Keep a copy of `data`; beyond max_bytes the oldest go (the newest is always kept)."""
        now = time.monotonic()
        self.expire(now)
        self.batches.append((now, bytes(data)))
        self.bytes += len(data)
        while self.bytes > self.max_bytes and len(self.batches) > 1:
            self._forget_oldest()

    def expire(self, now: float | None = None) -> None:
        """Forget what has been held longer than the hold lasts."""
        now = time.monotonic() if now is None else now
        while self.batches and now - self.batches[0][0] > self.seconds:
            self._forget_oldest()

    def take(self) -> list[bytes]:
        """Everything still held, oldest first, for the receiver that has come."""
        self.expire()
        taken = [batch for _, batch in self.batches]
        self.counters["held_batches_delivered"] += len(taken)
        self.batches.clear()
        self.bytes = 0
        return taken

    def discard(self) -> None:
        """The session closes with nobody come: everything held is counted as expired."""
        self.counters["held_batches_expired"] += len(self.batches)
        self.batches.clear()
        self.bytes = 0

    def _forget_oldest(self) -> None:
        _, batch = self.batches.popleft()
        self.bytes -= len(batch)
        self.counters["held_batches_expired"] += 1
