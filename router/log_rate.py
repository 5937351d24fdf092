"""How often a log line about a flood of events is said.

Malformed packets, evicted connections, drops: a misbehaving peer sends them by the thousand a
second for as long as it runs. Each is counted where it happens; the log gets one line per kind of
event every interval, and that line says how many went unsaid since the one before, so the log
neither floods (filling the disk over months) nor hides that the flood went on.
"""
from __future__ import annotations

import time
from typing import Callable, Hashable


class LogRate:
    """At most one line per key every `interval` (in the clock's unit: seconds by default; a caller
    that keeps its own time passes `now` in that unit)."""

    def __init__(self, interval: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.interval, self.clock = interval, clock
        self._said: dict[Hashable, tuple[float, int]] = {}    # key -> (when last said, events unsaid since)

    def due(self, key: Hashable = None, now: float | None = None) -> int | None:
        """For an event of `key`: None when its line is not to be said now (it is counted as unsaid);
        otherwise how many events of `key` went unsaid since its last line."""
        now = self.clock() if now is None else now
        said = self._said.get(key)
        if said is not None and now - said[0] < self.interval:
            self._said[key] = (said[0], said[1] + 1)
            return None
        self._said[key] = (now, 0)
        return said[1] if said is not None else 0

    def forget(self, key: Hashable) -> None:
        """`key` is gone (a portal removed): its next event is said at once."""
        self._said.pop(key, None)


def unsaid(count: int) -> str:
    """The tail of a line that `LogRate.due` let through, naming what went unsaid before it."""
    return f" ({count} more since the last such line)" if count else ""
