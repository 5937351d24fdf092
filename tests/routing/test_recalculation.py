"""Recalculation waits for the topology to settle, warns when held up, and names its triggers."""
import pytest

from router.routing.recalculation import RecalcTrigger, RecalculationScheduler
from router.routing.topology import UpdateOutcome


class Recorder:
    def __init__(self):
        self.runs, self.events = [], []

    def recalculate(self, changes):
        self.runs.append([c.trigger for c in changes])

    def log_event(self, name, text):
        self.events.append((name, text))


def scheduler(recorder, **kwargs):
    return RecalculationScheduler(recorder.recalculate, log_event=recorder.log_event, **kwargs)


def test_waits_backoff_after_the_last_change():
    recorder = Recorder()
    s = scheduler(recorder, backoff_interval_ms=5000, warning_interval_ms=10000)
    assert not s.has_calculated and s.next_deadline_ms() is None
    s.note(RecalcTrigger.LINK_CAME_UP, "portal P1", 0)
    s.note(RecalcTrigger.NEW_DRO_DISCOVERED, "router B (node 0x2)", 3000)
    assert not s.poll(7999) and recorder.runs == []
    assert s.next_deadline_ms() == 8000
    assert s.poll(8000)
    assert recorder.runs == [[RecalcTrigger.LINK_CAME_UP, RecalcTrigger.NEW_DRO_DISCOVERED]]
    assert s.has_calculated and s.pending == [] and not s.poll(20000)
    names = [name for name, _ in recorder.events]
    assert names == ["route-change-noted", "route-change-noted", "route-recalculated"]
    assert "LINK CAME UP (portal P1), NEW DRO DISCOVERED (router B (node 0x2))" in recorder.events[-1][1]


def test_a_topology_that_keeps_changing_is_warned_about_every_warning_interval():
    recorder = Recorder()
    s = scheduler(recorder, backoff_interval_ms=5000, warning_interval_ms=10000)
    for t in range(0, 25001, 2000):                 # a change every 2 s: never settles
        s.note(RecalcTrigger.NODE_UPDATED, "router B", t)
        s.poll(t + 1)
    warnings = [text for name, text in recorder.events if name == "route-recalculation-held-up"]
    assert recorder.runs == [] and len(warnings) == 2 and s.held_up_warnings == 2
    assert "held up for 10001 ms" in warnings[0] and "NODE UPDATED (router B)" in warnings[0]
    assert s.poll(24000 + 5000)
    assert len(recorder.runs[0]) == 13


def test_forced_recalculation_does_not_wait():
    recorder = Recorder()
    s = scheduler(recorder)
    s.note(RecalcTrigger.LINK_WENT_DOWN, "portal P1", 0)
    s.force(10, "web monitor")
    assert s.next_deadline_ms() == 10 and s.poll(10)
    assert recorder.runs == [[RecalcTrigger.LINK_WENT_DOWN, RecalcTrigger.FORCED_RECALC]]


def test_a_slow_recalculation_is_reported():
    recorder = Recorder()
    ticks = iter([0.0, 2.5])
    s = RecalculationScheduler(recorder.recalculate, log_event=recorder.log_event, slow_threshold_ms=1000,
                               clock=lambda: next(ticks))
    s.note(RecalcTrigger.COST_CHANGED, "portal P1 cost 2 -> 6", 0)
    assert s.poll(5000) and s.last_duration_ms == 2500
    assert recorder.events[-1][0] == "route-recalculation-slow"


def test_trigger_names_match_the_dro_log_and_topology_outcomes():
    assert [t.value for t in RecalcTrigger] == ["LINK CAME UP", "LINK WENT DOWN", "NEW DRO DISCOVERED",
                                                "NODE UPDATED", "DRO TIMED OUT", "FORCED RECALC", "COST CHANGED"]
    assert RecalcTrigger(UpdateOutcome.NEW_ROUTER.value) is RecalcTrigger.NEW_DRO_DISCOVERED
    assert RecalcTrigger(UpdateOutcome.NODE_UPDATED.value) is RecalcTrigger.NODE_UPDATED


def test_backoff_beyond_warning_interval_is_refused():
    with pytest.raises(ValueError, match="exceeds warning-interval"):
        RecalculationScheduler(lambda changes: None, backoff_interval_ms=20000, warning_interval_ms=10000)


def test_default_logging_uses_the_routing_ids(caplog):
    s = RecalculationScheduler(lambda changes: None, backoff_interval_ms=0, warning_interval_ms=0)
    with caplog.at_level("INFO", logger="router"):
        s.note(RecalcTrigger.DRO_TIMED_OUT, "router C", 0)
        s.poll(0)
    assert "UMR-4001-1: route recalculation triggered: DRO TIMED OUT (router C)" in caplog.text
    assert "UMR-4001-2" in caplog.text
