"""The ZeroMQ control bus: interest, portal liveness and commands between supervisor and workers.

    supervisor: BusHub   ROUTER (requests from workers) + PUB (numbered updates to every worker)
    worker:     BusClient DEALER (identity = portal name) + SUB

State replication follows zguide's Clone pattern: a (re)started worker subscribes first, then
asks for a snapshot; every publication carries a sequence number, and the worker applies only those
newer than its snapshot, so nothing is lost or applied twice however the two race.

A worker that falls behind by more than the high-water mark (stopped, a long GC, a burst of
interest) loses publications: ZeroMQ's PUB drops them and tells no one. The numbers show it: at
a gap the worker counts it, logs it (rate-limited) and asks for a fresh snapshot, and meanwhile
holds what arrives, to apply what is newer than that snapshot. The hub publishes a heartbeat now
and then, so updates lost just before a quiet spell show as a gap too.

A subscription reaches the publisher some time after `connect` returns, and until it does the
worker's share of every publication is dropped. So "subscribes first" is made true before the
worker says hello: it asks the hub to publish a probe and waits until its own probe comes back on
the subscriber (asking again meanwhile). Whatever the hub publishes after that reaches the worker.

A message to one peer (the hub's to a worker over the ROUTER, a worker's to the hub over its DEALER)
that finds the peer's ZeroMQ queue full (the peer stopped, busy) waits in an Outbox and is sent on a
timer once the peer drains: without ROUTER_MANDATORY the ROUTER dropped it unseen, and the DEALER
raised to whoever sent. An outbox holds at most the newest of each kind of state (SetCost, a route
table, a snapshot) and its events in order, up to a limit past which the oldest event is dropped and
counted. A worker that is not connected (restarting) gets nothing kept for it, nor does one that
starts again under the same name (it probes first): it gets its state at its hello (snapshot, route
table, its cost from the configuration it starts with), queries to it time out, and route-info is
sent again at the next propagation.
"""
from __future__ import annotations

import logging
import struct
from typing import Callable

import zmq

from router.ipc import bus_messages as bm
from router.ipc.outbox import OUTBOX_LIMIT, OUTBOX_RETRY_INTERVAL, Outbox
from router.log_rate import LogRate, unsaid

log = logging.getLogger(__name__)

HIGH_WATER_MARK = 100_000   # publications queued for a worker (each side) before ZeroMQ drops them
HEARTBEAT_INTERVAL = 1.0    # seconds: how long a worker can miss the last publications unaware
# seconds a worker waits for the snapshot it asked for after a gap before asking again: the
# request or its answer can still be lost when the worker reconnects meanwhile (the hub keeps
# nothing for a worker that is not connected).
RESYNC_RETRY_INTERVAL = 5.0
SEQUENCE = struct.Struct(">Q")      # a publication's first frame


def _drain(sock: zmq.Socket, handle: Callable[[list[bytes]], None]) -> None:
    """ZeroMQ's fd is edge-triggered: read until the socket says nothing is left."""
    while sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
        try:
            frames = sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return
        handle(frames)


