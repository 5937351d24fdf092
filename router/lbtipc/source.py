"""The LBT-IPC source side: a session writes its batches of LBMC frames into a ring it owns.

Receivers on this host attach as ring consumers. Flow control is the ring's: an application
source waits for the slowest live receiver (as LBT-IPC does); a router's proxy source queues what
the full ring cannot take, up to its max_queue, then drops and counts (and reports the backlog, so
its portal holds records in the router's rings meanwhile: router.worker.datapath). A receiver that
dies stops holding the source back after the ring's heartbeat timeout. Closing writes an
end-of-session record, so receivers see EOS at once; with the ring full, an application's close
waits a little for room, the loop's thread (a router's proxy) does not: the record follows when
there is room. A session that wrote nothing for
`transport_lbtipc_sm_interval` writes a session message (a record with no frames), so its
receivers can tell an idle source from a hung one (their `transport_lbtipc_activity_timeout`).

A receiver starts reading at the ring's tail when it attaches, and the receiver a router's proxy
source exists for attaches only once it has heard the proxy's advertisement. So a session made
with `hold_for_receiver` (as router.um.tcp_source's) keeps what it is sent until its first
receiver attaches, up to max_queue bytes and for at most that many seconds, and then writes it
into the ring in order, looking for the receiver every HOLD_CHECK_INTERVAL meanwhile
(router.um.held_batches).
"""
from __future__ import annotations

import os
import time
from collections import deque

from router.ipc import layout
from router.ipc.ring import OverflowPolicy, RecordTooLarge, init_ring
from router.ipc.ring_producer import RingProducer
from router.ipc.shm import SharedSegment
from router.ipc.wakeup import RingWakeups
from router.lbtipc import naming
from router.um.batching_session import BatchingSession
from router.um.held_batches import HeldBatches
from router.um.wire.lbmr import LbtipcInfo
from router.um.wire.otid import lbtipc_otid

RECORD_FRAMES = 1
RECORD_END = 2
RECORD_SM = 3                      # a session message: the source is alive, with nothing to send
SLOTS = 16
HEARTBEAT_TIMEOUT = 5.0
WAITING_RECHECK_INTERVAL = 0.25    # s: a proxy's queue looks for dead receivers this often
HOLD_CHECK_INTERVAL = 0.005        # s: a proxy holding batches for its first receiver looks this often
CLOSE_END_TIMEOUT = 2.0            # s a closing session waits for room for its end record
_ALL = (1 << SLOTS) - 1


def ring_capacity(window: int) -> int:
    """The ring is the transmission window, as a power of two between 1 MiB and 64 MiB."""
    capacity = 1 << 20
    while capacity * 2 <= min(window, 64 << 20):
        capacity *= 2
    return capacity


