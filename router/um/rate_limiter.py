"""A token bucket for UM's transport rate limits (`transport_lbtrm_data_rate_limit` and
`transport_lbtrm_retransmit_rate_limit`, bits per second).

UM grants a transport its rate in slices of `transport_lbtrm_rate_interval` milliseconds: what a
slice allows may go out at once, more waits for the next slice. The bucket here holds at most one
slice's worth (never less than one datagram, or a datagram larger than a slice could never go),
refills continuously, and says how long a sender must wait for the bytes it wants to send. A cost
larger than the bucket goes from a full bucket and is paid back (the tokens go below zero).
Not thread-safe: each bucket has one user (the sending thread, or the loop for retransmissions).
"""
from __future__ import annotations

import time


class RateLimiter:
    __slots__ = ("rate", "capacity", "tokens", "stamp")

    def __init__(self, bits_per_second: int, interval: float, largest: int, now: float | None = None):
        self.rate = bits_per_second / 8.0                 # bytes per second; 0: unlimited
        self.capacity = max(self.rate * interval, float(largest))
        self.tokens = self.capacity
        self.stamp = time.monotonic() if now is None else now

    @property
    def unlimited(self) -> bool:
        return self.rate <= 0

    def _refill(self, now: float) -> None:
        if now > self.stamp:
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now

    def take(self, size: int, now: float | None = None) -> bool:
        """Spend `size` bytes if the bucket holds them; False (nothing spent) if not. More than
        the bucket can ever hold (an LBT-RU datagram charged once per receiver) goes when it is
        full, and leaves it owing the rest: the sends after wait until that is earned back."""
        if self.rate <= 0:
            return True
        self._refill(time.monotonic() if now is None else now)
        if self.tokens >= min(size, self.capacity):
            self.tokens -= size
            return True
        return False

    def wait(self, size: int, now: float | None = None) -> float:
        """Seconds until `size` bytes may go (0.0: now)."""
        if self.rate <= 0:
            return 0.0
        self._refill(time.monotonic() if now is None else now)
        missing = min(size, self.capacity) - self.tokens
        return 0.0 if missing <= 0 else missing / self.rate
