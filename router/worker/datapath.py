"""The data path between workers: one outbound ring per worker, read by every other worker.

`RingSet` is the supervisor's: it creates each portal's ring segment and, before any fork, the
wakeup eventfds of every slot (so a portal added by a reload shares them with workers forked
earlier). `DataPath` is a worker's view: it writes stream records into its own ring and reads the
records addressed to it from the others, sleeping on one eventfd for all of them.

Flow control (DESIGN.md §2): when the outbound ring is full, the records that did not fit wait in
order and the ingress connections that produced them stop being read, so TCP pushes back on the
sources; nothing is dropped.

A reader whose sends would block (its receivers are behind: every connection has data queued)
leaves records in the rings instead of moving them into its `<max-queue>` queue, so a burst waits
in shared memory and, when the ring fills, pushes back on the source like a direct TCP receiver
would: no loss. It holds back only while that costs no one else: as soon as a ring's producer
waits to write a record that is also for another portal, or its receivers have taken nothing for
STALL_TIMEOUT (stopped), it reads on and its queue drops beyond `<max-queue>`, counted, as the DRO
does, so one slow receiver never stalls the other domains for longer than that.

Early wake-ups: waking a worker asleep on another CPU takes tens of µs on a small or virtual host
(the CPU itself must be woken), and a paced message would wait that long after its record is in the
ring. So when a socket of this worker becomes readable, before its data is read, the workers its
last records went to are woken (`on_ready`, the event loop's hook); each wakes once per park, so
the record's own commit does not wake it again. A worker woken so, finding no record yet, watches
its rings for up to EARLY_WAKE_SPIN before it parks again: the read, the parse and the ring write
go on meanwhile, and the wake-up and the work overlap instead of adding up. Counted: a worker's
early wake-ups of others (ring_early_wakeups_sent), and its early wake-ups after which no record
came in time (ring_early_wakeups_idle: the readable socket carried nothing for it).

Portals that share a worker process (`<daemon><worker-group>`) hand each other records directly:
a record for such a portal is passed to its handler at once, with no ring write, eventfd or
process wake-up on the way, and that portal sends it on at once (one read of a source's
connection is one hand-over: it is as much a batch as the ring would have made). When it
cannot take records now (its sends would block) or older records for it are still in the ring,
records for it go through the ring as above, so it holds back and keeps them in order exactly as
a portal in another process would, and direct hand-over resumes once it has read the ring dry.
"""
from __future__ import annotations

import logging
import os
import time
from collections import deque
from dataclasses import dataclass

import posix_ipc

from router.config import validate
from router.eventlog import event
from router.ipc import layout
from router.ipc.ring import ConsumerLapped, OverflowPolicy, RecordTooLarge, init_ring
from router.ipc.ring_consumer import RingConsumer
from router.ipc.ring_producer import RingProducer
from router.ipc.shm import SharedSegment, segment_name
from router.ipc.wakeup import EventfdWakeup, RingWakeups
from router.portals.once_per_turn import OncePerTurn
from router.worker.records import (EOS_RECORD, FRAMES_HEADER, RECORD_ADVERT, RECORD_EOS, RECORD_FRAMES,
                                   RECORD_IMMEDIATE, RECORD_LATE_JOIN, RECORD_LATE_JOIN_ANSWER, RECORD_RESPONSE,
                                   RECORD_RESPONSE_PIECE, RECORD_SEQUENCE_INFO, RECORD_UNICAST, SEQUENCE_INFO_RECORD,
                                   encode_frames, encode_immediate, encode_late_join, encode_late_join_answer,
                                   encode_response, encode_response_piece)

log = logging.getLogger(__name__)

