"""ExpiryTimer on a real event loop: armed once, re-armed as its reassembly says, and kept armed
through a failing run, until closed."""
import time

from router.um.expiry_timer import ExpiryTimer
from router.um.loop import EventLoop
from tests.support.processes import wait_for


class Reassembly:
    """Something waits for `rounds` more expiries; the first one fails."""

    def __init__(self, rounds: int):
        self.rounds, self.calls, self.timeout = rounds, 0, 0.01

    def expire(self):
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("one failing run")
        self.rounds -= 1
        return 0.01 if self.rounds > 0 else None


def test_a_failing_expiry_is_looked_at_again_and_the_timer_stops_when_nothing_waits():
    loop = EventLoop("expiry")
    try:
        pieces = Reassembly(rounds=3)
        timer = ExpiryTimer(loop, pieces)
        timer.arm()
        timer.arm()                                  # armed already: one timer, not two
        deadline = time.monotonic() + 10
        while pieces.rounds and time.monotonic() < deadline:
            loop.run_once(0.01)
        assert pieces.rounds == 0 and loop.callback_errors == 1
        assert pieces.calls == 4                     # one failing run, then three
        for _ in range(5):
            loop.run_once(0.02)
        assert pieces.calls == 4                     # nothing waits: not looked at again
    finally:
        loop.close()


def test_a_closed_timer_runs_no_more():
    loop = EventLoop("expiry-closed")
    try:
        pieces = Reassembly(rounds=100)
        timer = ExpiryTimer(loop, pieces)
        timer.arm()
        wait_for(lambda: loop.run_once(0.01) or pieces.calls >= 2, 10, interval=0, message="two runs")
        timer.close()
        calls = pieces.calls
        for _ in range(5):
            loop.run_once(0.02)
        assert pieces.calls == calls
        timer.arm()                                  # closed: arming does nothing
        loop.run_once(0.05)
        assert pieces.calls == calls
    finally:
        loop.close()
