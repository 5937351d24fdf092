"""The LBT-IPC receiver side: attach to a source's ring as a consumer and dispatch its frames.

Records are batches of LBMC frames, parsed exactly as a TCP stream (frame_stream.FrameStream).
The receiver sleeps on its wakeup FIFO; a producer writes it only when the receiver is parked.
EOS comes from the source's end record, or from noticing that the source is gone: its process
died, or it closed without room in the ring for its end record (a receiver behind). What the ring
still holds is read first (it stays mapped): a source's last messages are not lost with it. A
dead source's shared memory is removed by the receiver that notices (nobody else will, until the
next LBT-IPC source starts on this host).

A source that is alive but writes nothing, not even the session messages an idle source writes
(router.lbtipc.source: a hung process), ends the stream after `transport_lbtipc_activity_timeout`
(0: never), as in UM. Time the ring waits unread (the stream paused by flow control) does not
count: that silence is ours.
"""
from __future__ import annotations

import logging
import os
import time

from router.ipc.ring import ConsumerLapped
from router.ipc.ring_consumer import RingConsumer
from router.ipc.shm import SharedSegment, pid_alive, remove_stale
from router.ipc.wakeup import RingWakeups
from router.lbtipc import naming
from router.lbtipc.source import RECORD_END, RECORD_FRAMES, SLOTS
from router.um.frame_stream import FrameStream

log = logging.getLogger(__name__)

READ_LIMIT = 1024
CHECK_INTERVAL = 1.0


class LbtipcSessionClient(FrameStream):
    def __init__(self, loop, host_id: int, session_id: int, xport_id: int, on_closed, *,
                 activity_timeout: float = 60.0):
        super().__init__(loop, ("lbtipc", host_id, xport_id, session_id), on_closed)
        if host_id != naming.host_id():
            raise OSError(f"LBT-IPC session {xport_id}/{session_id:08x} is on another host")
        name = naming.find_segment(xport_id, session_id)
        if name is None:
            raise OSError(f"no LBT-IPC session {xport_id}/{session_id:08x} on this host")
        self.description = f"LBT-IPC session {xport_id}/{session_id:08x}"
        self.owner_pid = int(name.split(".")[2])
        self.segment = SharedSegment.attach(name)
        self.slot = naming.claim_slot(name, SLOTS)
        self.wakeups = RingWakeups.fifos(name, SLOTS, create=False)
        self.consumer = RingConsumer(self.segment.memory, self.slot, wakeups=self.wakeups)
        self.ended = False
        self.source_gone = False          # the source closed or died: EOS once the ring is read
        self.activity_timeout = activity_timeout
        self.last_heard = time.monotonic()
        loop.add_reader(self.consumer.fileno(), self._woken)
        check = min(CHECK_INTERVAL, max(activity_timeout / 4, 0.05)) if activity_timeout > 0 else CHECK_INTERVAL
        self._check = loop.call_every(check, self._check_source)
        loop.call_later(0, self._woken)

    def _woken(self) -> None:
        if self.closed or self.paused:
            return
        consumer = self.consumer
        consumer.unpark()
        while not self.closed:
            try:
                delivered = consumer.read_batch(self._record, READ_LIMIT)
            except ConsumerLapped as err:
                self.counters["malformed"] += 1
                log.warning("%s: %s", self.description, err)
                continue
            if delivered:
                self.last_heard = time.monotonic()
            if self.ended:
                self.close()
                return
            if delivered == READ_LIMIT:
                self.loop.call_later(0, self._woken)       # let other sockets have a turn
                return
            if self.source_gone and not consumer.has_records():
                self.close()                                # its last record is read
                return
            if consumer.prepare_to_park():
                return
            consumer.unpark()

    def _record(self, record_type: int, payload) -> None:
        if record_type == RECORD_FRAMES:
            data = bytes(payload)
            self.counters["bytes"] += len(data)
            if self._parse(data) != len(data):
                self._malformed("a record that is not whole frames")
        elif record_type == RECORD_END:
            self.ended = True

    def _check_source(self) -> None:
        """Heartbeat our slot (so an idle source keeps waiting for us) and notice a source that
        is gone; the stream ends once what the ring holds is read."""
        if self.closed:
            return
        self.consumer.heartbeat()
        if not self.source_gone:
            if not pid_alive(self.owner_pid):
                log.info("%s: its source process %d is gone", self.description, self.owner_pid)
                remove_stale(f"umr.{naming.OWNER}.{self.owner_pid}")
            elif not os.path.exists(f"{naming.SHM_DIRECTORY}/{self.segment.name.lstrip('/')}"):
                log.info("%s: its source closed without an end record", self.description)
            else:
                self._check_activity()
                return
            self.source_gone = True
        if not self.paused and not self.consumer.has_records():
            self.close()
        elif not self.paused:
            self.loop.call_later(0, self._woken)

    def _check_activity(self) -> None:
        now = time.monotonic()
        if self.paused or self.consumer.has_records():
            self.last_heard = now           # what the source wrote waits for us: a silence is ours
        elif self.activity_timeout > 0 and now - self.last_heard >= self.activity_timeout:
            log.info("%s: nothing heard from its source for %.1f s; ended", self.description,
                     self.activity_timeout)
            self.close()

    def pause(self) -> None:
        self.paused = True          # the ring fills and the source waits: flow control

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            self.loop.call_later(0, self._woken)

    def _close_transport(self) -> None:
        self._check.cancel()
        self.loop.remove_reader(self.consumer.fileno())
        self.consumer.close()
        self.wakeups.close()
        naming.release_slot(self.segment.name, self.slot)
        self.segment.close()
