"""The producer half of a ring (the protocol is described in ``ring``): claims, batches, flow control,
skipping dead consumers, counters, and waking parked consumers.

Everything here runs in the one producer process, so the producer keeps private copies of what it
alone writes (position, counters) and stores them into the trailer when it publishes.
"""
from __future__ import annotations

import time
from typing import Iterable

from . import layout
from .ordering import full_fence, load_acquire, store_release
from .ring_format import (
    _ALIGN_MASK,
    _ALIGN_UP,
    _ALIGNMENT_FILL,
    _BLOCKED_EVENTS,
    _BYTES_WRITTEN,
    _DIRECT_COPY_THRESHOLD,
    _EVICTED_CONSUMERS,
    _HEADER,
    _PRODUCER_HEARTBEAT,
    _PRODUCER_PARK,
    _PRODUCER_WAITING_FOR,
    _RECORDS_DROPPED,
    _RECORDS_WRITTEN,
    _TAIL,
    _TAIL_INTENT,
    Claim,
    OverflowPolicy,
    RecordTooLarge,
    _monotonic_ns,
    _pack_header,
    _pack_header_into,
    _RingView,
    _slot,
)
from .wakeup import RingWakeups

_ALL_CONSUMERS = (1 << layout.MAX_CONSUMERS) - 1
_FILL_MASK = layout.RECORD_ALIGNMENT - 1


