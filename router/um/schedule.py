"""Topic resolution phases: initial (doubling intervals), sustaining (fixed interval), quiescent.

UM advertises sources and queries for receivers on these schedules (spec/dro.md §6); the same
object drives TIRs, TQRs and wildcard TQRs, with each one's own interval options.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Phases:
    """Intervals and durations in seconds."""

    minimum_initial_interval: float
    maximum_initial_interval: float
    minimum_initial_duration: float
    sustain_interval: float
    minimum_sustain_duration: float


class ResolutionSchedule:
    """When the next TIR (or TQR) for one topic is due; `None` once quiescent."""

    __slots__ = ("phases", "started", "next_due", "_interval")

    def __init__(self, phases: Phases, now: float):
        self.phases = phases
        self.restart(now)

    def restart(self, now: float) -> None:
        """Back to the initial phase: the first send is due at once."""
        self.started = now
        self.next_due: float | None = now
        self._interval = self.phases.minimum_initial_interval

    def sent(self, now: float) -> None:
        """Record a send at `now` and work out when the next one is due."""
        elapsed = now - self.started
        phases = self.phases
        if elapsed < phases.minimum_initial_duration:
            self.next_due = now + self._interval
            self._interval = min(self._interval * 2, phases.maximum_initial_interval)
        elif elapsed < phases.minimum_initial_duration + phases.minimum_sustain_duration \
                and phases.sustain_interval > 0:
            self.next_due = now + phases.sustain_interval
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
                  float(get("resolver_advertisement_minimum_sustain_duration")))


def query_phases(get) -> Phases:
    """Phases for a receiver's TQRs."""
    return Phases(get("resolver_query_minimum_initial_interval") / 1000,
                  get("resolver_query_maximum_initial_interval") / 1000,
                  get("resolver_query_minimum_initial_duration") / 1000,
                  get("resolver_query_sustain_interval") / 1000,
                  float(get("resolver_query_minimum_sustain_duration")))


def wildcard_query_phases(get) -> Phases:
    """Wildcard receivers query with doubling intervals for a duration, with no sustaining phase."""
    return Phases(get("resolver_query_minimum_interval") / 1000,
                  get("resolver_query_maximum_interval") / 1000,
                  float(get("resolver_query_minimum_duration")),
                  0.0, 0.0)
