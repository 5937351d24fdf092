"""Topic resolution phases: initial (doubling intervals), sustaining (fixed interval), quiescent.

UM advertises sources and queries for receivers on these schedules (spec/dro.md §6); the same
object drives TIRs, TQRs and wildcard TQRs, with each one's own interval options. As in UM, an
initial interval of 0 (minimum or maximum) disables the initial phase and a sustain interval of
0 the sustaining phase; shorter intervals than the resolver's timer ticks are the ticks.
"""
from __future__ import annotations

from dataclasses import dataclass

# UM's resolver timers tick every 10 ms for initial advertisements, 20 ms for initial queries,
# 30 ms for wildcard queries and 100 ms for the sustaining phase: nothing is sent more often.
ADVERTISEMENT_TICK = 0.010
QUERY_TICK = 0.020
WILDCARD_QUERY_TICK = 0.030
SUSTAIN_TICK = 0.100


@dataclass(frozen=True, slots=True)
class Phases:
    """Intervals and durations in seconds."""

    minimum_initial_interval: float
    maximum_initial_interval: float
    minimum_initial_duration: float
    sustain_interval: float
    minimum_sustain_duration: float
    initial_tick: float = 0.0

    @property
    def initial(self) -> bool:
        return self.minimum_initial_interval > 0 and self.maximum_initial_interval > 0 \
            and self.minimum_initial_duration > 0

    @property
    def sustaining(self) -> bool:
        return self.sustain_interval > 0 and self.minimum_sustain_duration > 0


class ResolutionSchedule:
    """When the next TIR (or TQR) for one topic is due; `None` once quiescent."""

    __slots__ = ("phases", "started", "next_due", "_interval", "_initial_end")

    def __init__(self, phases: Phases, now: float):
        self.phases = phases
        self.restart(now)

    def restart(self, now: float) -> None:
        """Back to the initial phase: the first send is due at once (none if both phases are off)."""
        phases = self.phases
        self.started = now
        self._initial_end = phases.minimum_initial_duration if phases.initial else 0.0
        self._interval = max(phases.minimum_initial_interval, phases.initial_tick)
        self.next_due: float | None = now if phases.initial or phases.sustaining else None

    def sustain(self, now: float) -> None:
        """Back to the sustaining phase (not cutting an initial phase short), for its minimum
        duration from now. From quiescence the next send is due at once; within the sustaining
        phase it stays due when it was (what calls this often still sends once an interval)."""
        if not self.phases.sustaining or now - self.started < self._initial_end:
            return
        self.started = now - self._initial_end
        if self.next_due is None:
            self.next_due = now

    def sent(self, now: float) -> None:
        """Record a send at `now` and work out when the next one is due."""
        elapsed = now - self.started
        phases = self.phases
        if elapsed < self._initial_end:
            self.next_due = now + self._interval
            self._interval = max(min(self._interval * 2, phases.maximum_initial_interval), phases.initial_tick)
        elif phases.sustaining and elapsed < self._initial_end + phases.minimum_sustain_duration:
            self.next_due = now + max(phases.sustain_interval, SUSTAIN_TICK)
        else:
            self.next_due = None

    def due(self, now: float) -> bool:
        return self.next_due is not None and self.next_due <= now

    @property
    def quiescent(self) -> bool:
        return self.next_due is None


def advertisement_phases(get) -> Phases:
    """Phases for a source's TIRs; `get(option)` reads a source-scope option."""
    return Phases(get("resolver_advertisement_minimum_initial_interval") / 1000,
                  get("resolver_advertisement_maximum_initial_interval") / 1000,
                  get("resolver_advertisement_minimum_initial_duration") / 1000,
                  get("resolver_advertisement_sustain_interval") / 1000,
                  float(get("resolver_advertisement_minimum_sustain_duration")),
                  ADVERTISEMENT_TICK)


def query_phases(get) -> Phases:
    """Phases for a receiver's TQRs."""
    return Phases(get("resolver_query_minimum_initial_interval") / 1000,
                  get("resolver_query_maximum_initial_interval") / 1000,
                  get("resolver_query_minimum_initial_duration") / 1000,
                  get("resolver_query_sustain_interval") / 1000,
                  float(get("resolver_query_minimum_sustain_duration")),
                  QUERY_TICK)


def wildcard_query_phases(get) -> Phases:
    """Wildcard receivers query with doubling intervals for a duration, with no sustaining phase."""
    return Phases(get("resolver_query_minimum_interval") / 1000,
                  get("resolver_query_maximum_interval") / 1000,
                  float(get("resolver_query_minimum_duration")),
                  0.0, 0.0, WILDCARD_QUERY_TICK)