class RingProducer(_RingView):
    """The single writer of a ring. Not thread-safe; one per ring at a time."""

    def __init__(self, memory: memoryview, *, wakeups: RingWakeups | None = None):
        super().__init__(memory)
        slots = self._slots
        # A restarted producer continues after the last published record.
        self._position = load_acquire(slots, _TAIL)
        self._intent = load_acquire(slots, _TAIL_INTENT)
        self._limit = -1  # unknown: the first claim computes it
        self._records_written = load_acquire(slots, _RECORDS_WRITTEN)
        self._bytes_written = load_acquire(slots, _BYTES_WRITTEN)
        self._records_dropped = load_acquire(slots, _RECORDS_DROPPED)
        self._blocked_events = load_acquire(slots, _BLOCKED_EVENTS)
        self._evicted_consumers = load_acquire(slots, _EVICTED_CONSUMERS)
        self._blocked = False
        self._claim: Claim | None = None
        # Above this record size write_batch copies straight into the ring (and checks the size).
        self._direct_copy_size = min(_DIRECT_COPY_THRESHOLD, self.capacity // 2)
        self._consumers = [
            (
                consumer,
                _slot(layout.consumer_head_offset(consumer)),
                _slot(layout.consumer_heartbeat_offset(consumer)),
                _slot(layout.consumer_park_offset(consumer)),
                1 << consumer,
            )
            for consumer in range(self.consumer_slots)
        ]
        self._evicted_heartbeat = [0] * self.consumer_slots
        self._woken_epochs = [0] * self.consumer_slots
        self._wakeups = wakeups
        # Epochs continue across restarts (consumers remember the last epoch they woke).
        self._park_epoch = _monotonic_ns()
        store_release(slots, _PRODUCER_PARK, 0)
        store_release(slots, _PRODUCER_HEARTBEAT, _monotonic_ns())

    # -- single records --------------------------------------------------------------------

    def live_consumers(self) -> int:
        """How many consumers are attached and alive now (heartbeat set and within the timeout)."""
        slots, now, live = self._slots, _monotonic_ns(), 0
        for _, _, heartbeat_slot, _, _ in self._consumers:
            heartbeat = load_acquire(slots, heartbeat_slot)
            if heartbeat and now - heartbeat <= self.heartbeat_timeout_ns:
                live += 1
        return live

    @property
    def position(self) -> int:
        """Where the next record goes: everything written so far ends before it."""
        return self._position

    def try_claim(self, length: int, record_type: int, dest_mask: int) -> Claim | None:
        """Reserve a record with a writable, contiguous ``payload`` view, or None if full."""
        if self._claim is not None:
            raise RuntimeError("commit or abort the outstanding claim before claiming again")
        if not 0 <= length <= self.max_payload_length:
            raise self._too_large(length)
        size = (length + _ALIGN_UP) & _ALIGN_MASK
        position, index, padding = self._placement(size)
        if position + padding + size > self._limit and not self._make_room(position + padding + size):
            return None
        if padding:
            self._write_padding(index, padding)
            position += padding
            index = 0
        _pack_header_into(self._data, index, length, record_type, dest_mask)
        payload = self._data[index + _HEADER : index + _HEADER + length]
        self._claim = Claim(position, index, length, dest_mask, payload)
        self._position = position + size
        return self._claim

    def claim(
        self, length: int, record_type: int, dest_mask: int, deadline: float | None = None
    ) -> Claim | None:
        """Like ``try_claim`` but, under the block policy, sleeps until there is room or until
        ``deadline`` (a ``time.monotonic()`` value; None waits forever) and then returns None."""
        while True:
            claim = self.try_claim(length, record_type, dest_mask)
            if claim is not None or self.overflow is OverflowPolicy.DROP:
                return claim
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            self.wait_for_space(length, remaining)

    def commit(self, claim: Claim) -> None:
        """Publish the claimed record to consumers."""
        self._end_claim(claim)
        self._records_written += 1
        self._bytes_written += claim.length
        self._publish(claim.dest_mask)

    def abort(self, claim: Claim) -> None:
        """Give the claimed space up: it becomes a padding record that no consumer delivers."""
        self._end_claim(claim)
        _pack_header_into(self._data, claim.index, claim.length, layout.PADDING_TYPE, 0)
        self._publish(0)

    def offer(self, record_type: int, payload, dest_mask: int) -> bool:
        """Copy one record in and publish it. False if the ring is full (or it was dropped)."""
        if self._claim is not None:
            raise RuntimeError("commit or abort the outstanding claim before offering")
        if not self._write_one(record_type, payload, dest_mask):
            return False
        self._publish(dest_mask)
        return True

    # -- batches ------------------------------------------------------------------------------

    def write_batch(self, records: Iterable[tuple[int, object, int]]) -> int:
        """Append ``(record_type, payload, dest_mask)`` records in order; publish once.

        Returns how many records were written. Under the block policy it stops at the first record
        that does not fit (keep the rest; ``wait_for_space`` sleeps until it would). Under the
        drop policy records that do not fit are dropped and counted, and later ones still written.
        A batch that raises (RecordTooLarge, a bad mask...) is rejected whole: nothing of it is
        published, so the caller may retry its records one by one without duplicates.
        Small payloads are joined with their headers and copied into the ring in one slice
        assignment per run: per-record work is a handful of bytecodes.
        """
        if self._claim is not None:
            raise RuntimeError("commit or abort the outstanding claim before writing a batch")
        data, capacity = self._data, self.capacity
        index_mask = capacity - 1
        fill, fill_mask = _ALIGNMENT_FILL, _FILL_MASK
        pack_header, align_up, align_mask = _pack_header, _ALIGN_UP, _ALIGN_MASK
        direct_copy_size, max_payload_length = self._direct_copy_size, self.max_payload_length
        rollback = (self._position, self._records_written, self._bytes_written)
        written = dest_union = 0
        parts: list = []  # the joined run: header, payload, alignment fill, header, ...
        append = parts.append
        try:
            # The run starts at data index run_start (ring position run_position); index is where
            # the next record goes; up to run_end nothing can wrap or pass the flow-control limit.
            run_position = self._position
            run_start = index = run_position & index_mask
            run_end = min(capacity, index + self._limit - run_position)
            for record_type, payload, dest_mask in records:  # the hot loop: locals only
                length = len(payload)
                size = (length + align_up) & align_mask
                end = index + size
                if end <= run_end and size <= direct_copy_size:
                    append(pack_header(length, record_type, dest_mask))
                    append(payload)
                    append(fill[-length & fill_mask])
                    index = end
                    dest_union |= dest_mask
                    continue
                if parts:
                    written += self._copy_run(parts, run_start, index)
                    run_position += index - run_start
                    run_start = index
                if end <= run_end and length <= max_payload_length:
                    # A big record that fits: straight into the ring, no join.
                    _pack_header_into(data, index, length, record_type, dest_mask)
                    data[index + _HEADER : index + _HEADER + length] = payload
                    self._records_written += 1
                    self._bytes_written += length
                    written += 1
                    dest_union |= dest_mask
                    run_position += size
                    run_start = index = end
                    continue
                # The wrap, the flow-control limit or an oversized record: the careful path.
                self._position = run_position
                if self._write_one(record_type, payload, dest_mask):
                    written += 1
                    dest_union |= dest_mask
                elif self.overflow is OverflowPolicy.BLOCK:
                    break
                run_position = self._position
                run_start = index = run_position & index_mask
                run_end = min(capacity, index + self._limit - run_position)
            if parts:
                written += self._copy_run(parts, run_start, index)
            self._position = run_position + (index - run_start)
        except BaseException:
            # Nothing was published yet: forget what was written past the tail.
            self._position, self._records_written, self._bytes_written = rollback
            raise
        if written:
            self._publish(dest_union)
        return written

    def wait_for_space(self, length: int, timeout: float | None, dest_mask: int = _ALL_CONSUMERS) -> bool:
        """Sleep until a record of ``length`` payload bytes fits (True) or ``timeout`` s pass (False).

        On False the producer stays parked: the next consumer that frees space makes the producer
        wakeup readable. So an event loop calls ``wait_for_space(n, 0)``, and if it is False waits
        for ``wakeups.producer.fileno()``, then calls ``unpark()`` and writes again. ``dest_mask``
        (whom the waiting record is for) is published while parked: a consumer that lags on purpose
        learns whether it holds up records for others (``RingConsumer.producer_waiting_for``).
        """
        size = (length + _ALIGN_UP) & _ALIGN_MASK
        deadline = None if timeout is None else time.monotonic() + timeout
        recheck_interval = self.heartbeat_timeout_ns / 4e9  # dead consumers are noticed by polling
        self.waiting_for(dest_mask)
        while True:
            position, _, padding = self._placement(size)
            self._park_epoch += 1
            store_release(self._slots, _PRODUCER_PARK, self._park_epoch)
            full_fence()  # the park flag must be visible before we look at the heads again
            if self._refresh_limit(position + padding + size):
                store_release(self._slots, _PRODUCER_PARK, 0)
                self._blocked = False        # room again: the next time the ring is full is a new event
                return True
            if self._wakeups is not None:
                self._wake_parked_consumers(0, force=True)
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            pause = recheck_interval if remaining is None else min(remaining, recheck_interval)
            if self._wakeups is not None:
                self._wakeups.producer.wait(pause)
            else:
                time.sleep(min(pause, 0.001))

    def waiting_for(self, dest_mask: int) -> None:
        """Publish whom the records we wait to write are for (more may join while we are parked)."""
        mask = dest_mask & _ALL_CONSUMERS
        store_release(self._slots, _PRODUCER_WAITING_FOR, mask - (1 << 64) if mask >> 63 else mask)  # int64 slot

    def unpark(self) -> None:
        """Stop waiting for space (after ``wait_for_space`` returned False): clear flag and wakeup."""
        store_release(self._slots, _PRODUCER_PARK, 0)
        if self._wakeups is not None:
            self._wakeups.producer.drain()

    # -- internals -----------------------------------------------------------------------------

    def _placement(self, size: int) -> tuple[int, int, int]:
        """(position, index, padding needed before a record of ``size`` so it does not wrap)."""
        position = self._position
        index = position & (self.capacity - 1)
        padding = self.capacity - index if index + size > self.capacity else 0
        return position, index, padding

    def _write_one(self, record_type: int, payload, dest_mask: int) -> bool:
        length = len(payload)
        if length > self.max_payload_length:
            raise self._too_large(length)
        size = (length + _ALIGN_UP) & _ALIGN_MASK
        position = self._position
        index = position & (self.capacity - 1)
        padding = self.capacity - index if index + size > self.capacity else 0
        if position + padding + size > self._limit and not self._make_room(position + padding + size):
            return False
        if padding:
            self._write_padding(index, padding)
            index = 0
        data = self._data
        _pack_header_into(data, index, length, record_type, dest_mask)
        data[index + _HEADER : index + _HEADER + length] = payload
        self._position = position + padding + size
        self._records_written += 1
        self._bytes_written += length
        return True

    def _copy_run(self, parts: list, start: int, end: int) -> int:
        """Copy a joined run of records into the ring; returns how many records it held."""
        self._data[start:end] = b"".join(parts)
        count = len(parts) // 3
        self._records_written += count
        self._bytes_written += sum(map(len, parts[1::3]))
        parts.clear()
        return count

    def _write_padding(self, index: int, padding: int) -> None:
        _pack_header_into(self._data, index, padding - _HEADER, layout.PADDING_TYPE, 0)

    def _end_claim(self, claim: Claim) -> None:
        if claim is not self._claim:
            raise RuntimeError("this claim is not the producer's outstanding claim")
        claim.payload.release()
        self._claim = None

    def _publish(self, dest_union: int) -> None:
        slots = self._slots
        store_release(slots, _TAIL, self._position)
        store_release(slots, _RECORDS_WRITTEN, self._records_written)
        store_release(slots, _BYTES_WRITTEN, self._bytes_written)
        store_release(slots, _PRODUCER_HEARTBEAT, _monotonic_ns())
        if self._wakeups is not None:
            self._wake_parked_consumers(dest_union)

    def _make_room(self, end: int) -> bool:
        """Slow path of every claim: recompute the limit; on failure apply the overflow policy."""
        if self._refresh_limit(end):
            self._blocked = False
            return True
        if self._wakeups is not None:
            # A parked consumer that nothing was addressed to may be the one holding us back.
            self._wake_parked_consumers(0, force=True)
        if self.overflow is OverflowPolicy.DROP:
            self._records_dropped += 1
            store_release(self._slots, _RECORDS_DROPPED, self._records_dropped)
        elif not self._blocked:
            self._blocked = True
            self._blocked_events += 1
            store_release(self._slots, _BLOCKED_EVENTS, self._blocked_events)
        return False

    def _refresh_limit(self, end: int) -> bool:
        """Recompute how far we may write from the heads of live consumers; True if ``end`` fits.

        A consumer is skipped if detached (heartbeat 0) or dead (heartbeat older than the timeout).
        The new limit is published as the tail intent before anything is written under it.
        """
        slots = self._slots
        now = _monotonic_ns()
        lowest = self._position
        for consumer, head_slot, heartbeat_slot, _, _ in self._consumers:
            heartbeat = load_acquire(slots, heartbeat_slot)
            if heartbeat == 0:
                continue
            head = load_acquire(slots, head_slot)
            if head >= lowest:
                continue
            if now - heartbeat > self.heartbeat_timeout_ns:
                if head + self.capacity < end:
                    self._note_eviction(consumer, heartbeat)
                continue
            lowest = head
        self._limit = lowest + self.capacity
        if self._limit > self._intent:
            self._intent = self._limit
            store_release(slots, _TAIL_INTENT, self._intent)
        return end <= self._limit

    def _note_eviction(self, consumer: int, heartbeat: int) -> None:
        if self._evicted_heartbeat[consumer] == heartbeat:
            return  # already counted for this (dead) incarnation
        self._evicted_heartbeat[consumer] = heartbeat
        slot = _slot(layout.consumer_evictions_offset(consumer))
        store_release(self._slots, slot, load_acquire(self._slots, slot) + 1)
        self._evicted_consumers += 1
        store_release(self._slots, _EVICTED_CONSUMERS, self._evicted_consumers)

    def wake(self, dest_mask: int) -> int:
        """Wake the parked consumers of `dest_mask` now, ahead of a record for them (a reader can
        start waking while the record is still being made); each is woken once per park, so the
        record's own commit does not wake it again. Returns how many were woken."""
        if self._wakeups is None:
            return 0
        return self._wake_parked_consumers(dest_mask)

    def _wake_parked_consumers(self, dest_union: int, force: bool = False) -> int:
        """Wake each parked consumer that has records addressed to it, or lags by half the ring,
        or (``force``: the ring is full) has anything published left to read, once per park: a
        wakeup costs a syscall. One that has read everything cannot be what holds us back."""
        full_fence()  # our tail store must be visible before we read park flags (Dekker)
        slots = self._slots
        woken = self._woken_epochs
        wakeups = self._wakeups.consumers
        half = self.capacity // 2
        published = load_acquire(slots, _TAIL) if force else 0
        count = 0
        for consumer, head_slot, _, park_slot, bit in self._consumers:
            epoch = load_acquire(slots, park_slot)
            if epoch and epoch != woken[consumer]:
                head = load_acquire(slots, head_slot)
                if dest_union & bit or self._position - head > half or head < published:
                    woken[consumer] = epoch
                    wakeups[consumer].wake()
                    count += 1
        return count

    def _too_large(self, length: int) -> RecordTooLarge:
        return RecordTooLarge(
            f"record payload of {length} bytes exceeds this ring's maximum of "
            f"{self.max_payload_length} bytes (half the {self.capacity}-byte ring less the header)"
        )
