"""The LBT-IPC receiver side: attach to a source's ring as a consumer and dispatch its frames.

Records are batches of LBMC frames, parsed exactly as a TCP stream (frame_stream.FrameStream).
The records of one read of the ring are parsed at once (router.um.frame_batch; a source sends a
message of 2 KB or more as a record of its own): a router forwards them as one record of its own
ring, an application gets them as one batch. A record that is not whole frames is parsed alone,
after the ones before it, and ends the stream.
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

import errno
import logging
import os
import time

import posix_ipc

from router.ipc.ring import ConsumerLapped, MalformedRecord
from router.ipc.ring_consumer import RingConsumer
from router.ipc.shm import SharedSegment, pid_alive, remove_stale
from router.ipc.wakeup import RingWakeups
from router.lbtipc import naming
from router.lbtipc.source import RECORD_END, RECORD_FRAMES, SLOTS
from router.um.frame_batch import FrameBatch
from router.um.frame_stream import FrameStream

log = logging.getLogger(__name__)

READ_LIMIT = 1024
CHECK_INTERVAL = 1.0


class UnreadableSession(OSError):
    """An advertised session's shared memory holds no ring this receiver can read (a source of
    another ring layout, or anything else under its name): malformed transport data."""


def _attach_segment(name: str, description: str) -> SharedSegment:
    """Map a session's segment; what stands in the way is an OSError that says what it was."""
    try:
        return SharedSegment.attach(name)
    except posix_ipc.ExistentialError:
        raise FileNotFoundError(errno.ENOENT, f"{description}: its source closed as it was joined") from None
    except posix_ipc.PermissionsError:
        raise PermissionError(errno.EACCES, f"{description}: its shared memory {name} may not be "
                                            f"read by this user") from None
    except ValueError as err:               # an empty file: nothing to map
        raise UnreadableSession(errno.EINVAL, f"{description}: {name} holds no ring ({err})") from None


def _consume(segment: SharedSegment, slot: int, wakeups: RingWakeups, description: str) -> RingConsumer:
    """A consumer of the session's ring in `slot`, its wakeup open; nothing held if it fails."""
    problem = None
    try:
        consumer = RingConsumer(segment.memory, slot, wakeups=wakeups)
    except ValueError as err:               # no ring of our layout, or fewer slots than ours
        problem = str(err)
    if problem is not None:
        # Raised out here: the error caught holds views of the segment in its frames until then.
        raise UnreadableSession(errno.EINVAL, f"{description}: {segment.name} holds no ring this "
                                              f"receiver can read ({problem})")
    try:
        consumer.fileno()                   # opens the wakeup FIFO: gone if the source is closing
    except BaseException:
        consumer.close()
        wakeups.close()
        raise
    return consumer


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
        self.segment = _attach_segment(name, self.description)
        try:
            self.slot = naming.claim_slot(name, SLOTS)
            try:
                self.wakeups = RingWakeups.fifos(name, SLOTS, create=False)
                self.consumer = _consume(self.segment, self.slot, self.wakeups, self.description)
            except BaseException:
                naming.release_slot(name, self.slot)
                raise
        except BaseException:
            self.segment.close()
            raise
        self.ended = False
        self.source_gone = False          # the source closed or died: EOS once the ring is read
        self.activity_timeout = activity_timeout
        self.last_heard = time.monotonic()
        # While a read of the ring runs, its records are views into the mapping and the consumer
        # stores its head when the read ends: a callback that closes the stream meanwhile (an
        # application closing its receiver on the message it waited for) leaves the letting go
        # of the ring to the end of the read.
        self._reading = False
        self._ring_released = False
        self._batch = FrameBatch(self)              # the read's FRAMES records, copied out of the ring
        loop.add_reader(self.consumer.fileno(), self._woken)
        check = min(CHECK_INTERVAL, max(activity_timeout / 4, 0.05)) if activity_timeout > 0 else CHECK_INTERVAL
        self._check = loop.call_every(check, self._check_source)
        loop.call_later(0, self._woken)

    def _woken(self) -> None:
        if self.closed or self.paused:
            return
        consumer = self.consumer
        consumer.unpark()
        while True:
            self._reading = True
            try:
                delivered = consumer.read_batch(self._record, READ_LIMIT)
            except ConsumerLapped as err:          # MalformedRecord too: what the ring held is skipped
                self.counters["malformed"] += 1
                if isinstance(err, MalformedRecord) and self.context_counters is not None:
                    self.context_counters["transport_malformed"] += 1
                log.warning("%s: %s", self.description, err)
                delivered = None
            finally:
                self._batch.parse()                 # what the read took before it ended, either way
                self._reading = False
            if self.closed:
                self._release_ring()            # closed by a callback of that read
                return
            if delivered is None:
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
        if self.closed:
            return                  # closed by a callback of this read: the rest is nobody's
        if record_type == RECORD_FRAMES:
            if self._batch.add(payload):
                return
            self._batch.parse()     # in order: the records before it first
            if self.closed:
                return
            data = bytes(payload)
            self.counters["bytes"] += len(data)
            if self._parse(data) != len(data):
                self._malformed("a record that is not whole frames")
        elif record_type == RECORD_END:
            self._batch.parse()
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
        if not self._reading:
            self._release_ring()

    def _release_ring(self) -> None:
        """Detach from the ring, give up the slot, unmap: once no read of the ring is running."""
        if self._ring_released:
            return
        self._ring_released = True
        self.consumer.close()
        self.wakeups.close()
        naming.release_slot(self.segment.name, self.slot)
        self.segment.close()