MAX_PORTALS = validate.MAX_PORTALS     # consumer slots per ring: the producer scans each of them
RING_CAPACITY = 8 * 1024 * 1024
RING_HEARTBEAT_TIMEOUT = 2.0
READ_LIMIT = 4096                      # records per ring per turn, so one busy ring cannot starve the loop
READ_BYTES = 256 * 1024                # payload bytes per ring per turn: a backlog is noticed within this
HOLD_RECHECK_INTERVAL = 0.002          # how often a portal holding records back looks again (s)
# A ring read ends after this much time (s), its records sent and the rest left for the next turn:
# records slow to handle (late-join requests, each decoded, rewritten and sent; any record while
# the host lends the CPU to others) must not hold the loop, and the timers behind it (heartbeats,
# keepalives), for the seconds READ_LIMIT of them can take. Looked at every TURN_CHECK records.
TURN_BUDGET = 0.02
TURN_CHECK = 16
# A socket read of this many frames, or a ring read of this many bytes, is a burst: `on_burst` is
# told (the worker's scheduling judges its rate at once; paced messages come one at a time).
BURST_FRAMES = 16
BURST_BYTES = 4096
# How long a worker woken early watches its rings for the record on its way (s). The record
# usually comes before the wake-up completes; this bounds the wait when the data was not for it.
EARLY_WAKE_SPIN = 50e-6
STALL_TIMEOUT = 0.5                    # receivers that took nothing for this long are stuck: stop holding



class RingSet:
    """Every portal's ring, owned by the supervisor."""

    def __init__(self, owner: str, capacity: int = RING_CAPACITY):
        layout.check_capacity(capacity)
        self.owner = owner
        self.owner_pid = os.getpid()
        self.capacity = capacity
        self.consumer_wakeups = [EventfdWakeup() for _ in range(MAX_PORTALS)]
        self.producer_wakeups = [EventfdWakeup() for _ in range(MAX_PORTALS)]
        self.segments: dict[int, SharedSegment] = {}

    def create(self, index: int) -> None:
        if index >= MAX_PORTALS:
            raise ValueError(f"a router has at most {MAX_PORTALS} portals")
        segment = SharedSegment.create(self.owner, f"ring{index}", layout.segment_size(self.capacity))
        init_ring(segment.memory, self.capacity, consumer_slots=MAX_PORTALS, overflow=OverflowPolicy.BLOCK,
                  heartbeat_timeout=RING_HEARTBEAT_TIMEOUT, owner_pid=self.owner_pid)
        self.segments[index] = segment

    def name(self, index: int) -> str:
        return segment_name(self.owner, f"ring{index}", self.owner_pid)

    def wakeups(self, index: int) -> RingWakeups:
        return RingWakeups(self.consumer_wakeups, self.producer_wakeups[index])

    def remove(self, index: int) -> None:
        segment = self.segments.pop(index, None)
        if segment is not None:
            segment.close()

    def close(self) -> None:
        for index in list(self.segments):
            self.remove(index)
        for wakeup in self.consumer_wakeups + self.producer_wakeups:
            wakeup.close()


@dataclass
class DataPathSpec:
    rings: RingSet
    portal_indexes: dict[str, int]