class BusHub:
    def __init__(self, context: zmq.Context, request_endpoint: str, publish_endpoint: str, loop,
                 high_water_mark: int = HIGH_WATER_MARK, heartbeat_interval: float = HEARTBEAT_INTERVAL,
                 outbox_limit: int = OUTBOX_LIMIT):
        self.loop = loop
        self.router = context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        # A send to a worker whose queue is full raises EAGAIN (it waits in an outbox), and to one
        # not connected EHOSTUNREACH: both were dropped unseen without it.
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # A worker restarted under its name may connect before the ROUTER has let go of its
        # predecessor's connection: without handover the new one is refused, and stays deaf.
        self.router.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.router.bind(request_endpoint)
        self.publisher = context.socket(zmq.PUB)
        self.publisher.setsockopt(zmq.LINGER, 0)
        self.publisher.setsockopt(zmq.SNDHWM, high_water_mark)
        self.publisher.bind(publish_endpoint)
        self.endpoints = (request_endpoint, publish_endpoint)
        self.sequence = 0                                    # of the last publication
        self.route_table: bm.RouteTable | None = None       # the last published: a resyncing worker needs it
        self.interest: dict[tuple[str, int, int, str], bm.Interest] = {}   # (portal, domain, kind, symbol)
        self.portals: dict[str, tuple[int, int]] = {}        # portal -> (index, generation)
        self.keepalives: dict[str, float] = {}
        # routerctl status shows them; resyncs: snapshots asked for by workers that fell behind;
        # outbox_*: messages to workers whose queue was full (waiting now, dropped past the limit);
        # unreachable: those to a worker not connected, or that went down with messages waiting
        self.counters = {"messages": 0, "malformed": 0, "resyncs": 0, "outbox_delayed": 0, "outbox_waiting": 0,
                         "outbox_dropped": 0, "unreachable": 0}
        self.outbox_limit = outbox_limit
        self.outboxes: dict[bytes, Outbox] = {}     # by worker identity, only while messages wait
        self._outbox_retry = None
        self._malformed_said = LogRate()
        self._outbox_said = LogRate()
        self.on_message: Callable[[str, object], None] | None = None
        loop.add_reader(self.router.getsockopt(zmq.FD), self._readable)
        self._heartbeat = loop.call_every(heartbeat_interval, lambda: self.publish(bm.Heartbeat()))

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
        if identity in self.outboxes:
            if isinstance(message, (bm.Probe, bm.Hello)):
                # A worker (re)starting under that name: what waited was for the one before, and
                # the snapshot at its hello gives it the state.
                self._drop_outbox(identity)
            else:
                self._flush(identity)           # it reads again, most likely
        if isinstance(message, bm.Probe):
            self.publish(message)         # back to the worker: its subscription is in place
            return
        if isinstance(message, bm.Hello):
            self._reply(identity, self.snapshot())
        elif isinstance(message, bm.Resync):
            self.counters["resyncs"] += 1
            self._reply(identity, self.snapshot())
            if self.route_table is not None:
                self._reply(identity, self.route_table)
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
        payload = bm.encode(message)
        outbox = self.outboxes.get(identity)
        if outbox is None:
            try:
                self.router.send_multipart([identity, payload], zmq.NOBLOCK)
                return
            except zmq.Again:
                outbox = self.outboxes[identity] = Outbox(self.outbox_limit)
                self._say("stalled", identity, "is not reading the control bus; messages to it wait until it does")
                if self._outbox_retry is None:
                    self._outbox_retry = self.loop.call_later(OUTBOX_RETRY_INTERVAL, self._retry_outboxes)
            except zmq.ZMQError as err:
                if err.errno != zmq.EHOSTUNREACH:
                    raise
                self._unreachable(identity, 1)
                return
        self.counters["outbox_delayed"] += 1
        if outbox.put(message, payload):
            self.counters["outbox_dropped"] += 1
            self._say("dropped", identity, f"has not read the control bus for a while: the oldest messages waiting "
                                           f"for it are dropped ({self.counters['outbox_dropped']} so far, all told)")
        self._count_waiting()

    def _retry_outboxes(self) -> None:
        self._outbox_retry = None
        for identity in list(self.outboxes):
            self._flush(identity)
        if self.outboxes:
            self._outbox_retry = self.loop.call_later(OUTBOX_RETRY_INTERVAL, self._retry_outboxes)
        self._readable()        # sending can consume the ROUTER's edge notification

    def _flush(self, identity: bytes) -> None:
        try:
            self.outboxes[identity].flush(lambda payload: self.router.send_multipart([identity, payload],
                                                                                     zmq.NOBLOCK))
            del self.outboxes[identity]
        except zmq.Again:
            pass
        except zmq.ZMQError as err:
            if err.errno != zmq.EHOSTUNREACH:
                raise
            self._drop_outbox(identity)
        self._count_waiting()

    def _drop_outbox(self, identity: bytes) -> None:
        """The worker is gone (exited, restarting): what waited for it is for no one now."""
        outbox = self.outboxes.pop(identity, None)
        if outbox is not None:
            self._unreachable(identity, len(outbox))
            self._count_waiting()

    def _unreachable(self, identity: bytes, count: int) -> None:
        self.counters["unreachable"] += count
        self._say("unreachable", identity, f"is not connected to the control bus: {count} messages to it dropped "
                                           f"(it gets the current state when it says hello)", logging.INFO)

    def _count_waiting(self) -> None:
        self.counters["outbox_waiting"] = sum(len(outbox) for outbox in self.outboxes.values())

    def _say(self, event: str, identity: bytes, what: str, level: int = logging.WARNING) -> None:
        unsaid_before = self._outbox_said.due((event, identity))
        if unsaid_before is not None:
            log.log(level, "portal %s %s%s", identity.decode(errors="replace"), what, unsaid(unsaid_before))

    def snapshot(self) -> bm.Snapshot:
        portals = tuple((name, index, generation) for name, (index, generation) in self.portals.items())
        return bm.Snapshot(self.sequence, tuple(self.interest.values()), portals)

    def apply_interest(self, interest: bm.Interest) -> None:
        numbered = bm.Interest(interest.portal, interest.domain_id, interest.kind, interest.symbol,
                               interest.op, self.sequence + 1)     # publish() numbers it so
        key = (interest.portal, interest.domain_id, interest.kind, interest.symbol)
        if interest.op == bm.OP_CANCEL:
            self.interest.pop(key, None)
        else:
            self.interest[key] = numbered
        self.publish(numbered)

    def publish(self, message) -> None:
        self.sequence += 1
        if isinstance(message, bm.RouteTable):
            self.route_table = message
        try:
            self.publisher.send_multipart([SEQUENCE.pack(self.sequence), bm.encode(message)], zmq.NOBLOCK)
        except zmq.Again:
            log.warning("bus publisher is full; %s dropped", type(message).__name__)
        # Sending can consume the ROUTER's edge notification: look again.
        self.loop.call_later(0, self._readable)

    def portal_up(self, portal: str, index: int, generation: int) -> None:
        self.portals[portal] = (index, generation)
        self.publish(bm.PortalUp(portal, index, generation))

    def portal_down(self, portal: str, index: int) -> None:
        self.portals.pop(portal, None)
        self._drop_outbox(portal.encode())
        self.publish(bm.PortalDown(portal, index))

    def forget_portal(self, portal: str) -> None:
        """A portal removed by reload: its interest goes with it, and it is no longer in the
        snapshots workers started later get (their rings would look for its, unlinked)."""
        self.portals.pop(portal, None)
        self._drop_outbox(portal.encode())
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
        self._heartbeat.cancel()
        if self._outbox_retry is not None:
            self._outbox_retry.cancel()
        self.loop.remove_reader(self.router.getsockopt(zmq.FD))
        self.router.close(0)
        self.publisher.close(0)


