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
