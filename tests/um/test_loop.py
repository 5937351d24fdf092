"""The event loop: its timers, and the hook that sees ready descriptors first."""
import os
import threading
import time
from pathlib import Path

from router.um.loop import EventLoop
from tests.support.processes import wait_for


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


def test_on_ready_sees_the_ready_descriptors_before_their_handlers_run():
    loop = EventLoop("on-ready")
    ready_fd, idle_fd = os.eventfd(1, os.EFD_NONBLOCK), os.eventfd(0, os.EFD_NONBLOCK)
    seen = []
    try:
        loop.add_reader(ready_fd, lambda: (seen.append("handler"), os.eventfd_read(ready_fd)))
        loop.add_reader(idle_fd, lambda: seen.append("idle handler"))
        loop.on_ready = lambda fds: seen.append(sorted(fds))
        loop.run_once(1.0)
        assert seen == [[ready_fd], "handler"]
        loop.run_once(0.01)                       # nothing ready: no call
        assert seen == [[ready_fd], "handler"]
    finally:
        loop.close()
        os.close(ready_fd)
        os.close(idle_fd)


def test_a_handler_removed_by_another_in_the_same_turn_is_not_called():
    """Two descriptors ready at once; whichever handler runs first closes the other (as a failed
    send closes the socket a reader was about to read): the closed one's handler must not run on
    the descriptor it no longer has."""
    loop = EventLoop("stale")
    fds = [os.eventfd(1, os.EFD_NONBLOCK), os.eventfd(1, os.EFD_NONBLOCK)]
    ran, closed = [], set()

    def handler(mine: int, other: int) -> None:
        assert mine not in closed, "a handler ran for a descriptor another had closed"
        ran.append(mine)
        os.eventfd_read(mine)
        loop.remove_reader(other)
        os.close(other)
        closed.add(other)

    try:
        loop.add_reader(fds[0], lambda: handler(fds[0], fds[1]))
        loop.add_reader(fds[1], lambda: handler(fds[1], fds[0]))
        loop.run_once(1.0)
        assert len(ran) == 1 and loop.callback_errors == 0, (ran, loop.callback_errors)
    finally:
        loop.close()
        for fd in set(fds) - closed:
            os.close(fd)


def test_a_callback_handed_over_from_another_thread_wakes_a_loop_run_by_its_own_thread():
    """A worker runs its loop on its main thread (no start_thread) and gets results from other
    threads (a DNS lookup's): handing one over must wake the loop out of its wait, not leave it
    waiting for its next timer or descriptor."""
    loop = EventLoop("main-thread")
    ran = []
    where = Path(f"/proc/self/task/{threading.get_native_id()}/wchan")      # this thread's kernel wait

    def hand_over() -> None:
        # Once the loop sleeps in its epoll wait, not before (then any loop would see it pending).
        wait_for(lambda: "epoll" in where.read_text(), 10, interval=0.005, message="the loop to wait in epoll")
        loop.call_soon_threadsafe(ran.append, "handed over")
    helper = threading.Thread(target=hand_over)
    helper.start()
    began = time.monotonic()
    loop.run_once(60.0)                         # nothing else would end this wait for a minute
    helper.join()
    assert ran == ["handed over"] and time.monotonic() - began < 30
    loop.close()


def test_a_periodic_callback_that_raises_once_keeps_running():
    """A keepalive, an advertisement or a heartbeat that fails once (a transient send error, one
    odd input) is called again at its next interval: the failure is counted and logged, and the
    timer goes on, where it used to stop for good while the process looked alive."""
    loop = EventLoop("periodic")
    calls = []

    def flaky() -> None:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise OSError("transient")
    handle = loop.call_every(0.01, flaky)
    try:
        assert loop.run_until(lambda: len(calls) >= 3, 10), calls
        assert loop.callback_errors == 1
        handle.cancel()
        seen = len(calls)
        loop.run_until(lambda: False, 0.1)      # cancelled: not called again
        assert len(calls) == seen
    finally:
        loop.close()


def test_a_periodic_callback_that_keeps_failing_is_logged_once_per_interval(caplog):
    """Every failure counts; the log says the first with its traceback and then one line per
    LogRate interval, not a traceback every 10 ms for as long as the router runs."""
    loop = EventLoop("failing")
    calls = []

    def broken() -> None:
        calls.append(1)
        raise ValueError("always")
    loop.call_every(0.001, broken)
    try:
        with caplog.at_level("ERROR", logger="router.um.loop"):
            assert loop.run_until(lambda: len(calls) >= 50, 20)
        assert loop.callback_errors == len(calls)
        lines = [r for r in caplog.records if "broken" in r.getMessage()]
        assert len(lines) == 1 and lines[0].exc_info is not None, [r.getMessage() for r in lines]
    finally:
        loop.close()


def test_a_small_read_pauses_the_next_wait_once_and_only_while_coalescing_is_on(monkeypatch):
    """Read coalescing: a reader that got little makes the loop sleep before its next wait, so
    the socket fills meanwhile; off (an application's loop), nothing changes; with callbacks
    waiting to run there is work to do, and no pause."""
    import router.um.loop as loop_module
    loop = EventLoop("coalescing")
    paused = []
    monkeypatch.setattr(loop_module.time, "sleep", paused.append)
    loop.read_was_small()
    loop.run_once(0)
    assert paused == []                                   # off by default
    loop.read_coalescing = 1e-4
    loop.read_was_small()
    loop.run_once(0)
    loop.run_once(0)
    assert paused == [1e-4]                               # once per small read
    loop.read_was_small()
    loop.call_soon_threadsafe(lambda: None)
    loop.run_once(0)
    assert paused == [1e-4]
    loop.read_coalescing = 0.0                            # the worker stopped batching
    loop.read_was_small()
    loop.run_once(0)
    assert paused == [1e-4]


def test_after_a_long_turn_what_arrived_meanwhile_is_read_before_a_due_timer_judges_silence():
    """A handler that runs past a timer's due time (a big batch, a CPU lent to others) while a
    peer's message arrives: the timer that judges that peer silent must see the message read."""
    loop = EventLoop("long-turn")
    busy, peer = os.eventfd(1, os.EFD_NONBLOCK), os.eventfd(0, os.EFD_NONBLOCK)
    heard, judged = [], []
    try:
        def long_turn():
            os.eventfd_read(busy)
            os.eventfd_write(peer, 1)               # the peer speaks while this turn goes on
            time.sleep(0.1)                         # ...and the turn outlasts the timer's due time
        loop.add_reader(busy, long_turn)
        loop.add_reader(peer, lambda: heard.append(os.eventfd_read(peer)))
        loop.call_later(0.05, lambda: judged.append(bool(heard)))
        loop.run_once(1.0)
        assert judged == [True] and heard == [1]
    finally:
        loop.close()
        os.close(busy)
        os.close(peer)


def test_a_short_turn_runs_due_timers_without_looking_at_the_descriptors_again():
    """The second look costs a system call: only a turn long enough to matter takes it."""
    loop = EventLoop("short-turn")
    order = []
    polls = []
    select = loop._selector.select
    loop._selector.select = lambda timeout=None: polls.append(timeout) or select(timeout)
    try:
        loop.call_later(0, lambda: order.append("timer"))
        loop.run_once(1.0)
        assert order == ["timer"] and polls == [0.0]
    finally:
        loop.close()
