"""The timer that gives up messages whose pieces stopped coming.

A message in pieces (a multicast or unicast immediate message, a response crossing a peer link)
waits in a reassembly for the rest; pieces that never come (a lost datagram, a sender gone, a link
down halfway) must be given up and counted when their time comes, not when another message happens
to arrive. `ExpiryTimer` keeps one loop timer for a reassembly whose `expire()` gives up what has
waited its `timeout` (seconds, read when it is needed: an owner may change it) and returns the
seconds until the next is due (None: nothing waits).
"""
from __future__ import annotations


class ExpiryTimer:
    def __init__(self, loop, reassembly):
        self.loop, self.reassembly = loop, reassembly
        self._timer = None
        self.closed = False

    def arm(self) -> None:
        """Pieces wait: their expiry is looked at within the timeout (once armed, it stays so)."""
        if self._timer is None and not self.closed:
            self._timer = self.loop.call_later(self.reassembly.timeout, self._run)

    def _run(self) -> None:
        self._timer = None
        wait = self.reassembly.timeout      # looked at again a timeout later if expiring fails
        try:
            wait = self.reassembly.expire()
        finally:
            # Armed whatever failed (the loop counts and logs it): pieces of messages that will
            # never be whole must not be kept for good.
            if wait is not None and not self.closed:
                self._timer = self.loop.call_later(wait, self._run)

    def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