PROBE_INTERVAL = 0.05       # seconds between probes while a worker's subscription is not yet in place


class BusClient:
    """A worker's end of the bus. `on_message(message)` gets the snapshot, then newer updates;
    `on_malformed()` hears of each message dropped because it did not decode (the worker counts
    it in its portal's bus_messages_malformed), `on_gap()` of each gap in the publications' numbers
    (bus_update_gaps), `on_dropped()` of each message to the hub its outbox had no room for
    (bus_messages_dropped). After a gap the fresh snapshot replaces what the worker had: portals that
    went down or restarted meanwhile come as PortalDown before it, and those that came up as
    PortalUp after it, as if their own updates had arrived."""

    def __init__(self, context: zmq.Context, request_endpoint: str, publish_endpoint: str, portal: str,
                 loop, on_message: Callable[[object], None], on_malformed: Callable[[], None] | None = None,
                 on_gap: Callable[[], None] | None = None, high_water_mark: int = HIGH_WATER_MARK,
                 on_dropped: Callable[[], None] | None = None, outbox_limit: int = OUTBOX_LIMIT):
        self.loop = loop
        self.portal = portal
        self.on_message = on_message
        self.on_malformed = on_malformed
        self.on_gap = on_gap
        self.on_dropped = on_dropped
        self._malformed_said = LogRate()
        self._gap_said = LogRate()
        self._outbox_said = LogRate()
        self.outbox = Outbox(outbox_limit)      # what the hub's queue had no room for
        self._outbox_retry = None
        self.subscriber = context.socket(zmq.SUB)
        self.subscriber.setsockopt(zmq.LINGER, 0)
        self.subscriber.setsockopt(zmq.RCVHWM, high_water_mark)
        self.subscriber.setsockopt(zmq.SUBSCRIBE, b"")
        self.subscriber.connect(publish_endpoint)
        self.dealer = context.socket(zmq.DEALER)
        self.dealer.setsockopt(zmq.LINGER, 0)
        self.dealer.setsockopt(zmq.IDENTITY, portal.encode())
        self.dealer.connect(request_endpoint)
        self.sequence: int | None = None         # of the last publication applied; None: awaiting a snapshot
        self.held: list[tuple[int, object]] = []   # publications that came while awaiting it
        self.portals_up: dict[str, tuple[int, int]] | None = None   # as delivered; None before the first snapshot
        self._hello: bm.Hello | None = None      # waiting for the subscription to be in place
        self._probe_timer = None
        self._resync_timer = None                # while a snapshot asked for after a gap is awaited
        self.counters = {"malformed": 0, "stale_updates": 0, "probes_sent": 0, "gaps": 0, "updates_missed": 0,
                         "resync_retries": 0, "outbox_delayed": 0, "outbox_waiting": 0, "outbox_dropped": 0}
        loop.add_reader(self.subscriber.getsockopt(zmq.FD), self._subscriber_readable)
        loop.add_reader(self.dealer.getsockopt(zmq.FD), self._dealer_readable)

    def hello(self, generation: int, pid: int) -> None:
        """Say hello (and get the snapshot) once this worker's subscription is in place."""
        self.sequence = None
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
        """Never raises for a hub that does not read: the message waits (see Outbox)."""
        payload = bm.encode(message)
        if not self.outbox:
            try:
                self.dealer.send(payload, zmq.NOBLOCK)
                self.loop.call_later(0, self.poll)
                return
            except zmq.Again:
                self._outbox_retry = self.loop.call_later(OUTBOX_RETRY_INTERVAL, self._retry_outbox)
                self._say("stalled", "the supervisor is not reading the control bus; messages to it wait until "
                                     "it does")
        self.counters["outbox_delayed"] += 1
        if self.outbox.put(message, payload):
            self.counters["outbox_dropped"] += 1
            if self.on_dropped is not None:
                self.on_dropped()
            self._say("dropped", f"the supervisor has not read the control bus for a while: the oldest messages "
                                 f"waiting for it are dropped ({self.counters['outbox_dropped']} so far)")
        self.counters["outbox_waiting"] = len(self.outbox)

    def _retry_outbox(self) -> None:
        try:
            self.outbox.flush(lambda payload: self.dealer.send(payload, zmq.NOBLOCK))
            self._outbox_retry = None
        except zmq.Again:
            self._outbox_retry = self.loop.call_later(OUTBOX_RETRY_INTERVAL, self._retry_outbox)
        self.counters["outbox_waiting"] = len(self.outbox)
        self.poll()             # sending can consume the edge notification

    def _say(self, event: str, what: str) -> None:
        unsaid_before = self._outbox_said.due(event)
        if unsaid_before is not None:
            log.warning("portal %s: %s%s", self.portal, what, unsaid(unsaid_before))

    def poll(self) -> None:
        """Read whatever is waiting on either socket (call after sends: edge-triggered fds)."""
        self._dealer_readable()
        self._subscriber_readable()

    def _decode(self, payload: bytes):
        try:
            return bm.decode(payload)
        except bm.BusError as err:
            self._malformed(str(err))
            return None

    def _malformed(self, reason: str) -> None:
        self.counters["malformed"] += 1
        if self.on_malformed is not None:
            self.on_malformed()
        unsaid_before = self._malformed_said.due()
        if unsaid_before is not None:
            log.warning("dropped a malformed bus message: %s (%d so far)%s", reason, self.counters["malformed"],
                        unsaid(unsaid_before))

    def _dealer_readable(self) -> None:
        _drain(self.dealer, self._reply)

    def _reply(self, frames: list[bytes]) -> None:
        message = self._decode(frames[-1])
        if isinstance(message, bm.Snapshot):
            if self.sequence is not None:
                # The answer to a request asked again: the worker has applied updates past the
                # first answer, which this one may predate. Loading it would undo them.
                self.counters["stale_updates"] += 1
                return
            self._load_snapshot(message)
        elif message is not None:
            self.on_message(message)

    def _load_snapshot(self, snapshot: bm.Snapshot) -> None:
        if self._resync_timer is not None:
            self._resync_timer.cancel()
            self._resync_timer = None
        portals = {name: (index, generation) for name, index, generation in snapshot.portals}
        before, self.portals_up = self.portals_up, portals
        if before is None:
            self.on_message(snapshot)
        else:
            for name, (index, generation) in before.items():
                if portals.get(name) != (index, generation):
                    self.on_message(bm.PortalDown(name, index))
            self.on_message(snapshot)
            for name, (index, generation) in portals.items():
                if before.get(name) != (index, generation):
                    self.on_message(bm.PortalUp(name, index, generation))
        self.sequence = snapshot.sequence
        held, self.held = self.held, []
        for sequence, update in held:
            self._receive(sequence, update)

    def _subscriber_readable(self) -> None:
        _drain(self.subscriber, self._publication)

    def _publication(self, frames: list[bytes]) -> None:
        if len(frames) != 2 or len(frames[0]) != SEQUENCE.size:
            self._malformed(f"a publication is a {SEQUENCE.size}-byte sequence number and a message, "
                            f"not {len(frames)} frames of {[len(f) for f in frames]} bytes")
            return
        message = self._decode(frames[1])
        if message is None:
            return
        if isinstance(message, bm.Probe):
            self._probe_returned(message)     # before the snapshot too: it is what lets us ask for one
        self._receive(SEQUENCE.unpack(frames[0])[0], message)

    def _receive(self, sequence: int, message) -> None:
        if self.sequence is None:
            self.held.append((sequence, message))
        elif sequence <= self.sequence:
            self.counters["stale_updates"] += 1      # in the snapshot already
        elif sequence > self.sequence + 1:
            self._gap(sequence)
            self.held.append((sequence, message))
        else:
            self.sequence = sequence
            self._deliver(message)

    def _gap(self, sequence: int) -> None:
        missed = sequence - self.sequence - 1
        self.counters["gaps"] += 1
        self.counters["updates_missed"] += missed
        if self.on_gap is not None:
            self.on_gap()
        unsaid_before = self._gap_said.due()
        if unsaid_before is not None:
            log.warning("portal %s fell behind the control bus: %d updates lost after number %d (%d gaps so far); "
                        "asking for a fresh snapshot%s", self.portal, missed, self.sequence, self.counters["gaps"],
                        unsaid(unsaid_before))
        self.sequence = None
        self._ask_resync()

    def _ask_resync(self) -> None:
        self.send(bm.Resync(self.portal))
        if self._resync_timer is None:
            self._resync_timer = self.loop.call_later(RESYNC_RETRY_INTERVAL, self._resync_overdue)

    def _resync_overdue(self) -> None:
        self._resync_timer = None
        if self.sequence is not None:
            return                          # the snapshot came
        self.counters["resync_retries"] += 1
        log.warning("portal %s: no snapshot from the control bus %.0f s after asking for one; asking again",
                    self.portal, RESYNC_RETRY_INTERVAL)
        self._ask_resync()

    def _deliver(self, message) -> None:
        if isinstance(message, (bm.Probe, bm.Heartbeat)):
            return                           # numbered like the rest, but no state
        if isinstance(message, bm.PortalUp):
            self.portals_up[message.portal] = (message.index, message.generation)
        elif isinstance(message, (bm.PortalDown, bm.PortalRemoved)):
            self.portals_up.pop(message.portal, None)
        self.on_message(message)

    def close(self) -> None:
        if self._outbox_retry is not None:
            self._outbox_retry.cancel()
        if self._resync_timer is not None:
            self._resync_timer.cancel()
        if self._probe_timer is not None:
            self._probe_timer.cancel()
        for sock in (self.subscriber, self.dealer):
            self.loop.remove_reader(sock.getsockopt(zmq.FD))
            sock.close(0)
