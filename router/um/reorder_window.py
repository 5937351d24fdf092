"""Waiting out a gap on a TCP or LBT-IPC stream: `transport_*_dro_loss_recovery_timeout`.

TCP and LBT-IPC deliver in order, so a jump in a topic's sequence numbers on them means messages
were lost upstream; without the option (UM's default 0) they are declared lost at once. Behind a
router they may only be late: a route changed and the messages still on the old path arrive
after ones from the new (spec/dro.md §2.6). With the option set the stream waits that long for
them: messages after the gap are held, late ones fill it, and everything is delivered in
sequence order; what has not come when the time is up is declared lost (off-transport recovery
or an unrecoverable-loss event), in its place between the held messages.

One window per topic index with a gap open. Sequence numbers are 32-bit and wrap, so every
order is a signed distance from the window's base (router.um.sequence_numbers): a fragmented
message completed by a late fragment is an entry numbered by its first fragment, which may lie
before the base, and then comes first. The held entries and the missing numbers are heaps, so
each read costs what it brings, not what is held.
"""
from __future__ import annotations

import heapq
import itertools

from router.um.sequence_numbers import MASK, distance

MAX_WAITED = 1 << 16          # a jump of more messages than this is declared lost at once, not waited for


class ReorderWindow:
    """One topic's open gap: what is missing, what came after it, and its timer."""

    def __init__(self, first_missing: int, count: int):
        self.base = first_missing                 # orders are distances from here
        self.next = (first_missing + count) & MASK  # the first sequence number past all seen
        self.missing: set[int] = {(first_missing + n) & MASK for n in range(count)}
        self._missing_order = list(range(count))  # heap of distances; stale ones skipped
        self.wide: list[tuple[int, int]] = []     # (first, count) of jumps too long to wait for
        self._held: list[tuple] = []              # heap of (distance, arrival, entry)
        self._arrivals = itertools.count()
        self.timer = None
        self.filled = 0                           # late messages that came within the wait

    def admit(self, sqn: int) -> bool:
        """A frame with this sequence number came: True to take it (it fills the gap or is new),
        False to drop it (delivered already, or too far behind to be one waited for)."""
        if sqn in self.missing:
            self.missing.discard(sqn)
            self.filled += 1
            return True
        if distance(self.next, sqn) < 0:
            return False
        self.missing_before(sqn)
        self.next = (sqn + 1) & MASK
        return True

    def missing_before(self, end: int) -> None:
        """Messages up to `end` (exclusive) exist (a frame or a TSNI says so): the ones past the
        last seen are missing until they come."""
        ahead = distance(self.next, end)
        if ahead <= 0:
            return
        if ahead > MAX_WAITED:
            self.wide.append((self.next, ahead))
        else:
            start = distance(self.base, self.next)
            for n in range(ahead):
                self.missing.add((self.next + n) & MASK)
                heapq.heappush(self._missing_order, start + n)
        self.next = end

    def too_wide(self) -> bool:
        """Too much to wait for: the window is closed at once (held delivered, the rest lost)."""
        return bool(self.wide) or len(self.missing) > MAX_WAITED

    def _first_missing(self) -> int | None:
        """The distance of the earliest number still missing (None: the gap is filled)."""
        order, base, missing = self._missing_order, self.base, self.missing
        while order and (base + order[0]) & MASK not in missing:
            heapq.heappop(order)
        return order[0] if order else None

    def take(self, entries: list) -> list:
        """Entries parsed from a read; returns the ones now deliverable in order (before the first
        message still missing), holding the rest."""
        base, held, arrivals = self.base, self._held, self._arrivals
        for entry in entries:
            heapq.heappush(held, (distance(base, entry[0]), next(arrivals), entry))
        first = self._first_missing()
        ready = []
        while held and (first is None or held[0][0] < first):
            ready.append(heapq.heappop(held)[2])
        return ready

    @property
    def held(self) -> list:
        return [entry for _, _, entry in sorted(self._held)]

    def closing(self, entries: list) -> list[tuple[str, object]]:
        """The wait is over (`entries`: what this read brought): the held entries and the missing
        runs in sequence order, as ("batch", entries) and ("gap", (first, count)) steps."""
        base = self.base
        runs: list[list[int]] = []
        for offset in sorted(distance(base, sqn) for sqn in self.missing):
            if runs and runs[-1][0] + runs[-1][1] == offset:
                runs[-1][1] += 1
            else:
                runs.append([offset, 1])
        runs = sorted(runs + [[distance(base, first), count] for first, count in self.wide])
        held = sorted(self._held + [(distance(base, e[0]), next(self._arrivals), e) for e in entries])
        steps, position = [], 0
        for offset, count in runs:
            before = []
            while position < len(held) and held[position][0] < offset:
                before.append(held[position][2])
                position += 1
            if before:
                steps.append(("batch", before))
            steps.append(("gap", ((base + offset) & MASK, count)))
        if position < len(held):
            steps.append(("batch", [entry for _, _, entry in held[position:]]))
        self._held, self.missing, self.wide, self._missing_order = [], set(), [], []
        return steps
