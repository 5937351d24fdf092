"""Waiting out a gap on a TCP or LBT-IPC stream: `transport_*_dro_loss_recovery_timeout`.

TCP and LBT-IPC deliver in order, so a jump in a topic's sequence numbers on them means messages
were lost upstream; without the option (UM's default 0) they are declared lost at once. Behind a
router they may only be late: a route changed and the messages still on the old path arrive
after ones from the new (spec/dro.md §2.6). With the option set the stream waits that long for
them: messages after the gap are held, late ones fill it, and everything is delivered in
sequence order; what has not come when the time is up is declared lost (off-transport recovery
or an unrecoverable-loss event), in its place between the held messages.

One window per topic index with a gap open; sequence numbers are 32-bit and may wrap, so every
comparison is made as a distance from the window's base.
"""
from __future__ import annotations

from router.um.sequence_numbers import MASK, distance

MAX_WAITED = 1 << 16          # a jump of more messages than this is declared lost at once, not waited for


class ReorderWindow:
    """One topic's open gap: what is missing, what came after it, and until when to wait."""

    def __init__(self, first_missing: int, count: int):
        self.base = first_missing                 # nothing before this is waited for
        self.next = (first_missing + count) & MASK  # the first sequence number past all seen
        self.missing: set[int] = {(first_missing + n) & MASK for n in range(count)}
        self.wide: list[tuple[int, int]] = []     # (first, count) of jumps too long to wait for
        self.held: list[tuple] = []               # entries (sqn, payload[, origin]) past a gap
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
            self.missing.update((self.next + n) & MASK for n in range(ahead))
        self.next = end

    def too_wide(self) -> bool:
        """Too much to wait for: the window is closed at once (held delivered, the rest lost)."""
        return bool(self.wide) or len(self.missing) > MAX_WAITED

    def take(self, entries: list) -> list:
        """Entries parsed from a read; returns the ones now deliverable in order (before the first
        message still missing), holding the rest."""
        self.held.extend(entries)
        if not self.held:
            return []
        base = self.base
        self.held.sort(key=lambda entry: (entry[0] - base) & MASK)
        if not self.missing:
            ready, self.held = self.held, []
            return ready
        first = min(distance(base, sqn) for sqn in self.missing)
        cut = 0
        while cut < len(self.held) and distance(base, self.held[cut][0]) < first:
            cut += 1
        ready, self.held = self.held[:cut], self.held[cut:]
        return ready

    def closing(self) -> list[tuple[str, object]]:
        """The wait is over: the held entries and the missing runs in sequence order, as
        ("batch", entries) and ("gap", (first, count)) steps."""
        base = self.base
        missing = sorted((distance(base, sqn) for sqn in self.missing))
        runs = []
        for offset in missing:
            if runs and runs[-1][0] + runs[-1][1] == offset:
                runs[-1][1] += 1
            else:
                runs.append([offset, 1])
        runs = sorted(runs + [[distance(base, first), count] for first, count in self.wide])
        held = sorted(self.held, key=lambda entry: (entry[0] - base) & MASK)
        steps, position = [], 0
        for offset, count in runs:
            before = []
            while position < len(held) and distance(base, held[position][0]) < offset:
                before.append(held[position])
                position += 1
            if before:
                steps.append(("batch", before))
            steps.append(("gap", ((base + offset) & MASK, count)))
        if position < len(held):
            steps.append(("batch", held[position:]))
        self.held, self.missing, self.wide = [], set(), []
        return steps
