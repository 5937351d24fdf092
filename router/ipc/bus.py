"""The ZeroMQ control bus: interest, portal liveness and commands between supervisor and workers.

    supervisor: BusHub   ROUTER (requests from workers) + PUB (numbered updates to every worker)
    worker:     BusClient DEALER (identity = portal name) + SUB

State replication follows zguide's Clone pattern: a (re)started worker subscribes first, then
asks for a snapshot; updates carry sequence numbers, and the worker applies only those newer than
its snapshot, so nothing is lost or applied twice however the two race.

A subscription reaches the publisher some time after `connect` returns, and until it does the
worker's share of every publication is dropped. So "subscribes first" is made true before the
worker says hello: it asks the hub to publish a probe and waits until its own probe comes back on
the subscriber (asking again meanwhile). Whatever the hub publishes after that reaches the worker.
"""
from __future__ import annotations

import logging
from typing import Callable

import zmq

from router.ipc import bus_messages as bm
from router.log_rate import LogRate, unsaid

log = logging.getLogger(__name__)


def _drain(sock: zmq.Socket, handle: Callable[[list[bytes]], None]) -> None:
    """ZeroMQ's fd is edge-triggered: read until the socket says nothing is left."""
    while sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
        try:
            frames = sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return
        handle(frames)


class BusHub:
    def __init__(self, context: zmq.Context, request_endpoint: str, publish_endpoint: str, loop):
        self.loop = loop
        self.router = context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 0)
        self.router.bind(request_endpoint)
        self.publisher = context.socket(zmq.PUB)
        self.publisher.setsockopt(zmq.LINGER, 0)
        self.publisher.setsockopt(zmq.SNDHWM, 100_000)
        self.publisher.bind(publish_endpoint)
        self.endpoints = (request_endpoint, publish_endpoint)
        self.sequence = 0
        self.interest: dict[tuple[str, int, int, str], bm.Interest] = {}   # (portal, domain, kind, symbol)
        self.portals: dict[str, tuple[int, int]] = {}        # portal -> (index, generation)
        self.keepalives: dict[str, float] = {}
        self.counters = {"messages": 0, "malformed": 0}     # routerctl status shows them
        self._malformed_said = LogRate()
        self.on_message: Callable[[str, object], None] | None = None
        loop.add_reader(self.router.getsockopt(zmq.FD), self._readable)

    def _readable(self) -> None:
        _drain(self.router, self._handle)

    def _handle(self, frames: list[bytes]) -> None:
        self.counters["messages"] += 1
        if len(frames) != 2:
            self._malformed(frames[0], f"{len(frames) - 1} frames, not one")
            return
        identity, payload = frames
        try:
            message = bm.decode(payload)
        except bm.BusError as err:
            self._malformed(identity, str(err))
            return
        if isinstance(message, bm.Probe):
            self.publish(message)         # back to the worker: its subscription is in place
            return
        if isinstance(message, bm.Hello):
            self._reply(identity, self.snapshot())
        elif isinstance(message, bm.Interest):
            self.apply_interest(message)
        elif isinstance(message, bm.Keepalive):
            self.keepalives[message.portal] = message.timestamp
        if self.on_message is not None:
            self.on_message(identity.decode(errors="replace"), message)

    def _malformed(self, identity: bytes, reason: str) -> None:
        # Only a process of the router's user can reach the bus, but one that sends garbage
        # would otherwise fill the log.
        self.counters["malformed"] += 1
        unsaid_before = self._malformed_said.due()
        if unsaid_before is not None:
            log.warning("dropped a malformed bus message from %r: %s (%d so far)%s", identity, reason,
                        self.counters["malformed"], unsaid(unsaid_before))

    def _reply(self, identity: bytes, message) -> None:
        try:
            self.router.send_multipart([identity, bm.encode(message)], zmq.NOBLOCK)
        except zmq.ZMQError as err:
            log.warning("bus reply to %r failed: %s", identity, err)

    def snapshot(self) -> bm.Snapshot:
        portals = tuple((name, index, generation) for name, (index, generation) in self.portals.items())
        return bm.Snapshot(self.sequence, tuple(self.interest.values()), portals)

    def apply_interest(self, interest: bm.Interest) -> None:
        self.sequence += 1
        numbered = bm.Interest(interest.portal, interest.domain_id, interest.kind, interest.symbol,
                               interest.op, self.sequence)
        key = (interest.portal, interest.domain_id, interest.kind, interest.symbol)
        if interest.op == bm.OP_CANCEL:
            self.interest.pop(key, None)
        else:
            self.interest[key] = numbered
        self.publish(numbered)

    def publish(self, message) -> None:
        try:
            self.publisher.send(bm.encode(message), zmq.NOBLOCK)
        except zmq.Again:
            log.warning("bus publisher is full; %s dropped", type(message).__name__)
        # Sending can consume the ROUTER's edge notification: look again.
        self.loop.call_later(0, self._readable)

    def portal_up(self, portal: str, index: int, generation: int) -> None:
        self.portals[portal] = (index, generation)
        self.publish(bm.PortalUp(portal, index, generation))

    def portal_down(self, portal: str, index: int) -> None:
        self.portals.pop(portal, None)
        self.publish(bm.PortalDown(portal, index))

    def forget_portal(self, portal: str) -> None:
        """A portal removed by reload: its interest goes with it, and it is no longer in the
        snapshots workers started later get (their rings would look for its, unlinked)."""
        self.portals.pop(portal, None)
        for key, interest in list(self.interest.items()):
            if key[0] == portal:
                self.apply_interest(bm.Interest(portal, interest.domain_id, interest.kind, interest.symbol,
                                                bm.OP_CANCEL))

    def send_to(self, portal: str, message) -> None:
        self._reply(portal.encode(), message)
        # As in publish(): sending can consume the ROUTER's edge notification, and requests that
        # arrived meanwhile (route-info from the workers) would wait for the next one.
        self.loop.call_later(0, self._readable)

    def close(self) -> None:
        self.loop.remove_reader(self.router.getsockopt(zmq.FD))
        self.router.close(0)
        self.publisher.close(0)


