"""The consumer half of a ring (the protocol is described in ``ring``): batch reads filtered by the
destination mask, one head store per batch, lap detection, heartbeats and parking.

Using it from an event loop::

    if consumer.read_batch(handle) == 0 and consumer.prepare_to_park():
        ...sleep until consumer.fileno() is readable, at most consumer.heartbeat_interval s...
        consumer.unpark()

(or simply ``consumer.wait(timeout)`` in a loop of its own). A consumer must call ``read_batch``,
``wait`` or ``heartbeat`` at least every ``heartbeat_interval`` seconds, or the producer treats it
as dead after the ring's heartbeat timeout and stops waiting for it.
"""
from __future__ import annotations

import select
import time
from typing import Callable

from . import layout
from .ordering import full_fence, load_acquire, store_release
from .ring_format import (
    _ALIGN_MASK,
    _ALIGN_UP,
    _HEADER,
    _PRODUCER_PARK,
    _PRODUCER_WAITING_FOR,
    _TAIL,
    _TAIL_INTENT,
    ConsumerLapped,
    MalformedRecord,
    _monotonic_ns,
    _RingView,
    _slot,
    _unpack_header_from,
)
from .wakeup import RingWakeups

DEFAULT_BATCH_LIMIT = 4096


class RingConsumer(_RingView):
    """Consumer ``index`` of a ring: delivers the records whose destination mask has bit ``index``.

    ``resume=True`` continues from the head a previous incarnation left (a restarted worker); if
    the producer has overwritten records since, the first ``read_batch`` raises ``ConsumerLapped``.
    Otherwise the consumer starts at the current tail.
    """

    def __init__(
        self, memory: memoryview, index: int, *, wakeups: RingWakeups | None = None, resume: bool = False
    ):
        super().__init__(memory)
        if not 0 <= index < self.consumer_slots:
            raise ValueError(f"consumer index {index} out of range: this ring has {self.consumer_slots} slots")
        self.index = index
        self._bit = 1 << index
        self._head_slot = _slot(layout.consumer_head_offset(index))
        self._heartbeat_slot = _slot(layout.consumer_heartbeat_offset(index))
        self._park_slot = _slot(layout.consumer_park_offset(index))
        self._evictions_slot = _slot(layout.consumer_evictions_offset(index))
        self._wakeup = None if wakeups is None else wakeups.consumers[index]
        self._producer_wakeup = None if wakeups is None else wakeups.producer
        self.heartbeat_interval = self.heartbeat_timeout_ns / 4e9
        # Epochs continue across restarts (the producer remembers the last epoch it woke).
        self._park_epoch = _monotonic_ns()
        self._woken_producer_epoch = 0
        self._poller: select.poll | None = None  # made on first wait, in the process that waits
        self.laps = 0
        self.bytes_lost = 0
        self._head = self._attach(resume)

    def _attach(self, resume: bool) -> int:
        slots = self._slots
        store_release(slots, self._park_slot, 0)
        self.heartbeat()  # live from now on: the producer will not overwrite what we have not read
        full_fence()  # ...and it must see that before we pick the tail we start from
        if resume:
            return load_acquire(slots, self._head_slot)
        head = load_acquire(slots, _TAIL)
        store_release(slots, self._head_slot, head)
        return head

    def fileno(self) -> int:
        """The wakeup's fd, for selectors / zmq.Poller."""
        if self._wakeup is None:
            raise ValueError("this consumer was created without wakeups")
        return self._wakeup.fileno()

    @property
    def evictions(self) -> int:
        """How often the producer gave up waiting for this consumer slot."""
        return load_acquire(self._slots, self._evictions_slot)

    @property
    def head(self) -> int:
        """Our position: every record before it has been read (or skipped: not for us)."""
        return self._head

    def has_records(self) -> bool:
        """True if the producer has published past our head (maybe records for others only)."""
        return load_acquire(self._slots, _TAIL) != self._head

    def lone_record(self) -> bool:
        """True if exactly one record (for any consumer) is published past our head: a reader
        that finds it so has nothing to batch it with, and may send it on at once."""
        head = self._head
        tail = load_acquire(self._slots, _TAIL)
        if tail == head:
            return False
        length = _unpack_header_from(self._data, head & (self.capacity - 1))[0]
        return head + ((length + _ALIGN_UP) & _ALIGN_MASK) == tail

    def producer_waiting_for(self) -> int:
        """The destination mask of the record the producer is parked on (0 if it is not waiting)."""
        if not load_acquire(self._slots, _PRODUCER_PARK):
            return 0
        return load_acquire(self._slots, _PRODUCER_WAITING_FOR) & ((1 << 64) - 1)   # an int64 slot

    def heartbeat(self) -> None:
        store_release(self._slots, self._heartbeat_slot, _monotonic_ns())

    def read_batch(self, handler: Callable[[int, memoryview], object], limit: int = DEFAULT_BATCH_LIMIT,
                   max_bytes: int = 1 << 62) -> int:
        """Call ``handler(record_type, payload)`` for up to ``limit`` of our records, stopping after
        the record that brings the payload bytes delivered to ``max_bytes``, or after a record
        whose handler returned a true value (it cannot take more now); return how many.

        ``payload`` is a read-only-by-convention view into the ring, **valid only until read_batch
        returns**: the head advances then and the producer may reuse the space. Copy to keep.
        Raises ConsumerLapped (after skipping to the tail) if the producer overwrote unread records.
        """
        slots = self._slots
        store_release(slots, self._heartbeat_slot, _monotonic_ns())
        tail = load_acquire(slots, _TAIL)
        head = self._head
        if tail == head:
            return 0
        capacity = self.capacity
        if load_acquire(slots, _TAIL_INTENT) - capacity > head:
            self._skip_to_tail(views_stale=False)
        data = self._data
        bit = self._bit
        unpack_header_from, header, align_up, align_mask = _unpack_header_from, _HEADER, _ALIGN_UP, _ALIGN_MASK
        start = head & (capacity - 1)
        index = start
        stop = start + (tail - head)  # may run past the end of the data region: then we wrap once
        span_end = min(stop, capacity)
        delivered = 0
        budget = max_bytes
        overrun = False
        while True:
            while index < span_end:  # the hot loop: locals only, one header unpack per record
                length, record_type, dest_mask = unpack_header_from(data, index)
                end = index + ((length + align_up) & align_mask)
                if end > span_end:  # past what was published (or the region's end): no producer wrote it
                    overrun = True
                    break
                if dest_mask & bit:
                    payload_start = index + header
                    full = handler(record_type, data[payload_start : payload_start + length])
                    delivered += 1
                    budget -= length
                    if full or delivered == limit or budget <= 0:
                        index = end
                        break
                index = end
            else:
                if span_end == capacity and stop > capacity:
                    # The padding record ended exactly at the end of the region: continue at 0.
                    stop -= capacity
                    start -= capacity
                    index = 0
                    span_end = stop
                    continue
            break
        if load_acquire(slots, _TAIL_INTENT) - capacity > head:
            self._skip_to_tail(views_stale=True)
        if overrun:
            self._skip_malformed(head + (index - start))
        self._advance(head + (index - start))
        return delivered

    def _advance(self, head: int) -> None:
        self._head = head
        slots = self._slots
        store_release(slots, self._head_slot, head)
        if self._producer_wakeup is not None:
            full_fence()  # our head store must be visible before we read the producer's park flag
            epoch = load_acquire(slots, _PRODUCER_PARK)
            if epoch and epoch != self._woken_producer_epoch:
                self._woken_producer_epoch = epoch
                self._producer_wakeup.wake()

    def _skip_to_tail(self, views_stale: bool) -> None:
        tail = load_acquire(self._slots, _TAIL)
        lost = tail - self._head
        self.laps += 1
        self.bytes_lost += lost
        self._advance(tail)
        raise ConsumerLapped(self.index, lost, views_stale)

    def _skip_malformed(self, position: int) -> None:
        """The record at ``position`` says it is longer than what was published: move on to the
        tail (reading on would take its length's word, and never find the tail again)."""
        lost = load_acquire(self._slots, _TAIL) - position
        self.bytes_lost += lost
        self._advance(position + lost)
        raise MalformedRecord(self.index, lost, position)

    # -- sleeping -----------------------------------------------------------------------------

    def prepare_to_park(self) -> bool:
        """Announce that we are about to sleep; False if records arrived meanwhile (do not sleep)."""
        self._park_epoch += 1
        store_release(self._slots, self._park_slot, self._park_epoch)
        full_fence()  # the park flag must be visible before we look at the tail again (Dekker)
        if self.has_records():
            store_release(self._slots, self._park_slot, 0)
            return False
        return True

    def unpark(self, drain: bool = True) -> None:
        """Call after sleeping on ``fileno()``: clears the park flag and the wakeup. With
        ``drain=False`` the caller drains the wakeup itself, once, before it parks again (several
        rings' consumers may share one wakeup; a drain is a system call)."""
        store_release(self._slots, self._park_slot, 0)
        if drain and self._wakeup is not None:
            self._wakeup.drain()

    def wait(self, timeout: float, spin: float = 0.0) -> bool:
        """Sleep until records may be available (True) or ``timeout`` seconds pass (False).

        ``spin`` seconds of polling come first: cheaper than a sleep/wake pair when records are
        expected within microseconds, wasted CPU otherwise (see BENCHMARKS.md).
        """
        if self.has_records():
            return True
        if spin > 0:
            spin_until = time.perf_counter() + spin
            while time.perf_counter() < spin_until:
                if self.has_records():
                    return True
        deadline = time.monotonic() + timeout
        while True:
            if self._wakeup is not None:
                # Drain wakeups left from the last sleep here, not right after waking: that
                # syscall would otherwise sit between the wakeup and the records.
                self._wakeup.drain()
            if not self.prepare_to_park():
                return True
            remaining = deadline - time.monotonic()
            pause = min(remaining, self.heartbeat_interval)
            if pause > 0:
                if self._wakeup is not None:
                    self._sleep_on_wakeup(pause)
                else:
                    time.sleep(min(pause, 0.0005))
            store_release(self._slots, self._park_slot, 0)
            if self.has_records():
                return True
            self.heartbeat()
            if time.monotonic() >= deadline:
                return False

    def _sleep_on_wakeup(self, timeout: float) -> None:
        if self._poller is None:
            self._poller = select.poll()
            self._poller.register(self._wakeup.fileno(), select.POLLIN)
        self._poller.poll(max(0, int(timeout * 1000 + 0.999)))

    def detach(self) -> None:
        """Stop holding the producer back; a later ``RingConsumer(..., resume=True)`` may return."""
        if self._data is not None:
            store_release(self._slots, self._park_slot, 0)
            store_release(self._slots, self._heartbeat_slot, 0)

    def close(self) -> None:
        self.detach()
        super().close()
