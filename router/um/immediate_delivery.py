"""MIM delivery control: which multicast immediate messages are new, per originating context.

Immediate messages may reach a context more than once: routers flood them into every domain, so
two routers joining the same two domains each bring a copy, and a router sees the copy another
router forwarded. Each message carries its originating context's instance (CTXINST) and that
context's immediate-message sequence number, unchanged by every router it crosses; the pair says
whether it was seen before. Per origin a window of `window` sequence numbers is remembered
(UM's `mim_sqn_window_size`); a number older than the window is taken as a duplicate, since it
can no longer be told apart. An origin heard from for none of `idle_timeout` seconds is
forgotten (UM's `mim_src_deletion_timeout`): its next message starts it afresh.
"""
from __future__ import annotations

import time
from typing import Callable

_HALF = 1 << 31
_MASK = 0xFFFFFFFF


class _Origin:
    __slots__ = ("high", "seen", "last_heard")

    def __init__(self, sqn: int, now: float):
        self.high = sqn
        self.seen = {sqn}
        self.last_heard = now


class ImmediateDeliveryControl:
    def __init__(self, window: int, idle_timeout: float, clock: Callable[[], float] = time.monotonic):
        self.window = max(1, window)
        self.idle_timeout = idle_timeout
        self.clock = clock
        self.origins: dict[bytes, _Origin] = {}
        self._next_sweep = clock() + idle_timeout

    def is_new(self, origin: bytes, sqn: int) -> bool:
        """True the first time (origin, sqn) is offered within the window, False after."""
        now = self.clock()
        if now >= self._next_sweep:
            self._sweep(now)
        state = self.origins.get(origin)
        if state is None:
            self.origins[origin] = _Origin(sqn, now)
            return True
        state.last_heard = now
        ahead = (sqn - state.high) & _MASK            # serial arithmetic: sequence numbers wrap
        if ahead and ahead < _HALF:
            state.high = sqn
            state.seen.add(sqn)
            if len(state.seen) > 2 * self.window:
                floor = state.high
                state.seen = {s for s in state.seen if (floor - s) & _MASK < self.window}
            return True
        behind = (state.high - sqn) & _MASK
        if behind >= self.window or sqn in state.seen:
            return False
        state.seen.add(sqn)
        return True

    def _sweep(self, now: float) -> None:
        cutoff = now - self.idle_timeout
        for origin in [o for o, state in self.origins.items() if state.last_heard < cutoff]:
            del self.origins[origin]
        self._next_sweep = now + self.idle_timeout
