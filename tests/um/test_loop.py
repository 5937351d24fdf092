"""The event loop's timers."""
from router.um.loop import EventLoop


def test_cancelled_timers_do_not_pile_up_in_the_loop():
    loop = EventLoop("compact")
    timer = None
    for _ in range(10_000):                 # a timer re-armed far ahead, over and over
        if timer is not None:
            timer.cancel()
        timer = loop.call_later(60.0, lambda: None)
        loop.run_once(0)
    assert len(loop._timers) < 600 and loop.cancelled_timers <= 300
    fired = []
    loop.call_later(0, fired.append, 1)
    loop.run_once(0)
    assert fired == [1] and not timer.cancelled
    timer.cancel()
    timer.cancel()                          # twice counts once
    assert loop.cancelled_timers == len([e for e in loop._timers if e[2].cancelled])
