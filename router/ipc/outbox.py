"""What one peer of the control bus could not take yet (router/ipc/bus.py): ZeroMQ's queue to it was
full (the peer stopped, busy). Kept in order until the peer drains, bounded: a newer state message
replaces a waiting one of its kind, and past the limit the oldest event goes (the caller counts it).
"""
from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Callable

from router.ipc import bus_messages as bm

OUTBOX_LIMIT = 10_000               # messages waiting for one peer whose ZeroMQ queue is full
# seconds between attempts to send what waits: ZeroMQ tells no one when one peer of a ROUTER drains
OUTBOX_RETRY_INTERVAL = 0.05
# Messages that are state: a newer one makes a waiting one of its kind pointless (each peer gets
# its own SetCost, so the kind is the key). Every other kind is an event, sent in order.
STATE_KINDS = (bm.Snapshot, bm.RouteTable, bm.SetCost, bm.Keepalive, bm.Probe, bm.Resync)


class Outbox:
    """What one peer's ZeroMQ queue had no room for, oldest first, until the peer drains. A state
    message replaces the waiting one of its kind and takes its place at the end (it is the newest);
    past `limit` the oldest event is dropped."""

    def __init__(self, limit: int):
        self.limit = limit
        self.waiting: OrderedDict[object, bytes] = OrderedDict()    # kind (state) or event number
        self._event_numbers = itertools.count()

    def __len__(self) -> int:
        return len(self.waiting)

    def put(self, message, payload: bytes) -> bool:
        """Keep `payload` (`message` encoded); True if the oldest event was dropped for it."""
        key = type(message) if isinstance(message, STATE_KINDS) else next(self._event_numbers)
        self.waiting.pop(key, None)
        self.waiting[key] = payload
        if len(self.waiting) <= self.limit:
            return False
        oldest_event = next((k for k in self.waiting if isinstance(k, int)), None)
        if oldest_event is None:
            return False            # states only: at most one of each kind, bounded already
        del self.waiting[oldest_event]
        return True

    def flush(self, send: Callable[[bytes], None]) -> None:
        """Send what waits, oldest first, until `send` raises (zmq.Again: the queue is full again)."""
        while self.waiting:
            key = next(iter(self.waiting))
            send(self.waiting[key])
            del self.waiting[key]
