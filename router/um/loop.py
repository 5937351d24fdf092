"""A small event loop: file-descriptor readiness, timers, and calls from other threads.

A UM context runs one of these on its own thread (as UM's context thread does); a router worker runs
one as its main loop. It sleeps in epoll until a socket, an eventfd or a timer needs it, so an idle
process costs no CPU.

Read coalescing (off unless `read_coalescing` is set; a router worker sets it while it batches a
stream, router.worker.scheduling): a stream's reader that got less than SMALL_READ from its socket
(a TCP connection's read, or what one readiness event brought of an LBT-RM or LBT-RU socket) calls
`read_was_small()`, and the loop then sleeps that long before it waits for events again. Woken by
every readable edge, a worker carrying a stream of small messages runs once per few kilobytes, and
each turn's fixed cost (the wake-up, epoll, the record, its commit) comes to most of its CPU per
message; the pause lets the socket fill (TCP's flow control holds the source meanwhile, nothing
is lost; a UDP socket's buffer holds far more than a pause's worth of a source's rate limit) and
the CPU go to the source and the receiver on a small host. Measured: BENCHMARKS.md, "Router (1
hop)" and "Router before and after a change, lbtrm sources".
"""
from __future__ import annotations

import heapq
import itertools
import logging
import os
import selectors
import threading
import time
from collections import deque
from typing import Callable

from router.log_rate import LogRate, unsaid

log = logging.getLogger(__name__)


class Timer:
    """A pending call; `cancel()` makes it a no-op."""

    __slots__ = ("when", "callback", "args", "cancelled", "loop")

    def __init__(self, when: float, callback: Callable, args: tuple, loop: "EventLoop | None" = None):
        self.when, self.callback, self.args, self.cancelled = when, callback, args, False
        self.loop = loop                # while it waits in that loop's heap

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            if self.loop is not None:
                self.loop.cancelled_timers += 1


# Cancelled timers stay in the heap until they are due (a re-armed 60 s timer, thousands of times a
# second on a busy portal, would keep a minute's worth). The heap is rebuilt without them once
# they are most of it.
_COMPACT_AFTER = 256
# A turn longer than this (s, from epoll's return to the timers) looks at the descriptors again
# before due timers run: well under any timeout a timer judges, above a usual turn's length.
LONG_TURN = 0.02
# A read that brought less than this is small: the loop may let the socket fill before the next.
SMALL_READ = 32 * 1024


