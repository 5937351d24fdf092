"""A lock-free single-producer, many-consumer ring in shared memory, with write-once fan-out.

The producer appends records (``layout`` draws one); each record carries a 64-bit destination
mask and consumer ``i`` delivers only records whose mask has bit ``i``, but walks past all of them.
Every shared integer has exactly one writer (the tail and counters: the producer; a head, heartbeat
and park flag: their consumer), so no compare-and-swap is needed; ``ordering`` decides how they are
loaded and stored.

Protocol
--------
- Producer: claim space, write payload, then publish the tail once per commit or per batch.
  Consumers never look past the tail, so they never see a half-written record.
- Consumer: load the tail, deliver its records between its head and the tail to a handler as
  memoryviews into the ring, then store its head once per batch. **A payload view is valid only
  until the handler returns** (the head advances right after the batch, and the producer may then
  reuse the bytes): copy what you keep.
- Flow control: the producer never writes past ``min(head of live consumers) + capacity``. A consumer
  is live while attached (heartbeat slot non-zero) and its heartbeat is younger than the ring's
  ``heartbeat_timeout``. A detached or dead consumer no longer holds the producer back.
- Torn data: before the producer writes under a new limit it publishes that limit as the *tail
  intent*; a consumer whose head is more than a capacity behind it may have been overwritten.
  ``read_batch`` checks the intent before delivering (a consumer that was skipped never starts
  reading overwritten bytes) and again after (a handler that ran longer than the heartbeat timeout
  learns its views went stale). Either way it raises ``ConsumerLapped`` with the bytes lost, after
  moving the head to the tail so that the next call continues cleanly.
- Wakeups (optional ``RingWakeups``): a consumer with nothing to read parks (``wait``) and the
  producer wakes it after publishing records addressed to it; a producer waiting for space parks
  in ``claim`` and consumers wake it after advancing their heads.
"""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from . import layout
from .ordering import full_fence, int64_slots, load_acquire, release_slots, store_release
from .wakeup import RingWakeups

_monotonic_ns = time.monotonic_ns
_pack_header_into = layout.RECORD_HEADER.pack_into
_pack_header = layout.RECORD_HEADER.pack
_unpack_header_from = layout.RECORD_HEADER.unpack_from
_HEADER = layout.HEADER_LENGTH
_ALIGN_UP = layout.HEADER_LENGTH + layout.RECORD_ALIGNMENT - 1  # (n + _ALIGN_UP) & -ALIGN = record size
_ALIGN_MASK = -layout.RECORD_ALIGNMENT
_ALIGNMENT_FILL = [bytes(k) for k in range(layout.RECORD_ALIGNMENT)]
_DIRECT_COPY_THRESHOLD = 1024  # above this a payload is copied straight into the ring, not joined first


def _slot(offset: int) -> int:
    return offset // 8


_TAIL = _slot(layout.TAIL_OFFSET)
_TAIL_INTENT = _slot(layout.TAIL_INTENT_OFFSET)
_PRODUCER_HEARTBEAT = _slot(layout.PRODUCER_HEARTBEAT_OFFSET)
_PRODUCER_PARK = _slot(layout.PRODUCER_PARK_OFFSET)
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


# The two halves live in their own modules (size); the ring's public API is re-exported here.
from .ring_producer import RingProducer  # noqa: E402
from .ring_consumer import RingConsumer  # noqa: E402

__all__ = [
    "Claim",
    "ConsumerLapped",
    "OverflowPolicy",
    "RecordTooLarge",
    "RingConsumer",
    "RingCounters",
    "RingProducer",
    "init_ring",
    "read_counters",
]
