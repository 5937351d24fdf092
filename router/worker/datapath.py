"""The data path between workers: one outbound ring per worker, read by every other worker.

`RingSet` is the supervisor's: it creates each portal's ring segment and, before any fork, the
wakeup eventfds of every slot (so a portal added by a reload shares them with workers forked
earlier). `DataPath` is a worker's view: it writes stream records into its own ring and reads the
records addressed to it from the others, sleeping on one eventfd for all of them.

Flow control (DESIGN.md §2): when the outbound ring is full, the records that did not fit wait in
order and the ingress connections that produced them stop being read, so TCP pushes back on the
sources; nothing is dropped. Readers drain promptly; slowness downstream is the egress portal's
`<max-queue>` business, not the ring's.
"""
from __future__ import annotations

import logging
import os
from collections import deque
from dataclasses import dataclass

from router.ipc import layout
from router.ipc.ring import ConsumerLapped, OverflowPolicy, RecordTooLarge, init_ring
from router.ipc.ring_consumer import RingConsumer
from router.ipc.ring_producer import RingProducer
from router.ipc.shm import SharedSegment, segment_name
from router.ipc.wakeup import EventfdWakeup, RingWakeups
from router.worker.records import EOS_RECORD, RECORD_ADVERT, RECORD_EOS, RECORD_FRAMES

log = logging.getLogger(__name__)

MAX_PORTALS = 16                       # consumer slots per ring: the producer scans each of them
RING_CAPACITY = 8 * 1024 * 1024
RING_HEARTBEAT_TIMEOUT = 2.0
READ_LIMIT = 4096                      # records per ring per turn, so one busy ring cannot starve the loop



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
    def __init__(self, spec: DataPathSpec, index: int, loop, counters):
        self.rings = spec.rings
        self.index = index
        self.loop = loop
        self.counters = counters
        self.handler = None                    # handler(ring index, record type, payload view)
        self.after_batch = None                # called when the rings have been drained (flush point)
        self.producer = RingProducer(self._memory(index), wakeups=self.rings.wakeups(index))
        self.consumers: dict[int, RingConsumer] = {}
        for ring in spec.portal_indexes.values():
            if ring != index:
                self.attach(ring)
        self.pending: deque[tuple[int, bytes, int]] = deque()
        self.paused: dict[int, object] = {}    # id -> ingress connection waiting for ring space
        self.wakeup = self.rings.consumer_wakeups[index]
        self.producer_wakeup = self.rings.producer_wakeups[index]
        loop.add_reader(self.wakeup.fileno(), self._woken)
        loop.add_reader(self.producer_wakeup.fileno(), self._space_freed)
        self._parked = False
        loop.call_later(0, self._woken)

    def _memory(self, ring: int) -> memoryview:
        segment = self.rings.segments.get(ring)
        if segment is None:                     # created after this worker was forked
            segment = SharedSegment.attach(self.rings.name(ring))
            self.rings.segments[ring] = segment
        return segment.memory

    def attach(self, ring: int) -> None:
        if ring != self.index and ring not in self.consumers:
            self.consumers[ring] = RingConsumer(self._memory(ring), self.index, wakeups=self.rings.wakeups(ring))
            # Producers wake only parked consumers: read (and park on) the new ring too.
            self.loop.call_later(0, self._woken)

    def detach(self, ring: int) -> None:
        consumer = self.consumers.pop(ring, None)
        if consumer is not None:
            consumer.close()

    # -- writing ---------------------------------------------------------------------------------
    def advert(self, mask: int, advert) -> None:
        self._write([(RECORD_ADVERT, advert.encode(), mask)])

    def eos(self, mask: int, stream_id: int) -> None:
        self._write([(RECORD_EOS, EOS_RECORD.pack(stream_id), mask)])

    def frames(self, mask: int, record: bytes, connection=None) -> None:
        """One FRAMES record (router.worker.records.encode_frames); a full ring pauses `connection`."""
        if not self._write([(RECORD_FRAMES, record, mask)]) and connection is not None:
            self._pause(connection)

    def _write(self, records: list) -> bool:
        """Write in order behind anything already waiting; False if some had to wait."""
        if self.pending:
            self.pending.extend(records)
            return False
        try:
            written = self.producer.write_batch(records)
        except RecordTooLarge as err:
            written = self._write_one_by_one(records, err)
        if written < len(records):
            self.pending.extend(records[written:])
            self.counters.add("ring_full_events")
            return False
        return True

    def _write_one_by_one(self, records: list, err: RecordTooLarge) -> int:
        """A record bigger than the ring can carry is dropped and counted, never silently."""
        written = 0
        for record in records:
            try:
                if not self.producer.offer(*record):
                    return written
            except RecordTooLarge:
                self.counters.add_pair("transport_topic_fragments_dropped_size_error",
                                       "transport_topic_fragment_bytes_dropped_size_error", 1, len(record[1]))
                log.warning("dropped a %d-byte record: %s", len(record[1]), err)
            written += 1
        return written

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
            if written < len(batch):
                self.pending.extend(batch[written:])
                if not self.producer.wait_for_space(len(self.pending[0][1]), 0):
                    return
        for client in self.paused.values():
            client.resume()
        self.paused.clear()

    # -- reading ---------------------------------------------------------------------------------
    def _woken(self) -> None:
        for consumer in self.consumers.values():
            consumer.unpark()           # also drains the shared eventfd
        handler = self.handler
        while True:
            busy = False
            for ring, consumer in list(self.consumers.items()):
                try:
                    delivered = consumer.read_batch(lambda t, p, r=ring: handler(r, t, p), READ_LIMIT)
                except ConsumerLapped as err:
                    log.error("portal %d lost %d bytes of ring %d: %s", self.index, err.bytes_lost, ring, err)
                    self.counters.add("ring_records_malformed")
                    continue
                busy |= delivered == READ_LIMIT
            if self.after_batch is not None:
                self.after_batch()
            if busy:
                self.loop.call_later(0, self._woken)     # let sockets and timers have a turn
                return
            if all(consumer.prepare_to_park() for consumer in self.consumers.values()):
                return       # parked on every ring: a producer writes our eventfd
            for consumer in self.consumers.values():
                consumer.unpark()
        # not reached

    def heartbeat(self) -> None:
        for consumer in self.consumers.values():
            consumer.heartbeat()
        if self.pending:
            self._space_freed()

    def close(self) -> None:
        self.loop.remove_reader(self.wakeup.fileno())
        self.loop.remove_reader(self.producer_wakeup.fileno())
        for consumer in self.consumers.values():
            consumer.close()
        self.consumers.clear()
        self.producer.close()
