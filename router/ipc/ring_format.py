"""A ring as laid out in a shared segment: formatting it (``init_ring``), attaching to it
(``_RingView``, the part producer and consumer share), and the types both ends use.

The protocol itself is described in ``ring``; the byte layout in ``layout``.
"""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Iterable

from . import layout
from .ordering import int64_slots, load_acquire, release_slots, store_release

_monotonic_ns = time.monotonic_ns
_pack_header_into = layout.RECORD_HEADER.pack_into
_pack_header = layout.RECORD_HEADER.pack
_unpack_header_from = layout.RECORD_HEADER.unpack_from
_HEADER = layout.HEADER_LENGTH
_ALIGN_UP = layout.HEADER_LENGTH + layout.RECORD_ALIGNMENT - 1  # (n + _ALIGN_UP) & -ALIGN = record size
_ALIGN_MASK = -layout.RECORD_ALIGNMENT
_ALIGNMENT_FILL = [bytes(k) for k in range(layout.RECORD_ALIGNMENT)]
_DIRECT_COPY_THRESHOLD = 32 * 1024  # larger payloads are copied straight into the ring, not joined first (measured)


def _slot(offset: int) -> int:
    return offset // 8


_TAIL = _slot(layout.TAIL_OFFSET)
_TAIL_INTENT = _slot(layout.TAIL_INTENT_OFFSET)
_PRODUCER_HEARTBEAT = _slot(layout.PRODUCER_HEARTBEAT_OFFSET)
_PRODUCER_PARK = _slot(layout.PRODUCER_PARK_OFFSET)
_PRODUCER_WAITING_FOR = _slot(layout.PRODUCER_WAITING_FOR_OFFSET)
_RECORDS_WRITTEN = _slot(layout.RECORDS_WRITTEN_OFFSET)
_BYTES_WRITTEN = _slot(layout.BYTES_WRITTEN_OFFSET)
_RECORDS_DROPPED = _slot(layout.RECORDS_DROPPED_OFFSET)
_BLOCKED_EVENTS = _slot(layout.BLOCKED_EVENTS_OFFSET)
_EVICTED_CONSUMERS = _slot(layout.EVICTED_CONSUMERS_OFFSET)


class OverflowPolicy(enum.IntEnum):
    BLOCK = 0  # a full ring refuses the claim; the writer stops reading its sockets
    DROP = 1  # a full ring drops the record and counts it


class RecordTooLarge(ValueError):
    """A payload longer than the ring's ``max_payload_length`` (an "oversized fragment")."""


class ConsumerLapped(Exception):
    """The producer overwrote records this consumer had not read; its head now is the tail."""

    def __init__(self, consumer: int, bytes_lost: int, views_stale: bool):
        self.consumer = consumer
        self.bytes_lost = bytes_lost
        self.views_stale = views_stale
        when = "while its handler held them" if views_stale else "before it read them"
        super().__init__(f"consumer {consumer} lost {bytes_lost} bytes of records, overwritten {when}")


class MalformedRecord(ConsumerLapped):
    """A record's header said it runs past what the producer published (memory written by
    someone else); the consumer's head now is the tail."""

    def __init__(self, consumer: int, bytes_lost: int, position: int):
        super().__init__(consumer, bytes_lost, views_stale=False)
        self.args = (f"consumer {consumer} skipped {bytes_lost} bytes from position {position}: a record there "
                     f"runs past what the producer published",)


@dataclass(slots=True)
class Claim:
    """Space for one record; write the payload into ``payload``, then commit or abort."""

    position: int
    index: int
    length: int
    dest_mask: int
    payload: memoryview


@dataclass(frozen=True)
class RingCounters:
    records_written: int
    bytes_written: int
    records_dropped: int
    blocked_events: int
    evicted_consumers: int