class DataPath:
    def __init__(self, spec: DataPathSpec, index: int, loop, counters, restarted: bool = False):
        """`restarted`: an earlier worker of this portal ran (it died, or a reload restarted it):
        what was addressed to the portal in the rings since it last read them is counted."""
        self.rings = spec.rings
        self._restarted = restarted
        self._names = {i: name for name, i in spec.portal_indexes.items()}
        self.index = index
        self.loop = loop
        self.counters = counters
        self.handler = None                    # handler(ring index, record type, payload view[, now])
        # handler_frames(ring index, record type, stream id, count, longest, frames): frames handed
        # over by a portal in this process, to be sent at once (they are one read's worth)
        self.handler_frames = None
        self.after_batch = None                # called when the rings have been drained (flush point)
        self.on_burst = _nothing               # called after a burst (BURST_FRAMES, BURST_BYTES)
        self.producer = RingProducer(self._memory(index), wakeups=self.rings.wakeups(index))
        self.consumers: dict[int, RingConsumer] = {}
        for ring in spec.portal_indexes.values():
            if ring != index:
                self.attach(ring)
        self.pending: deque[tuple[int, bytes, int]] = deque()
        self.paused: dict[int, object] = {}    # id -> ingress connection waiting for ring space
        self._answers: list = []               # late-join answers of this turn, written at its end
        self._answers_due = OncePerTurn(loop, self._write_answers)
        self._waiting_mask = 0                 # the portals the pending records are for
        self.wakeup = self.rings.consumer_wakeups[index]
        self.producer_wakeup = self.rings.producer_wakeups[index]
        loop.add_reader(self.wakeup.fileno(), self._wakeup_readable)
        loop.add_reader(self.producer_wakeup.fileno(), self._space_freed)
        # Set by the portal: None, or a callable returning None while its sends go through, else
        # the time.monotonic() of the last send that made progress (every queue holds data).
        self.backlog = None
        self._released = self._holding = False
        self._recheck_timer = None
        self.local: dict[int, "DataPath"] = {}    # portals in this process: ring index -> their DataPath
        self.local_mask = 0
        self._ring_for: dict[int, int] = {}      # local portal -> ring position after its last record
        # Early wake-ups: the portals (in other processes) frames went to since the last one, and
        # the descriptors whose readiness is no reason for one (the rings' own eventfds here).
        self._frames_mask = 0
        self._ring_fds = self._eventfds()
        loop.call_later(0, self._woken)

    def _memory(self, ring: int) -> memoryview:
        segment = self.rings.segments.get(ring)
        if segment is None:                     # created after this worker was forked
            segment = SharedSegment.attach(self.rings.name(ring))
            self.rings.segments[ring] = segment
        return segment.memory

    def attach(self, ring: int) -> None:
        if ring != self.index and ring not in self.consumers:
            try:
                memory = self._memory(ring)
            except posix_ipc.ExistentialError:
                # Its portal was removed (a reload) after the news of it was sent: nothing to read.
                log.warning("portal %d: ring %d is gone (its portal was removed); not read", self.index, ring)
                return
            # A restarted worker takes up where its predecessor left the ring, to count what it missed.
            consumer = RingConsumer(memory, self.index, wakeups=self.rings.wakeups(ring), resume=self._restarted)
            self.consumers[ring] = consumer
            if self._restarted:
                self._skip_missed(ring, consumer)
            # Producers wake only parked consumers: read (and park on) the new ring too.
            self.loop.call_later(0, self._woken)

    def _skip_missed(self, ring: int, consumer: RingConsumer) -> None:
        """Skip, counted and logged, the records addressed to this portal that no worker of it read
        (from where the predecessor stopped to the tail now). They are not sent: the streams,
        proxies and requests they belong to went with the predecessor, and the record it may have
        died on must not kill this worker too. Overwritten ones (the producer judged the dead
        worker so and wrote on) count as lapped."""
        missed = [0, 0]

        def count(record_type: int, payload) -> None:
            missed[0] += 1
            missed[1] += len(payload)
        try:
            consumer.read_batch(count, 1 << 62)       # up to the tail as it is now, in one pass
        except ConsumerLapped as err:
            self._lapped(ring, err, "while this portal's worker was down")
            return
        if missed[0]:
            self.counters.add_pair("ring_records_missed_while_down", "ring_record_bytes_missed_while_down",
                                   missed[0], missed[1])
            event("ring-missed", f"{missed[0]} records ({missed[1]} bytes) from portal {self._name_of(ring)} "
                                 "came for this portal while its worker was down; not sent",
                  self._name_of(self.index))

    def _lapped(self, ring: int, err: ConsumerLapped, when: str) -> None:
        """Records of `ring` overwritten before this portal read them: counted and logged."""
        self.counters.add("ring_laps")
        self.counters.add("ring_bytes_lapped", err.bytes_lost)
        event("ring-lapped", f"{err.bytes_lost} bytes of records from portal {self._name_of(ring)} were "
                             f"overwritten {when} ({err}); they are lost", self._name_of(self.index))

    def detach(self, ring: int) -> None:
        """Its portal was removed: stop reading its ring and unmap it. The worker maps every ring
        that existed when it was forked; kept, the removed ring's memory would stay allocated for
        as long as the worker runs, and a portal added later at the same index would be read
        from it instead of from its own ring (its records lost)."""
        consumer = self.consumers.pop(ring, None)
        if consumer is not None:
            consumer.close()
        segment = self.rings.segments.get(ring)
        if segment is None or segment.is_owner:       # the supervisor's own mapping is its to remove
            return
        del self.rings.segments[ring]
        try:
            segment.close()
        except BufferError:
            # Another portal of this process still reads it: the mapping goes when that one
            # detaches too and the last view of it is released.
            pass

    def join_local(self, peers: dict[int, "DataPath"]) -> None:
        """The portals running in this process, by ring index: records for them skip the ring."""
        self.local = dict(peers)
        self.local_mask = 0
        for index in self.local:
            self.local_mask |= 1 << index
        self._ring_fds = self._eventfds().union(*(peer._eventfds() for peer in self.local.values()))

    def _eventfds(self) -> frozenset:
        return frozenset({self.wakeup.fileno(), self.producer_wakeup.fileno()})

    # -- early wake-ups ----------------------------------------------------------------------------
    def on_ready(self, fds: list) -> None:
        """The event loop's hook: descriptors are ready. If any is a socket (not a ring's eventfd:
        wake-ups between workers must not set off more of them), wake the portals the last frames
        went to, while the socket's data is read."""
        mask = self._frames_mask
        if not mask:
            return
        ring_fds = self._ring_fds
        for fd in fds:
            if fd not in ring_fds:
                break
        else:
            return
        self._frames_mask = 0
        woken = self.producer.wake(mask)
        if woken:
            self.counters.add("ring_early_wakeups_sent", woken)

    def _wake_early_next(self, mask: int) -> None:
        """Records just went to the portals of `mask`: the next readable socket wakes those in
        other processes early (portals in this one get records handed over, no wake-up)."""
        self._frames_mask |= mask & ~self.local_mask

    # -- writing ---------------------------------------------------------------------------------
    def advert(self, mask: int, advert) -> None:
        self._write([(RECORD_ADVERT, advert.encode(), mask)])

    def eos(self, mask: int, stream_id: int) -> None:
        self._write([(RECORD_EOS, EOS_RECORD.pack(stream_id), mask)])

    def sequence_info(self, mask: int, stream_id: int, sqn: int) -> None:
        """The origin's last sequence number (its TSNI), in order behind the stream's frames."""
        self._write([(RECORD_SEQUENCE_INFO, SEQUENCE_INFO_RECORD.pack(stream_id, sqn), mask)])

    def response(self, portal: int, ipaddr: str, port: int, qidx: int, data) -> None:
        """A response for the requester behind `portal` (the portal its request came in by): one
        record, or, larger than a ring record may be, consecutive pieces that portal puts back
        together (router.portals.egress_records)."""
        self._wake_early_next(1 << portal)
        piece = self.producer.max_payload_length // 4     # well inside the largest record a ring takes
        if len(data) <= piece:
            self._write([(RECORD_RESPONSE, encode_response(ipaddr, port, qidx, data), 1 << portal)])
            return
        view = memoryview(data)
        self._write([(RECORD_RESPONSE_PIECE,
                      encode_response_piece(ipaddr, port, qidx, offset, len(view), view[offset:offset + piece]),
                      1 << portal) for offset in range(0, len(view), piece)])

    def unicast(self, mask: int, frame: bytes) -> None:
        """A unicast immediate message for the portal of `mask`, the next hop toward its domain.
        Requests and their answers come and go as a stream's frames do: the next one is likely
        to go the same way, so it gets the same early wake-ups."""
        self._wake_early_next(mask)
        self._write([(RECORD_UNICAST, frame, mask)])

    def late_join(self, portal: int, stream_id: int, message) -> None:
        """Late-join requests for a stream, to the portal it came in by (its ingress)."""
        self._write([(RECORD_LATE_JOIN, encode_late_join(stream_id, message), 1 << portal)])

    def late_join_answer(self, portal: int, ipaddr: str, port: int, frames) -> None:
        """A source's answers to relayed late-join requests, to the portal they came from: written
        together at the end of this loop turn. One read of the origin's connection brings hundreds
        of them; one ring write each (and a wake-up of the egress worker as often as it had parked
        meanwhile) cost more than the answers themselves."""
        self._answers_due.request()
        self._answers.append((RECORD_LATE_JOIN_ANSWER, encode_late_join_answer(ipaddr, port, frames), 1 << portal))

    def _write_answers(self) -> None:
        answers, self._answers = self._answers, []
        self._write(answers)

    def immediate(self, mask: int, origin_domain: int, has_topic: bool, frame) -> None:
        """One multicast immediate message for the portals of `mask` (router.portals.immediate)."""
        self._write([(RECORD_IMMEDIATE, encode_immediate(origin_domain, has_topic, frame), mask)])

    def frames(self, mask: int, stream_id: int, frames, count: int, longest: int, connection=None,
               record_type: int = RECORD_FRAMES) -> None:
        """One FRAMES (or REQUEST_FRAMES) record; a full ring pauses `connection`.

        `frames` may be a view of the reader's buffer: it is copied once, straight into the ring
        (a claimed record), or into a bytes record that waits in order while the ring is full.
        Portals in this process get the view itself, before this returns."""
        if count >= BURST_FRAMES:
            self.on_burst()
        self._wake_early_next(mask)
        if mask & self.local_mask:
            mask = self._hand_over(mask, record_type, frames, (stream_id, count, longest))
            if not mask:
                return
        if not self.pending:
            length = FRAMES_HEADER.size + len(frames)
            try:
                claim = self.producer.try_claim(length, record_type, mask)
            except RecordTooLarge as err:
                self._too_large(count, length, err)
                return
            if claim is not None:
                payload = claim.payload
                FRAMES_HEADER.pack_into(payload, 0, stream_id, count, longest)
                payload[FRAMES_HEADER.size:] = frames
                self.producer.commit(claim)
                if mask & self.local_mask:
                    self._note_ring(mask)
                return
        self._wait([(record_type, encode_frames(stream_id, frames, count, longest), mask)])
        if connection is not None:
            self._pause(connection)

    def _write(self, records: list) -> bool:
        """Write in order behind anything already waiting; False if some had to wait."""
        if self.local_mask:
            records = self._hand_over_records(records)
            if not records:
                return True
        if self.pending:
            self._wait(records)
            return False
        try:
            written = self.producer.write_batch(records)
        except RecordTooLarge as err:
            written = self._write_one_by_one(records, err)
        if self.local_mask:
            self._note_ring(_destinations(records[:written]))
        if written < len(records):
            self._wait(records[written:])
            return False
        return True

    # -- portals in this process -------------------------------------------------------------------
    def _hand_over(self, mask: int, record_type: int, payload, frames_header=None) -> int:
        """Give the record to each portal of `mask` in this process that can take it now;
        returns the mask of those that must read it from the ring. `frames_header` (stream id,
        count, longest) says `payload` is a FRAMES record's frames without their header."""
        for index, peer in self.local.items():
            bit = 1 << index
            if not mask & bit or not self._can_hand_to(peer, bit):
                continue
            mask &= ~bit
            try:
                if frames_header is None:
                    peer.handler(self.index, record_type, payload)
                else:
                    peer.handler_frames(self.index, record_type, *frames_header, payload)
                if peer.after_batch is not None:
                    peer.after_batch()
            except Exception:        # the egress's fault: it must not make the ingress read again
                peer.counters.add("ring_records_malformed")
                log.exception("portal %d could not take a record from portal %d", index, self.index)
        return mask

    def _hand_over_records(self, records: list) -> list:
        remaining = []
        for record_type, payload, mask in records:
            if mask & self.local_mask:
                mask = self._hand_over(mask, record_type, payload)
            if mask:
                remaining.append((record_type, payload, mask))
        return remaining

    def _can_hand_to(self, peer: "DataPath", bit: int) -> bool:
        """Directly only if nothing older for it is in the ring or waiting for ring space (order),
        and its sends go through (otherwise it holds records back in the ring, as any portal)."""
        if self._waiting_mask & bit:
            return False
        consumer = peer.consumers.get(self.index)
        if consumer is not None and consumer.head < self._ring_for.get(peer.index, 0):
            return False
        return peer.backlog is None or peer.backlog() is None

    def _note_ring(self, mask: int) -> None:
        """Records for portals in this process went into the ring: until each has read past
        them, later ones follow them there."""
        for index in self.local:
            if mask & (1 << index):
                self._ring_for[index] = self.producer.position

    def _wait(self, records: list) -> None:
        """Records wait, in order, behind a full ring. The producer parks at once (the consumer
        that frees space wakes us) and tells the consumers whom everything waiting is for: an
        egress portal holding records back for its own receivers lets go when others wait too."""
        first = not self.pending
        self.pending.extend(records)
        self._waiting_mask = _destinations(records, self._waiting_mask)
        if first:
            self.counters.add("ring_full_events")
            if self.producer.wait_for_space(len(self.pending[0][1]), 0, self._waiting_mask):
                self.loop.call_later(0, self._space_freed)     # room appeared meanwhile
        else:
            self.producer.waiting_for(self._waiting_mask)

    def _write_one_by_one(self, records: list, err: RecordTooLarge) -> int:
        """A record bigger than the ring can carry is dropped and counted, never silently."""
        written = 0
        for record in records:
            try:
                if not self.producer.offer(*record):
                    return written
            except RecordTooLarge:
                self._too_large(1, len(record[1]), err)
            written += 1
        return written

    def _name_of(self, index: int) -> str:
        return self._names.get(index, f"#{index}")

    def _too_large(self, fragments: int, size: int, err: RecordTooLarge) -> None:
        self.counters.add_pair("transport_topic_fragments_dropped_size_error",
                               "transport_topic_fragment_bytes_dropped_size_error", fragments, size)
        event("drops-size-error", f"a {size}-byte record is larger than a ring can carry ({err}); dropped",
              self._name_of(self.index))

    def _pause(self, client) -> None:
        client.pause()
        self.paused[id(client)] = client

    def _space_freed(self) -> None:
        self.producer_wakeup.drain()
        self.producer.unpark()
        while self.pending:
            batch = list(self.pending)
            self.pending.clear()
            try:
                written = self.producer.write_batch(batch)
            except RecordTooLarge as err:
                written = self._write_one_by_one(batch, err)
            if self.local_mask:
                self._note_ring(_destinations(batch[:written]))
            if written < len(batch):
                self.pending.extend(batch[written:])
                self._waiting_mask = _destinations(self.pending)
                if not self.producer.wait_for_space(len(self.pending[0][1]), 0, self._waiting_mask):
                    return
        self._waiting_mask = 0
        for client in self.paused.values():
            client.resume()
        self.paused.clear()

    # -- reading ---------------------------------------------------------------------------------
    def _wakeup_readable(self) -> None:
        """Our eventfd: a record, or an early wake-up ahead of one (see the module's docstring)."""
        consumers = self.consumers.values()
        if not any(consumer.has_records() for consumer in consumers):
            until = time.perf_counter() + EARLY_WAKE_SPIN
            while not any(consumer.has_records() for consumer in consumers):
                if time.perf_counter() >= until:
                    self.counters.add("ring_early_wakeups_idle")
                    break
                # The CPU goes to any task waiting for it (the ingress worker making the record,
                # when the kernel put us on its CPU; the next hop's workers): a wait, not a race.
                os.sched_yield()
        self._woken()

    def _woken(self) -> None:
        if self._recheck_timer is not None:
            self._recheck_timer.cancel()
            self._recheck_timer = None
        # Every ring's consumer here shares one eventfd: it is drained once, after the records
        # went out (a system call off a paced message's way), and before parking again: a
        # producer that writes meanwhile sees no park flag, and prepare_to_park sees its record.
        for consumer in self.consumers.values():
            consumer.unpark(drain=False)
        while True:
            if self._holding_back():
                # Not parked: producers do not wake us for every record; look again shortly.
                self.wakeup.drain()
                self._recheck_timer = self.loop.call_later(HOLD_RECHECK_INTERVAL, self._recheck)
                return
            busy = False
            for ring, consumer in list(self.consumers.items()):
                head = consumer.head
                try:
                    if consumer.lone_record():
                        # Nothing to batch it with (a paced message): it goes out at once, from the ring.
                        consumer.read_batch(self._deliver(ring, True), 1)
                    else:
                        consumer.read_batch(self._deliver(ring, False), READ_LIMIT, READ_BYTES)
                except ConsumerLapped as err:
                    # The rings block rather than overwrite: a consumer is lapped only after the
                    # producer judged it dead (no heartbeat for the timeout, a hung worker) and
                    # went on writing for the others.
                    self._lapped(ring, err, "before they were sent")
                    continue
                if consumer.head - head >= BURST_BYTES:
                    self.on_burst()
                busy |= consumer.has_records()
            if self.after_batch is not None:
                self.after_batch()
            self.wakeup.drain()
            if busy:
                self.loop.call_later(0, self._woken)     # let sockets and timers have a turn
                return
            if all(consumer.prepare_to_park() for consumer in self.consumers.values()):
                return       # parked on every ring: a producer writes our eventfd
            for consumer in self.consumers.values():
                consumer.unpark(drain=False)
        # not reached

    def _deliver(self, ring: int, now: bool):
        """The ring reader's handler for records from `ring`: the portal's, made to count and log
        a record it fails on and go on with the next. Raised out of the ring read, the failure
        would leave the head before the records already handed over, which would go out again
        on the next read, and the failing one again with them, for ever.

        It ends the ring read (returns True) once the portal's sends would block: the records
        after it stay in the ring, held back as the next turn decides (_holding_back), instead
        of going into the portal's queue behind what it could not send, where one that does not
        fit in `<max-queue>` would be dropped. It ends it too once the read has taken
        TURN_BUDGET: the rest is read on the next turn, after the loop's sockets and timers."""
        handler, backlog = self.handler, self.backlog
        deadline, perf_counter = time.perf_counter() + TURN_BUDGET, time.perf_counter
        delivered = 0

        def deliver(record_type: int, payload) -> bool:
            nonlocal delivered
            try:
                if now:
                    handler(ring, record_type, payload, True)
                else:
                    handler(ring, record_type, payload)
            except Exception:
                self.counters.add("ring_records_malformed")
                log.exception("portal %d could not take a record from portal %d", self.index, ring)
            delivered += 1
            if not delivered % TURN_CHECK and perf_counter() > deadline:
                return True                     # the turn's time is up: the rest on the next
            return backlog is not None and not self._released and backlog() is not None
        return deliver

    def _recheck(self) -> None:
        self._recheck_timer = None
        self._woken()

    def _holding_back(self) -> bool:
        """Leave the records in the rings for now? Only while this portal's sends would block,
        its receivers are still taking data, and no ring's producer waits to write a record for
        another portal too; see the module's docstring."""
        if self.backlog is None:
            return False
        since = self.backlog()
        if since is None:
            self._released = self._holding = False
            return False
        if self._released:
            return False
        others = ~(1 << self.index)
        stuck = time.monotonic() - since >= STALL_TIMEOUT
        if stuck or any(c.producer_waiting_for() & others for c in self.consumers.values()):
            # Holding on would stall the router for everyone: read on, and the portal's own
            # `<max-queue>` drops what its receivers cannot take (the DRO's behaviour), until
            # its queues have drained.
            self._released = True
            self.counters.add("egress_backlog_releases")
            return False
        if not self._holding:
            self._holding = True
            self.counters.add("egress_backlog_holds")
        return True

    def heartbeat(self) -> None:
        for consumer in self.consumers.values():
            consumer.heartbeat()
        if self.pending:
            self._space_freed()

    def close(self) -> None:
        self._answers_due.cancel()
        self._answers.clear()
        if self._recheck_timer is not None:
            self._recheck_timer.cancel()
            self._recheck_timer = None
        self.loop.remove_reader(self.wakeup.fileno())
        self.loop.remove_reader(self.producer_wakeup.fileno())
        for consumer in self.consumers.values():
            consumer.close()
        self.consumers.clear()
        self.producer.close()


def _nothing() -> None:
    pass


def _destinations(records, mask: int = 0) -> int:
    """The union of the records' destination masks (and `mask`)."""
    for record in records:
        mask |= record[2]
    return mask
