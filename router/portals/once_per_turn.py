"""A portal's response to interest and route updates, run once per loop turn, not once per update.

Following the router-wide interest (new proxy receivers, streams re-masked, interest sent on to
other routers, counters) costs a pass over every topic and stream the portal knows. The bus hands
a worker its updates one by one, and a domain whose receivers come up together (the router or an
application starting) sends thousands in a burst: followed one update at a time, that is thousands
of passes over thousands of topics — a worker's loop stalled for longer than the supervisor's
heartbeat timeout, and the worker killed as hung. Updates are folded into the view as they come
(router.portals.forwarding); what follows from them runs once, on the loop's next turn, for all the
updates read meanwhile. The slower a pass, the more updates the next one covers.
"""
from __future__ import annotations

from typing import Callable


class OncePerTurn:
    def __init__(self, loop, callback: Callable[[], None]):
        self.loop = loop
        self.callback = callback
        self._timer = None

    def request(self) -> None:
        """Run the callback on the loop's next turn (once, however often this is called before)."""
        if self._timer is None:
            self._timer = self.loop.call_later(0, self._run)

    @property
    def pending(self) -> bool:
        return self._timer is not None

    def _run(self) -> None:
        self._timer = None
        self.callback()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
