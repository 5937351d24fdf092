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
    assert "(6 changes, latest NODE UPDATED (router B))" in warnings[0]
    assert s.poll(24000 + 5000)
    assert recorder.runs[0] == [RecalcTrigger.NODE_UPDATED], "13 times the same change, held once"


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


def test_a_link_that_flaps_for_hours_keeps_the_pending_changes_bounded():
    """A flapping link (or a router that keeps changing) holds the recalculation up, as the DRO
    does; what is held must not grow with every flap (memory, and every `routerctl topology`
    reply lists the pending changes)."""
    recorder = Recorder()
    s = scheduler(recorder, backoff_interval_ms=5000, warning_interval_ms=10000)
    s.note(RecalcTrigger.DRO_TIMED_OUT, "router C (node 0x3)", 0)
    flaps = 50_000                                  # one a second: about fourteen hours
    for t in range(1000, 1000 * flaps, 1000):
        s.note(RecalcTrigger.LINK_WENT_DOWN if t % 2000 else RecalcTrigger.LINK_CAME_UP, "portal P1", t)
        s.poll(t)
    assert recorder.runs == []
    # The last flap took the link down: it is the latest change.
    assert [c.describe() for c in s.pending] == ["DRO TIMED OUT (router C (node 0x3))",
                                                 "LINK CAME UP (portal P1)", "LINK WENT DOWN (portal P1)"]
    warning = [text for name, text in recorder.events if name == "route-recalculation-held-up"][-1]
    assert "held up for 49990000 ms" in warning and "(49991 changes, latest LINK" in warning, warning
    latest = 1000 * (flaps - 1)
    assert not s.poll(latest + 4999) and s.poll(latest + 5000), "the backoff still runs from the latest change"
    assert len(recorder.runs[0]) == 3 and s.pending == []
    held_up = [text for name, text in recorder.events if name == "route-recalculated"][-1]
    assert "DRO TIMED OUT (router C (node 0x3))" in held_up


def test_distinct_pending_changes_are_bounded_too():
    """Routers that come and go under new node ids are distinct changes: still a bounded list."""
    recorder = Recorder()
    s = scheduler(recorder, backoff_interval_ms=5000, warning_interval_ms=10000)
    for n in range(10_000):
        s.note(RecalcTrigger.NEW_DRO_DISCOVERED, f"router R{n} (node {n + 1:#x})", n * 100)
    assert len(s.pending) <= 100
    assert s.pending[0].describe() == "NEW DRO DISCOVERED (router R0 (node 0x1))", "the first change is kept"
    assert s.pending[-1].describe() == "NEW DRO DISCOVERED (router R9999 (node 0x2710))", "and the latest"
    assert s.poll(999_900 + 5000)