class EventLoop:
    def __init__(self, name: str = "loop"):
        self.name = name
        self.read_coalescing = 0.0      # s to sleep after a small read before waiting again; 0: never
        self._coalesce = False
        self._selector = selectors.DefaultSelector()
        self._timers: list[tuple[float, int, Timer]] = []
        self._sequence = itertools.count()
        self._pending: deque[tuple[Callable, tuple]] = deque()
        self._wakeup_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._selector.register(self._wakeup_fd, selectors.EVENT_READ, [self._drain_wakeup, None])
        self._stopping = False
        self._thread: threading.Thread | None = None
        # The thread that runs the loop: the one that made it, unless start_thread gives it its own.
        # Callbacks handed over from any other thread wake the loop, whether or not it has a thread
        # of its own (a worker runs its loop on its main thread and resolves names on others).
        self._runner = threading.get_ident()
        self.callback_errors = 0
        # A callback that fails once fails again the next time, as often as its timer or its
        # descriptor calls it: its traceback once, then a line per interval with the count.
        self._errors_said = LogRate()
        self.cancelled_timers = 0       # cancelled ones still in the heap
        # Bumped by every handler change: a handler that ran may have removed or replaced another
        # whose descriptor the same select returned (a send that failed closes the socket its
        # reader is about to read), so the rest are looked up again, and only then.
        self._handler_changes = 0
        # Called with the ready descriptors (a list of ints) when epoll returns some, before their
        # handlers run: a router worker wakes the workers its data goes to while it reads it
        # (router.worker.datapath).
        self.on_ready: Callable[[list], None] | None = None

    # -- readiness -------------------------------------------------------------------------------
    def add_reader(self, fd, callback: Callable[[], None]) -> None:
        self._set_handler(fd, 0, callback)

    def remove_reader(self, fd) -> None:
        self._set_handler(fd, 0, None)

    def add_writer(self, fd, callback: Callable[[], None]) -> None:
        self._set_handler(fd, 1, callback)

    def remove_writer(self, fd) -> None:
        self._set_handler(fd, 1, None)

    def _set_handler(self, fd, slot: int, callback) -> None:
        self._handler_changes += 1
        try:
            key = self._selector.get_key(fd)
        except (KeyError, ValueError):
            if callback is None:
                return
            handlers = [None, None]
            handlers[slot] = callback
            self._selector.register(fd, _mask(handlers), handlers)
            return
        handlers = list(key.data)
        handlers[slot] = callback
        if handlers == [None, None]:
            self._selector.unregister(fd)
        else:
            self._selector.modify(fd, _mask(handlers), handlers)

    # -- time ------------------------------------------------------------------------------------
    def call_later(self, delay: float, callback: Callable, *args) -> Timer:
        timer = Timer(time.monotonic() + max(0.0, delay), callback, args, self)
        heapq.heappush(self._timers, (timer.when, next(self._sequence), timer))
        return timer

    def call_every(self, interval: float, callback: Callable[[], None]) -> Timer:
        """Call `callback` every `interval` seconds until the returned handle is cancelled. One
        call that raises is counted and logged, and the next comes at its time: keepalives,
        advertisements and heartbeats must not stop for good, unseen, over one transient error."""
        handle = Timer(0.0, callback, ())

        def tick() -> None:
            if handle.cancelled:
                return
            self._invoke(callback, ())
            if not handle.cancelled:
                self.call_later(interval, tick)
        self.call_later(interval, tick)
        return handle

    def call_soon_threadsafe(self, callback: Callable, *args) -> None:
        """Run `callback` on the loop's next turn; from another thread this also wakes the loop."""
        self._pending.append((callback, args))
        if threading.get_ident() != self._runner:
            os.eventfd_write(self._wakeup_fd, 1)

    def call_and_wait(self, callback: Callable, *args, timeout: float = 5.0):
        """Run `callback` on the loop's thread and wait for its result (selector changes must
        happen there)."""
        if self.in_loop_thread():
            return callback(*args)
        done = threading.Event()
        outcome: list = []

        def run() -> None:
            try:
                outcome.append((True, callback(*args)))
            except BaseException as err:  # handed back to the caller's thread
                outcome.append((False, err))
            finally:
                done.set()
        self.call_soon_threadsafe(run)
        if not done.wait(timeout):
            raise TimeoutError(f"{self.name}: the loop did not run {callback!r} within {timeout} s")
        ok, value = outcome[0]
        if not ok:
            raise value
        return value

    def _drain_wakeup(self) -> None:
        try:
            os.eventfd_read(self._wakeup_fd)
        except BlockingIOError:
            pass

    # -- running ---------------------------------------------------------------------------------
    def read_was_small(self) -> None:
        """A stream's reader got little: with read coalescing on, pause before the next wait."""
        if self.read_coalescing:
            self._coalesce = True

    def run_once(self, timeout: float | None = None) -> None:
        """Wait for at most `timeout` seconds (None: until something happens) and dispatch."""
        if self._coalesce:
            self._coalesce = False
            if not self._pending:
                time.sleep(self.read_coalescing)
        if self._pending:
            timeout = 0.0
        elif self._timers:
            until_timer = max(0.0, self._timers[0][0] - time.monotonic())
            timeout = until_timer if timeout is None else min(timeout, until_timer)
        ready = self._selector.select(timeout)
        selected_at = time.monotonic()
        self._dispatch(ready)
        while self._pending:
            callback, args = self._pending.popleft()
            self._invoke(callback, args)
        now = time.monotonic()
        if now - selected_at > LONG_TURN and self._timers and self._timers[0][0] <= now:
            # A long turn (a big batch, or a CPU the host gave to others meanwhile): what arrived
            # during it is read before a timer judges a silence by it (a keepalive, a route-info
            # or activity timeout), or a peer still talking is taken for gone.
            self._dispatch(self._selector.select(0))
            now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, timer = heapq.heappop(self._timers)
            timer.loop = None
            if timer.cancelled:
                self.cancelled_timers -= 1
            else:
                self._invoke(timer.callback, timer.args)
        if self.cancelled_timers > _COMPACT_AFTER and 2 * self.cancelled_timers > len(self._timers):
            self._compact_timers()

    def _dispatch(self, ready: list) -> None:
        """Run the handlers of the descriptors `select` found ready."""
        changes = self._handler_changes
        if ready and self.on_ready is not None:
            self._invoke(self.on_ready, ([key.fd for key, _ in ready],))
        for key, events in ready:
            reader, writer = key.data
            if self._handler_changes != changes:
                current = self._current_handlers(key.fd)
                if current is None:
                    continue                    # unregistered meanwhile (closed, most likely)
                reader, writer = current
            if events & selectors.EVENT_READ and reader is not None:
                self._invoke(reader, ())
            if events & selectors.EVENT_WRITE and writer is not None:
                # The reader may have removed the writer: look again.
                current = self._current_handlers(key.fd)
                if current is not None and current[1] is not None:
                    self._invoke(current[1], ())

    def _compact_timers(self) -> None:
        kept = [entry for entry in self._timers if not entry[2].cancelled]
        for entry in self._timers:
            if entry[2].cancelled:
                entry[2].loop = None
        heapq.heapify(kept)
        self._timers = kept
        self.cancelled_timers = 0

    def _current_handlers(self, fd):
        try:
            return self._selector.get_key(fd).data
        except (KeyError, ValueError):
            return None

    def _invoke(self, callback: Callable, args: tuple) -> None:
        try:
            callback(*args)
        except Exception:  # one bad callback must not stop the context
            self.callback_errors += 1
            count = self._errors_said.due(_callback_name(callback))
            if count is not None:
                log.exception("%s: callback %r failed%s", self.name, callback, unsaid(count))

    def run_forever(self) -> None:
        self._runner = threading.get_ident()
        self._stopping = False
        while not self._stopping:
            self.run_once()

    def run_until(self, condition: Callable[[], bool], timeout: float) -> bool:
        """Run until `condition()` holds or `timeout` seconds pass; returns the condition."""
        deadline = time.monotonic() + timeout
        while not condition():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return condition()
            self.run_once(min(remaining, 0.05))
        return True

    def stop(self) -> None:
        self.call_soon_threadsafe(self._set_stopping)

    def _set_stopping(self) -> None:
        self._stopping = True

    def start_thread(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run_forever, name=self.name, daemon=True)
        self._thread.start()
        return self._thread

    def in_loop_thread(self) -> bool:
        return self._thread is None or threading.current_thread() is self._thread

    def close(self) -> None:
        if self._thread is not None and self._thread is not threading.current_thread():
            self.stop()
            self._thread.join(timeout=5)
        self._selector.close()
        os.close(self._wakeup_fd)


def _callback_name(callback: Callable) -> str:
    """What a failing callback's log lines are counted by: its code, not the object (a bound method
    or a lambda is a new one each time it is handed over), so the keys stay as few as the code."""
    function = getattr(callback, "func", callback)          # functools.partial
    function = getattr(function, "__func__", function)      # a bound method
    return f"{getattr(function, '__module__', '')}.{getattr(function, '__qualname__', type(function).__qualname__)}"


def _mask(handlers: list) -> int:
    return (selectors.EVENT_READ if handlers[0] else 0) | (selectors.EVENT_WRITE if handlers[1] else 0)