def init_ring(
    memory: memoryview,
    capacity: int,
    *,
    consumer_slots: int = layout.MAX_CONSUMERS,
    overflow: OverflowPolicy = OverflowPolicy.BLOCK,
    heartbeat_timeout: float = 2.0,
    owner_pid: int = 0,
) -> None:
    """Format a zero-filled segment of ``layout.segment_size(capacity)`` bytes as an empty ring.

    ``consumer_slots`` is how many consumer indices are in use (the producer scans that many).
    """
    if len(memory) < layout.segment_size(capacity):
        raise ValueError(f"segment of {len(memory)} bytes is smaller than a ring of {capacity} needs")
    if not 1 <= consumer_slots <= layout.MAX_CONSUMERS:
        raise ValueError(f"consumer_slots must be 1..{layout.MAX_CONSUMERS}, got {consumer_slots}")
    trailer = memory[capacity : capacity + layout.TRAILER_LENGTH]
    trailer[:] = bytes(layout.TRAILER_LENGTH)
    slots = int64_slots(trailer)
    values = {
        layout.CAPACITY_OFFSET: capacity,
        layout.CONSUMER_SLOTS_OFFSET: consumer_slots,
        layout.OVERFLOW_POLICY_OFFSET: int(OverflowPolicy(overflow)),
        layout.HEARTBEAT_TIMEOUT_NS_OFFSET: int(heartbeat_timeout * 1e9),
        layout.OWNER_PID_OFFSET: owner_pid,
        layout.MAGIC_OFFSET: layout.LAYOUT_MAGIC,  # last: an attacher that sees it sees the rest
    }
    for offset, value in values.items():
        store_release(slots, _slot(offset), value)
    release_slots(slots)
    trailer.release()


class _RingView:
    """What producer and consumer share: the data view, the trailer slots, the metadata."""

    def __init__(self, memory: memoryview):
        memory = memory.cast("B")
        capacity = _capacity_of(memory)
        self.capacity = capacity
        self.max_payload_length = layout.max_payload_length(capacity)
        self._data = memory[:capacity]
        self._slots = int64_slots(memory[capacity : capacity + layout.TRAILER_LENGTH])
        slots = self._slots
        self.consumer_slots = load_acquire(slots, _slot(layout.CONSUMER_SLOTS_OFFSET))
        self.overflow = OverflowPolicy(load_acquire(slots, _slot(layout.OVERFLOW_POLICY_OFFSET)))
        self.heartbeat_timeout_ns = load_acquire(slots, _slot(layout.HEARTBEAT_TIMEOUT_NS_OFFSET))
        memory.release()

    def counters(self) -> RingCounters:
        return read_counters_from_slots(self._slots)

    def close(self) -> None:
        """Release this object's views of the segment (required before the segment unmaps)."""
        if self._data is not None:
            self._data.release()
            release_slots(self._slots)
            self._data = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _capacity_of(memory: memoryview) -> int:
    for capacity in _candidate_capacities(len(memory)):
        slots = int64_slots(memory[capacity : capacity + layout.TRAILER_LENGTH])
        try:
            if (
                load_acquire(slots, _slot(layout.MAGIC_OFFSET)) == layout.LAYOUT_MAGIC
                and load_acquire(slots, _slot(layout.CAPACITY_OFFSET)) == capacity
            ):
                return capacity
        finally:
            release_slots(slots)
    raise ValueError(f"segment of {len(memory)} bytes holds no initialised ring (init_ring first)")


def _candidate_capacities(segment_length: int) -> Iterable[int]:
    capacity = layout.MIN_CAPACITY
    while capacity + layout.TRAILER_LENGTH <= min(segment_length, layout.MAX_CAPACITY + layout.TRAILER_LENGTH):
        yield capacity
        capacity <<= 1


def read_counters(memory: memoryview) -> RingCounters:
    """The producer's counters of the ring in ``memory``, readable from any process (monitoring)."""
    view = _RingView(memory)
    try:
        return view.counters()
    finally:
        view.close()


def read_counters_from_slots(slots) -> RingCounters:
    return RingCounters(
        records_written=load_acquire(slots, _RECORDS_WRITTEN),
        bytes_written=load_acquire(slots, _BYTES_WRITTEN),
        records_dropped=load_acquire(slots, _RECORDS_DROPPED),
        blocked_events=load_acquire(slots, _BLOCKED_EVENTS),
        evicted_consumers=load_acquire(slots, _EVICTED_CONSUMERS),
    )
