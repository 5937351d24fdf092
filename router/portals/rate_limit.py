"""`<rate-limit bps objects-per-second>`: how fast a portal may send one kind of topic
resolution message into its domain (spec/dro.md §1.5: use queries 500000 bps / 500 objects a
second by default; 0 = unlimited).

Two token buckets, one in bits and one in objects, each holding at most one second's worth, so a
burst of due queries (every topic learned at start-up comes due together five minutes later) is
spread out instead of flooding the domain. Pure logic: the caller passes the clock.
"""
from __future__ import annotations


class RateLimiter:
    def __init__(self, bps: int, objects_per_second: int, now: float):
        self.bps, self.objects_per_second = bps, objects_per_second
        self.bits, self.objects = float(bps), float(objects_per_second)
        self.updated = now

    @property
    def unlimited(self) -> bool:
        return not self.bps and not self.objects_per_second

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self.updated)
        self.updated = now
        if self.bps:
            self.bits = min(float(self.bps), self.bits + elapsed * self.bps)
        if self.objects_per_second:
            self.objects = min(float(self.objects_per_second), self.objects + elapsed * self.objects_per_second)

    def take(self, size: int, now: float) -> bool:
        """Spend one object of `size` bytes if the limits allow it now."""
        self._refill(now)
        bits = size * 8
        # An object bigger than a second's worth still goes out, once the bucket is full.
        if self.bps and self.bits < min(bits, self.bps):
            return False
        if self.objects_per_second and self.objects < 1:
            return False
        if self.bps:
            self.bits -= bits
        if self.objects_per_second:
            self.objects -= 1
        return True

    def wait(self, size: int, now: float) -> float:
        """Seconds until an object of `size` bytes could be taken."""
        self._refill(now)
        waits = [0.0]
        if self.bps:
            waits.append((min(size * 8, self.bps) - self.bits) / self.bps)
        if self.objects_per_second:
            waits.append((1 - self.objects) / self.objects_per_second)
        return max(waits)
