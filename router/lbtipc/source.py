"""The LBT-IPC source side: a session writes its batches of LBMC frames into a ring it owns.

Receivers on this host attach as ring consumers. Flow control is the ring's: an application
source waits for the slowest live receiver (as LBT-IPC does); a router's proxy source drops and
counts instead. A receiver that dies stops holding the source back after the ring's heartbeat
timeout. Closing writes an end-of-session record, so receivers see EOS at once.
"""
from __future__ import annotations

import os
import time

from router.ipc import layout
from router.ipc.ring import OverflowPolicy, RecordTooLarge, init_ring
from router.ipc.ring_producer import RingProducer
from router.ipc.shm import SharedSegment
from router.ipc.wakeup import RingWakeups
from router.lbtipc import naming
from router.um.batching_session import BatchingSession
from router.um.wire.lbmr import LbtipcInfo
from router.um.wire.otid import lbtipc_otid

RECORD_FRAMES = 1
RECORD_END = 2
SLOTS = 16
HEARTBEAT_TIMEOUT = 5.0
_ALL = (1 << SLOTS) - 1


def ring_capacity(window: int) -> int:
    """The ring is the transmission window, as a power of two between 1 MiB and 64 MiB."""
    capacity = 1 << 20
    while capacity * 2 <= min(window, 64 << 20):
        capacity *= 2
    return capacity


class LbtipcSourceSession(BatchingSession):
    def __init__(self, loop, *, id_low: int, id_high: int, window: int, datagram_max_size: int,
                 batching_minimum_length: int, batching_interval: float, overflow: str, max_queue: int):
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
        self.counters["records_too_large"] = 0

    def advertised_info(self) -> LbtipcInfo:
        return LbtipcInfo(self.host_id, self.session_id, self.xport_id)

    def otid(self, index: int, context_id: int) -> bytes:
        return lbtipc_otid(self.host_id, self.xport_id, self.session_id, index, ctx_id=context_id)

    @property
    def receiver_count(self) -> int:
        return naming.live_slots(self.segment.name, SLOTS)

    def _deliver(self, data: bytes) -> None:
        """Write one batch into the ring (lock held): wait for space, or drop and count."""
        try:
            while not self.producer.offer(RECORD_FRAMES, data, _ALL):
                if self.overflow == "drop":
                    self.counters["dropped_would_block_batches"] += 1
                    self.counters["dropped_would_block_bytes"] += len(data)
                    return
                self.producer.wait_for_space(len(data), 0.5)
        except RecordTooLarge:
            # A batch above half the ring: only a tiny transmission window gets here; counted.
            self.counters["records_too_large"] += 1

    def queued_bytes(self) -> int:
        return 0

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self._flush_locked()
            self.closed = True
            deadline = time.monotonic() + 2.0
            while not self.producer.offer(RECORD_END, b"", _ALL) and time.monotonic() < deadline:
                self.producer.wait_for_space(0, 0.1)
        self.producer.close()
        self.wakeups.close()
        self.wakeups.unlink()
        naming.remove_slots(self.segment.name, SLOTS)
        self.segment.close()
