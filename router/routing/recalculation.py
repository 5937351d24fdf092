"""When to recalculate routes: after the topology has been quiet for ``backoff-interval``.

A failing link flaps, a restarting router announces itself several times: recalculating on every
change would move receivers back and forth. So each change is noted with the trigger the DRO
logs (LINK CAME UP, LINK WENT DOWN, NEW DRO DISCOVERED, NODE UPDATED, DRO TIMED OUT, FORCED
RECALC, and cost changes), and the recalculation runs once nothing changed for
``backoff-interval`` ms (spec/dro.md §1.3, §2.5). A topology that keeps changing holds the
recalculation up; past ``warning-interval`` that is logged as a warning (and again every
``warning-interval``), as is a recalculation that itself took longer than the route-info
propagation interval. What is held is each distinct change once (a link that flaps for hours is
two changes, not one per flap), at most MAX_PENDING_CHANGES of them, the first and the latest
always kept: it is listed by ``routerctl topology`` and must not grow with the churn.
FORCED RECALC (the DRO's web monitor; here `routerctl recalculate`, and start-up) does not wait.

The owner calls :meth:`RecalculationScheduler.poll` from its route-info check timer (every
``check-interval``) or at :meth:`next_deadline_ms`; times are monotonic milliseconds.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from enum import Enum
from typing import Callable

from router.eventlog import event

log = logging.getLogger(__name__)

MAX_PENDING_CHANGES = 64

def log_routing_event(name: str, text: str) -> None:
    """Default ``log_event``: the DRO-style line with its id from router.eventlog."""
    event(name, text)


class RecalcTrigger(Enum):
    LINK_CAME_UP = "LINK CAME UP"
    LINK_WENT_DOWN = "LINK WENT DOWN"
    NEW_DRO_DISCOVERED = "NEW DRO DISCOVERED"
    NODE_UPDATED = "NODE UPDATED"
    DRO_TIMED_OUT = "DRO TIMED OUT"
    FORCED_RECALC = "FORCED RECALC"
    COST_CHANGED = "COST CHANGED"


@dataclass(frozen=True)
class TopologyChange:
    trigger: RecalcTrigger
    detail: str                     # e.g. "portal PEER1" or "router B (node 0x1f)"
    at_ms: float

    def describe(self) -> str:
        return f"{self.trigger.value} ({self.detail})" if self.detail else self.trigger.value


class RecalculationScheduler:
    """Collects topology changes and runs ``recalculate(changes)`` once they settle."""

    def __init__(self, recalculate: Callable[[list[TopologyChange]], None], backoff_interval_ms: int = 5000,
                 warning_interval_ms: int = 10000, slow_threshold_ms: int | None = 1000,
                 log_event: Callable[[str, str], None] = log_routing_event,
                 clock: Callable[[], float] = time.monotonic):
        if backoff_interval_ms > warning_interval_ms:
            raise ValueError(f"route-recalculation backoff-interval {backoff_interval_ms} ms exceeds "
                             f"warning-interval {warning_interval_ms} ms")
        self._recalculate = recalculate
        self.backoff_interval_ms = backoff_interval_ms
        self.warning_interval_ms = warning_interval_ms
        self.slow_threshold_ms = slow_threshold_ms
        self._log_event = log_event
        self._clock = clock                 # only to time recalculate() itself
        self._pending: list[TopologyChange] = []     # distinct changes, by their latest occurrence
        self._pending_count = 0                     # every change noted since the last recalculation
        self._first_pending_ms: float | None = None
        self._forced = False
        self._last_warning_ms: float | None = None
        self.recalculations = 0
        self.held_up_warnings = 0
        self.last_recalculation_ms: float | None = None
        self.last_duration_ms = 0.0
        self.last_changes: list[TopologyChange] = []

    @property
    def pending(self) -> list[TopologyChange]:
        return list(self._pending)

    @property
    def has_calculated(self) -> bool:
        """False until the first recalculation (UIMs before it are dropped, spec/dro.md §2.5)."""
        return self.recalculations > 0

    def note(self, trigger: RecalcTrigger, detail: str, now_ms: float) -> None:
        """Record a change; the recalculation waits ``backoff-interval`` from the latest one."""
        change = TopologyChange(trigger, detail, now_ms)
        if not self._pending:
            self._first_pending_ms = now_ms
        self._pending_count += 1
        # The same change again (a link flapping): held once, at its latest place.
        self._pending = [p for p in self._pending if (p.trigger, p.detail) != (trigger, detail)]
        self._pending.append(change)
        if len(self._pending) > MAX_PENDING_CHANGES:
            del self._pending[1]        # the first says when the hold began; the latest when it ends
        if trigger is RecalcTrigger.FORCED_RECALC:
            self._forced = True
        self._log_event("route-change-noted", f"route recalculation triggered: {change.describe()}")

    def force(self, now_ms: float, detail: str = "") -> None:
        self.note(RecalcTrigger.FORCED_RECALC, detail, now_ms)

    def next_deadline_ms(self) -> float | None:
        """When poll() next has something to do (recalculate or warn), None if nothing pending."""
        if not self._pending:
            return None
        if self._forced:
            return self._pending[-1].at_ms
        due = self._pending[-1].at_ms + self.backoff_interval_ms
        warn_from = self._last_warning_ms if self._last_warning_ms is not None else self._first_pending_ms
        return min(due, warn_from + self.warning_interval_ms)

    def poll(self, now_ms: float) -> bool:
        """Recalculate if the changes have settled (or one was forced); True if it ran."""
        if not self._pending:
            return False
        if self._forced or now_ms - self._pending[-1].at_ms >= self.backoff_interval_ms:
            self._run(now_ms)
            return True
        self._maybe_warn(now_ms)
        return False

    def _maybe_warn(self, now_ms: float) -> None:
        since = self._last_warning_ms if self._last_warning_ms is not None else self._first_pending_ms
        if now_ms - since < self.warning_interval_ms:
            return
        self._last_warning_ms = now_ms
        self.held_up_warnings += 1
        held = now_ms - self._first_pending_ms
        self._log_event("route-recalculation-held-up",
                        f"route recalculation held up for {held:.0f} ms by a topology that keeps changing "
                        f"({self._pending_count} changes, latest {self._pending[-1].describe()})")

    def _run(self, now_ms: float) -> None:
        changes, self._pending = self._pending, []
        self._pending_count, self._first_pending_ms = 0, None
        self._forced = False
        self._last_warning_ms = None
        started = self._clock()
        self._recalculate(changes)
        self.last_duration_ms = (self._clock() - started) * 1000
        self.recalculations += 1
        self.last_recalculation_ms = now_ms
        self.last_changes = changes
        triggers = ", ".join(_summarise(changes))
        self._log_event("route-recalculated", f"routes recalculated after {triggers}")
        if self.slow_threshold_ms is not None and self.last_duration_ms > self.slow_threshold_ms:
            self._log_event("route-recalculation-slow",
                            f"route recalculation took {self.last_duration_ms:.0f} ms, longer than the "
                            f"route-info propagation interval ({self.slow_threshold_ms} ms)")


def _summarise(changes: list[TopologyChange]) -> list[str]:
    """Distinct change descriptions in order, at most 5 then a count (keeps one log line short)."""
    seen: list[str] = []
    for change in changes:
        text = change.describe()
        if text not in seen:
            seen.append(text)
    return seen[:5] + ([f"and {len(seen) - 5} more"] if len(seen) > 5 else [])
