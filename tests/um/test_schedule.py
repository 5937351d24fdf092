"""The topic resolution phases: doubling initial intervals, sustain, quiescent."""
from router.um.schedule import Phases, ResolutionSchedule


def sends(phases: Phases, until: float) -> list[float]:
    schedule = ResolutionSchedule(phases, 0.0)
    times = []
    while schedule.next_due is not None and schedule.next_due <= until:
        now = schedule.next_due
        times.append(round(now, 3))
        schedule.sent(now)
    return times


def test_initial_intervals_double_up_to_the_maximum_then_sustain_then_stop():
    phases = Phases(0.010, 0.500, 5.0, 1.0, 60.0)
    times = sends(phases, 100.0)
    assert times[:6] == [0.0, 0.01, 0.03, 0.07, 0.15, 0.31]
    intervals = [round(b - a, 3) for a, b in zip(times, times[1:])]
    assert max(intervals[:10]) == 0.5
    initial = [t for t in times if t < 5.0]
    sustain = [t for t in times if t >= 5.0]
    assert all(round(b - a, 3) == 1.0 for a, b in zip(sustain[1:], sustain[2:]))
    assert sustain[-1] <= 66.0
    assert len(initial) < 20


def test_wildcard_queries_have_no_sustain_phase():
    phases = Phases(0.05, 1.0, 60.0, 0.0, 0.0)
    schedule = ResolutionSchedule(phases, 0.0)
    while schedule.next_due is not None:
        schedule.sent(schedule.next_due)
    assert schedule.quiescent


def test_restart_goes_back_to_the_initial_phase():
    schedule = ResolutionSchedule(Phases(0.01, 0.5, 5.0, 1.0, 60.0), 0.0)
    while schedule.next_due is not None:
        schedule.sent(schedule.next_due)
    schedule.restart(500.0)
    assert schedule.due(500.0)


def bounded_sends(phases: Phases, until: float, most: int = 10_000) -> list[float]:
    """sends(), stopping at `most` (a schedule that never moves on would loop forever)."""
    schedule = ResolutionSchedule(phases, 0.0)
    times = []
    while schedule.next_due is not None and schedule.next_due <= until and len(times) < most:
        now = schedule.next_due
        times.append(round(now, 3))
        schedule.sent(now)
    return times


def test_an_initial_interval_of_zero_disables_the_initial_phase():
    """UM: resolver_*_minimum_initial_interval 0 (or maximum 0) disables initial-phase sends;
    the sustaining phase goes on at its interval (not a send at every loop turn)."""
    for phases in (Phases(0.0, 0.5, 5.0, 1.0, 60.0), Phases(0.01, 0.0, 5.0, 1.0, 60.0)):
        times = bounded_sends(phases, 100.0)
        assert times[0] == 0.0 and len(times) <= 62, len(times)
        assert all(round(b - a, 3) == 1.0 for a, b in zip(times, times[1:]))


def test_zero_intervals_everywhere_send_nothing():
    """Sources that only answer queries (UM's minimalist topic resolution): no advertisements;
    a wildcard receiver with a zero query interval does not query."""
    assert bounded_sends(Phases(0.0, 0.5, 5.0, 0.0, 60.0), 100.0) == []
    assert bounded_sends(Phases(0.0, 1.0, 60.0, 0.0, 0.0), 100.0) == []
    assert bounded_sends(Phases(0.05, 0.0, 60.0, 0.0, 0.0), 100.0) == []


def test_intervals_below_the_resolver_tick_are_the_tick():
    """UM's resolver timers tick every 10 ms (initial advertisements), 20 ms (initial queries),
    30 ms (wildcard queries) and 100 ms (sustaining phase): shorter intervals are those."""
    times = bounded_sends(Phases(0.001, 0.001, 1.0, 0.001, 10.0, initial_tick=0.02), 20.0)
    initial = [t for t in times if t < 1.0]
    assert all(round(b - a, 3) == 0.02 for a, b in zip(initial, initial[1:]))
    sustain = [t for t in times if t >= 1.0]
    assert all(round(b - a, 3) == 0.1 for a, b in zip(sustain, sustain[1:]))
    assert len(times) <= 160


def test_sustain_goes_back_to_the_sustaining_phase_from_quiescence_only():
    phases = Phases(0.01, 0.5, 5.0, 1.0, 60.0)
    schedule = ResolutionSchedule(phases, 0.0)
    schedule.sent(0.0)
    schedule.sustain(0.5)                      # still initial: left as it is
    assert schedule.next_due == 0.01
    while schedule.next_due is not None:
        schedule.sent(schedule.next_due)
    schedule.sustain(500.0)
    assert schedule.due(500.0)
    times = []
    while schedule.next_due is not None:
        times.append(schedule.next_due)
        schedule.sent(schedule.next_due)
    assert times[0] == 500.0 and all(round(b - a, 3) == 1.0 for a, b in zip(times, times[1:]))
    assert 60 <= len(times) <= 61
    off = ResolutionSchedule(Phases(0.01, 0.5, 5.0, 0.0, 60.0), 0.0)
    while off.next_due is not None:
        off.sent(off.next_due)
    off.sustain(500.0)
    assert off.quiescent, "no sustaining phase configured: nothing to go back to"


def test_sustain_within_the_sustaining_phase_keeps_the_interval():
    """A source that fails at every join (EOS after EOS) must not make its receiver query at
    every one of them: within the sustaining phase the next query stays due when it was."""
    schedule = ResolutionSchedule(Phases(0.01, 0.5, 5.0, 1.0, 60.0), 0.0)
    while schedule.next_due is not None and schedule.next_due < 10.0:
        schedule.sent(schedule.next_due)
    due = schedule.next_due
    for n in range(50):
        schedule.sustain(10.0 + n / 100)
    assert schedule.next_due == due
    last = due
    while schedule.next_due is not None:
        last = schedule.next_due
        schedule.sent(last)
    assert 10.49 + 59.0 <= last <= 10.49 + 61.0, "the phase lasts its minimum duration from the last call"