PROBE_INTERVAL = 0.05       # seconds between probes while a worker's subscription is not yet in place


class BusClient:
    """A worker's end of the bus. `on_message(message)` gets the snapshot, then newer updates;
    `on_malformed()` hears of each message dropped because it did not decode (the worker counts
    it in its portal's bus_messages_malformed)."""

    def __init__(self, context: zmq.Context, request_endpoint: str, publish_endpoint: str, portal: str,
                 loop, on_message: Callable[[object], None], on_malformed: Callable[[], None] | None = None):
        self.loop = loop
        self.portal = portal
        self.on_message = on_message
        self.on_malformed = on_malformed
        self._malformed_said = LogRate()
        self.subscriber = context.socket(zmq.SUB)
        self.subscriber.setsockopt(zmq.LINGER, 0)
        self.subscriber.setsockopt(zmq.RCVHWM, 100_000)
        self.subscriber.setsockopt(zmq.SUBSCRIBE, b"")
        self.subscriber.connect(publish_endpoint)
        self.dealer = context.socket(zmq.DEALER)
        self.dealer.setsockopt(zmq.LINGER, 0)
        self.dealer.setsockopt(zmq.IDENTITY, portal.encode())
        self.dealer.connect(request_endpoint)
        self.snapshot_sequence: int | None = None
        self.early_updates: list = []
        self._hello: bm.Hello | None = None      # waiting for the subscription to be in place
        self._probe_timer = None
        self.counters = {"malformed": 0, "stale_updates": 0, "probes_sent": 0}
        loop.add_reader(self.subscriber.getsockopt(zmq.FD), self._subscriber_readable)
        loop.add_reader(self.dealer.getsockopt(zmq.FD), self._dealer_readable)

    def hello(self, generation: int, pid: int) -> None:
        """Say hello (and get the snapshot) once this worker's subscription is in place."""
        self.snapshot_sequence = None
        self._hello = bm.Hello(self.portal, generation, pid)
        if self._probe_timer is None:
            self._probe_timer = self.loop.call_every(PROBE_INTERVAL, self._probe)
        self._probe()

    def _probe(self) -> None:
        self.counters["probes_sent"] += 1
        self.send(bm.Probe(self.portal, self._hello.pid))

    def _probe_returned(self, probe: bm.Probe) -> None:
        if self._hello is None or (probe.portal, probe.pid) != (self.portal, self._hello.pid):
            return                        # another worker's, or one of ours answered already
        self._probe_timer.cancel()
        self._probe_timer = None
        hello, self._hello = self._hello, None
        self.send(hello)

    def send(self, message) -> None:
        self.dealer.send(bm.encode(message), zmq.NOBLOCK)
        self.loop.call_later(0, self.poll)

    def poll(self) -> None:
        """Read whatever is waiting on either socket (call after sends: edge-triggered fds)."""
        self._dealer_readable()
        self._subscriber_readable()

    def _decode(self, payload: bytes):
        try:
            return bm.decode(payload)
        except bm.BusError as err:
            self.counters["malformed"] += 1
            if self.on_malformed is not None:
                self.on_malformed()
            unsaid_before = self._malformed_said.due()
            if unsaid_before is not None:
                log.warning("dropped a malformed bus message: %s (%d so far)%s", err, self.counters["malformed"],
                            unsaid(unsaid_before))
            return None

    def _dealer_readable(self) -> None:
        _drain(self.dealer, self._reply)

    def _reply(self, frames: list[bytes]) -> None:
        message = self._decode(frames[-1])
        if isinstance(message, bm.Snapshot):
            self.snapshot_sequence = message.sequence
            self.on_message(message)
            early, self.early_updates = self.early_updates, []
            for update in early:
                self._apply(update)
        elif message is not None:
            self.on_message(message)

    def _subscriber_readable(self) -> None:
        _drain(self.subscriber, lambda frames: self._update(frames[-1]))

    def _update(self, payload: bytes) -> None:
        message = self._decode(payload)
        if message is None:
            return
        if isinstance(message, bm.Probe):
            self._probe_returned(message)
            return
        if self.snapshot_sequence is None:
            self.early_updates.append(message)
        else:
            self._apply(message)

    def _apply(self, message) -> None:
        if isinstance(message, bm.Interest) and message.sequence <= (self.snapshot_sequence or 0):
            self.counters["stale_updates"] += 1
            return
        self.on_message(message)

    def close(self) -> None:
        if self._probe_timer is not None:
            self._probe_timer.cancel()
        for sock in (self.subscriber, self.dealer):
            self.loop.remove_reader(sock.getsockopt(zmq.FD))
            sock.close(0)