class LbtipcSourceSession(BatchingSession):
    def __init__(self, loop, *, id_low: int, id_high: int, window: int, datagram_max_size: int,
                 batching_minimum_length: int, batching_interval: float, overflow: str, max_queue: int,
                 hold_for_receiver: float = 0.0, sm_interval: float = 10.0):
        super().__init__(loop, datagram_max_size=datagram_max_size, batching_minimum_length=batching_minimum_length,
                         batching_interval=batching_interval, overflow=overflow, max_queue=max_queue)
        self.session_id = int.from_bytes(os.urandom(4), "big") or 1
        self.host_id = naming.host_id()
        self.xport_id = naming.allocate_xport_id(id_low, id_high)
        capacity = ring_capacity(window)
        self.segment = SharedSegment.create(naming.OWNER, naming.session_name(self.xport_id, self.session_id),
                                            layout.segment_size(capacity))
        init_ring(self.segment.memory, capacity, consumer_slots=SLOTS, overflow=OverflowPolicy.BLOCK,
                  heartbeat_timeout=HEARTBEAT_TIMEOUT, owner_pid=os.getpid())
        self.wakeups = RingWakeups.fifos(self.segment.name, SLOTS, create=True)
        self.producer = RingProducer(self.segment.memory, wakeups=self.wakeups)
        self.counters.update({"records_too_large": 0, "sms_sent": 0})
        self.waiting: deque[bytes] = deque()     # batches a full ring could not take yet (proxies)
        self.waiting_bytes = 0
        self.progress = 0.0                       # time.monotonic() the ring last took a waiting batch
        self._recheck = None                      # while batches wait: looks again for dead receivers
        self.hold_for_receiver = hold_for_receiver
        self.held = HeldBatches(max_queue, hold_for_receiver, self.counters)   # sent before any receiver
        self._receiver_seen = False
        self._hold_check = None
        self.sm_interval = sm_interval
        self._sm_timer = None
        self._position_at_sm = self.producer.position
        self._end_retry = None                    # closed on the loop with the ring full: see close
        self._end_deadline = 0.0
        loop.call_soon_threadsafe(self._start_session_messages)

    def advertised_info(self) -> LbtipcInfo:
        return LbtipcInfo(self.host_id, self.session_id, self.xport_id)

    def otid(self, index: int, context_id: int) -> bytes:
        return lbtipc_otid(self.host_id, self.xport_id, self.session_id, index, ctx_id=context_id)

    @property
    def receiver_count(self) -> int:
        """Receivers that hold a slot and read the ring. A receiver claims its slot before it
        attaches to the ring (from the tail it finds then), so one counted on its slot alone could
        miss what a source waiting for it sends at once; a slot whose claimant died is not counted
        even while its last heartbeat is fresh."""
        return min(naming.live_slots(self.segment.name, SLOTS), self.producer.live_consumers())

    def _deliver(self, data) -> None:
        """Write one batch into the ring (lock held): an application waits for space; a router's
        proxy queues what the full ring cannot take, up to its max_queue, and drops the rest."""
        try:
            if self.overflow == "drop":
                if self.hold_for_receiver > 0 and not self._receiver_seen and not self._receivers_now():
                    self._hold(data)
                    return
                if self.waiting or not self.producer.offer(RECORD_FRAMES, data, _ALL):
                    self._queue(bytes(data))
                return
            while not self.producer.offer(RECORD_FRAMES, data, _ALL):
                self.producer.wait_for_space(len(data), 0.5)
        except RecordTooLarge:
            # A batch above half the ring: only a tiny transmission window gets here; counted.
            self.counters["records_too_large"] += 1

    def send_control(self, data) -> None:
        """An application's session does not wait for ring space on the loop's thread: a
        control message that finds the ring full is not sent (TSNIs come again)."""
        if self.overflow == "drop":
            self._deliver(data)
            return
        try:
            self.producer.offer(RECORD_FRAMES, data, _ALL)
        except RecordTooLarge:
            self.counters["records_too_large"] += 1

    # -- session messages ------------------------------------------------------------------------
    def _start_session_messages(self) -> None:
        with self.lock:
            if not self.closed:
                self._sm_timer = self.loop.call_every(self.sm_interval, self._sm_tick)

    def _sm_tick(self) -> None:
        """On the loop, every sm_interval: a session message if nothing went into the ring since
        the last tick. A sender holding the lock is writing, or waiting for room (its receivers
        have records to read): the loop does not wait for it."""
        if not self.lock.acquire(blocking=False):
            return
        try:
            if self.closed:
                return
            producer = self.producer
            if producer.position == self._position_at_sm and not self.waiting and not self.held:
                if producer.offer(RECORD_SM, b"", _ALL):      # a full ring: its receivers have records
                    self.counters["sms_sent"] += 1
            self._position_at_sm = producer.position
        finally:
            self.lock.release()

    # -- held for the first receiver ---------------------------------------------------------------
    def _receivers_now(self) -> bool:
        if self.held or not self.producer.live_consumers():
            return False          # (with batches held, only _release_held may let them go, in order)
        self._receiver_seen = True
        return True

    def _hold(self, data) -> None:
        """Keep a batch no receiver has attached for yet (lock held), and look for one."""
        self.held.hold(data)
        if self._hold_check is None:
            self._hold_check = self.loop.call_every(HOLD_CHECK_INTERVAL, self._release_held)

    def _release_held(self) -> None:
        """On the loop: once a receiver is attached, what was held goes into the ring in order
        (behind nothing: no batch was written before it); with nothing left to hold, stop looking."""
        with self.lock:
            self.held.expire()
            if self.held and not self.closed and not self.producer.live_consumers():
                return
            self._hold_check.cancel()
            self._hold_check = None
            if self.closed:
                return
            self._receiver_seen = bool(self.held)
            for batch in self.held.take():
                try:
                    if self.waiting or not self.producer.offer(RECORD_FRAMES, batch, _ALL):
                        self._queue(batch)
                except RecordTooLarge:          # as in _deliver: counted
                    self.counters["records_too_large"] += 1

    def _queue(self, data: bytes) -> None:
        """The ring is full (its slowest receiver is behind): keep the batch in order. Lock held,
        on the loop's thread (router proxies send from it). The first batch to wait is kept
        whatever its size, as a TCP session keeps the batch its socket took in part: the backlog,
        and so the portal's holding back, starts with it (a batch can be one 256 KB ingress read,
        more than a small <max-queue>); later ones are dropped beyond max_queue."""
        if self.waiting and self.waiting_bytes + len(data) > self.max_queue:
            self.count_dropped(data)
            return
        if not self.waiting:
            self.progress = time.monotonic()
            self.loop.add_reader(self.wakeups.producer.fileno(), self._space_freed)
            # A receiver that dies never writes our FIFO: looking again now and then lets the ring
            # skip it once its heartbeat is stale, as an application source's wait does.
            self._recheck = self.loop.call_every(WAITING_RECHECK_INTERVAL, self._space_freed)
        self.waiting.append(data)
        self.waiting_bytes += len(data)
        if self.producer.wait_for_space(len(self.waiting[0]), 0):
            self.loop.call_later(0, self._space_freed)      # room appeared meanwhile

    def _space_freed(self) -> None:
        """A receiver moved on: write what waits, in order, as far as the ring takes it."""
        with self.lock:
            if self.closed or not self.waiting:
                return
            self.wakeups.producer.drain()
            self.producer.unpark()
            while self.waiting:
                try:
                    if not self.producer.offer(RECORD_FRAMES, self.waiting[0], _ALL):
                        if self.producer.wait_for_space(len(self.waiting[0]), 0):
                            continue
                        return                  # parked: the next receiver to move on wakes us
                except RecordTooLarge:          # as in _deliver: counted, and the queue moves on
                    self.counters["records_too_large"] += 1
                self.waiting_bytes -= len(self.waiting.popleft())
                self.progress = time.monotonic()
            self._stop_waiting()

    def _stop_waiting(self) -> None:
        self.loop.remove_reader(self.wakeups.producer.fileno())
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None

    def backlog(self) -> float | None:
        """None while the ring takes our batches; else when it last took one (every receiver
        shares the ring, so the slowest holds them all)."""
        return self.progress if self.waiting else None

    def queued_bytes(self) -> int:
        return self.waiting_bytes + self.held.bytes

    def queued_for_receivers(self) -> int:
        """What waits because the ring (its slowest receiver) does not take it now."""
        return self.waiting_bytes

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self._flush_locked()
            self.closed = True
            if self._sm_timer is not None:
                self._sm_timer.cancel()
            self.held.discard()                   # nobody attached in time: counted, as a TCP session's
            if self._hold_check is not None:
                self._hold_check.cancel()
                self._hold_check = None
            if self.waiting:                      # a deleted proxy's queue is discarded (as the DRO's)
                for data in self.waiting:
                    self.count_dropped(data)
                self.waiting.clear()
                self.waiting_bytes = 0
                self._stop_waiting()              # proxies close on the loop's thread
            ended = self.producer.offer(RECORD_END, b"", _ALL)
            on_loop = self.loop.in_loop_thread()
            deadline = time.monotonic() + CLOSE_END_TIMEOUT
            while not ended and not on_loop and time.monotonic() < deadline:
                self.producer.wait_for_space(0, 0.1)         # an application's thread waits
                ended = self.producer.offer(RECORD_END, b"", _ALL)
        if ended or not on_loop:
            self._release()
            return
        # The loop's thread (a router deleting its last proxy source on the session) does not wait
        # for a receiver behind: every portal of its worker would stand still meanwhile. The names
        # go now (nothing is left behind if the process ends first, and receivers see the source
        # closed once they have read the ring); the end record follows when there is room for it.
        self._unlink_names()
        self._end_deadline = deadline
        self.loop.add_reader(self.wakeups.producer.fileno(), self._write_end)
        self._end_retry = self.loop.call_every(WAITING_RECHECK_INTERVAL, self._write_end)

    def _write_end(self) -> None:
        """On the loop, after a close that found the ring full: the end record once it fits, or
        nothing once CLOSE_END_TIMEOUT has passed; then the ring is let go."""
        if self._end_retry is None:
            return
        self.wakeups.producer.drain()
        self.producer.unpark()
        if not self.producer.offer(RECORD_END, b"", _ALL) and time.monotonic() < self._end_deadline:
            self.producer.wait_for_space(0, 0)          # parked: a receiver moving on wakes us
            return
        self.loop.remove_reader(self.wakeups.producer.fileno())
        self._end_retry.cancel()
        self._end_retry = None
        self._release()

    def _unlink_names(self) -> None:
        self.wakeups.unlink()
        naming.remove_slots(self.segment.name, SLOTS)
        self.segment.unlink()

    def _release(self) -> None:
        self.producer.close()
        self.wakeups.close()
        self._unlink_names()
        self.segment.close()
