"""What every transport's sending side shares: LBMC framing, fragmentation, implicit batching.

Messages become LBMC MESSAGE frames (with FRAG headers above the datagram size) appended to one
batch, sent by size (`implicit_batching_minimum_length`) or by `implicit_batching_interval`, so
small messages are not one system call each. A router's proxy sources append whole frames as
they came (`send_raw`). Subclasses deliver a finished batch: to TCP connections, into a ring.
Thread-safe: applications send from their own threads while the context's loop runs timers.
"""
from __future__ import annotations

import struct
import threading

from router.um.frame_runs import frames_and_last_sequence_numbers, strided_column
from router.um.sequence_info import later
from router.um.requests import RequestOrigin, message_frames
from router.um.retention import Retention
from router.um.wire.lbmc import FRAG_HEADER, LBMC_TYPE_MESSAGE, MESSAGE_HEADER, NHDR_DATA, NHDR_FRAG

_MESSAGE_OVERHEAD = MESSAGE_HEADER.size
_FRAGMENT_OVERHEAD = MESSAGE_HEADER.size + FRAG_HEADER.size
_pack_message = MESSAGE_HEADER.pack
_pack_frag = FRAG_HEADER.pack
_pack_tidx = struct.Struct(">I").pack_into
_unpack_tidx_sqn = struct.Struct(">II").unpack_from
_UNIFORM_RUN = 16                      # from this many frames, check for equal lengths and vectorise


def set_topic_index(frames: bytearray, start: int, tidx: int, count: int) -> None:
    """Set the topic index of each of the `count` whole LBMC data frames in `frames[start:]`.

    A proxy source or a peer link forwards a source's frames under an index of its own when the
    origin's is taken. Frames of one stream usually all have the same length (one message size):
    then one vectorised store does it; otherwise the msglen chain is walked frame by frame."""
    end = len(frames)
    first = (frames[start + 2] << 8) | frames[start + 3]
    if count >= _UNIFORM_RUN and first * count == end - start and first >= _MESSAGE_OVERHEAD:
        if (strided_column(frames, start + 2, count, first, ">u2") == first).all():
            strided_column(frames, start + 4, count, first, ">u4")[:] = tidx
            return
    position = start
    while position + _MESSAGE_OVERHEAD <= end:
        _pack_tidx(frames, position + 4, tidx)
        length = (frames[position + 2] << 8) | frames[position + 3]
        if length < 4:
            raise ValueError(f"LBMC frame of length {length} at offset {position - start}")
        position += length


def with_topic_index(frames, tidx: int, count: int) -> bytearray:
    """A copy of whole LBMC data frames with each frame's topic index set to `tidx`."""
    copy = bytearray(frames)
    set_topic_index(copy, 0, tidx, count)
    return copy


class BatchingSession:
    def __init__(self, loop, *, datagram_max_size: int, batching_minimum_length: int,
                 batching_interval: float, overflow: str, max_queue: int):
        self.loop = loop
        self.datagram_max_size = datagram_max_size
        self.batching_minimum_length = batching_minimum_length
        self.batching_interval = batching_interval
        self.overflow = overflow              # "block" (applications) or "drop" (router proxies)
        self.max_queue = max_queue
        self.lock = threading.RLock()
        self.batch = bytearray()
        self.flush_timer_armed = False
        self.closed = False
        self.counters = {"bytes_sent": 0, "batches": 0,
                         "dropped_would_block_bytes": 0, "dropped_would_block_batches": 0,
                         "dropped_would_block_frames": 0, "tsni_sent": 0}
        # Topic sequence number info (router.um.sequence_info), when the context starts it; and
        # the last sequence number dropped per topic index (a lost tail TSNIs must speak of).
        self.sequence_info = None
        self.dropped_last: dict[int, int] = {}
        # Late-join sources' retention (router.um.retention), by topic index: each frame sent for
        # one of them is kept as it is appended.
        self.retained: dict[int, Retention] = {}

    def count_dropped(self, data) -> None:
        """A batch dropped because it would block (a receiver behind, the queue full)."""
        counters = self.counters
        counters["dropped_would_block_batches"] += 1
        counters["dropped_would_block_bytes"] += len(data)
        frames, last = frames_and_last_sequence_numbers(data)
        counters["dropped_would_block_frames"] += frames
        dropped_last = self.dropped_last
        for tidx, sqn in last.items():
            dropped_last[tidx] = later(dropped_last.get(tidx), sqn)

    def retain(self, tidx: int, retention: Retention | None) -> None:
        """Keep (or, with None, stop keeping) what is sent for topic index `tidx`."""
        with self.lock:
            if retention is None:
                self.retained.pop(tidx, None)
            else:
                self.retained[tidx] = retention

    def _retain(self, data, start: int, end: int) -> None:
        """Keep the frames in data[start:end] that belong to a retained topic index (lock held)."""
        retained = self.retained
        offset = start
        while end - offset >= _MESSAGE_OVERHEAD:
            length = (data[offset + 2] << 8) | data[offset + 3]
            if length < 4:
                return
            if data[offset] == LBMC_TYPE_MESSAGE:
                tidx, sqn = _unpack_tidx_sqn(data, offset + 4)
                retention = retained.get(tidx)
                if retention is not None:
                    retention.add(sqn, data[offset:offset + length])     # copied into its ring
            offset += length

    def send(self, tidx: int, sqn: int, payload, flush: bool = False) -> int:
        """Append one message for topic `tidx`; returns the next sequence number."""
        length = len(payload) + _MESSAGE_OVERHEAD
        lock = self.lock
        # Every message an application sends comes through here: acquire/release in try/finally
        # costs half what `with` does (about 60 ns less a message, an eighth of this method).
        lock.acquire()
        try:
            if length <= self.datagram_max_size:
                batch = self.batch
                batch += _pack_message(LBMC_TYPE_MESSAGE, NHDR_DATA, length, tidx, sqn)
                batch += payload
                if self.retained:
                    self._retain(batch, len(batch) - length, len(batch))
                sqn = (sqn + 1) & 0xFFFFFFFF    # topic sequence numbers wrap
            else:
                sqn = self._append_fragments(tidx, sqn, payload)
            # _flush_or_arm_timer, inline (a call less a message, about 30 ns of 400)
            if flush or len(self.batch) >= self.batching_minimum_length:
                self._flush_locked()
            elif not self.flush_timer_armed:
                self.flush_timer_armed = True
                self.loop.call_soon_threadsafe(self._arm_flush_timer)
        finally:
            lock.release()
        return sqn

    def send_many(self, tidx: int, sqn: int, payloads, progress: list | None = None) -> tuple[int, bool]:
        """Append each of `payloads` for topic `tidx`, in order, as `send` would one by one (the
        same frames, sent in the same batches); returns the next sequence number and whether any
        message was sent, and also leaves them in `progress` (a list, when given) even when the
        iterable or a send raises: the numbers of what went out before are taken.

        Small messages are framed in a run of their own, outside the lock, and the run joins the
        batch (under the lock, once) when it fills what the batch lacks of
        `batching_minimum_length`, before a message that goes as `send` sends it (one that fills a
        batch by itself, or must be fragmented), and when `payloads` ends. The iterable may reuse
        one buffer (each payload is copied before the next is asked for); what it gave waits in
        the run until then, so give messages that are ready (lbm_src_sendv's vector), not an
        iterable that waits between them. Why: the lock per message is a quarter of `send`'s cost
        at 64 B (umsrc's loop: 515 ns a message with `send`, 365 with this)."""
        largest = self.datagram_max_size - _MESSAGE_OVERHEAD
        minimum = self.batching_minimum_length
        room = minimum - len(self.batch)
        run = bytearray()
        sent = False
        try:
            for payload in payloads:
                sent = True
                size = len(payload)
                if size > largest or (not run and size + _MESSAGE_OVERHEAD >= room):
                    if run:
                        before, run = run, bytearray()
                        self._append_run(before)
                    sqn = self.send(tidx, sqn, payload)
                    room = minimum - len(self.batch)
                    continue
                run += _pack_message(LBMC_TYPE_MESSAGE, NHDR_DATA, size + _MESSAGE_OVERHEAD, tidx, sqn)
                run += payload
                sqn = (sqn + 1) & 0xFFFFFFFF    # topic sequence numbers wrap
                if len(run) >= room:
                    full, run = run, bytearray()
                    room = self._append_run(full)
        finally:
            # Also when the iterable (or a message) raises: what it gave before goes out, as
            # `send` would have sent it.
            self._append_run(run)
            if progress is not None:
                progress[:] = (sqn, sent)
        return sqn, sent

    def _append_run(self, run: bytearray) -> int:
        """Whole frames built by send_many into the batch (`run` is taken over: an empty batch
        becomes it, uncopied): kept if retained, sent if the batch is full. Returns what the batch
        lacks then of `batching_minimum_length`, where send_many cuts its next run. send_many
        reads that outside the lock, as a hint: another sending thread may add to the batch
        meanwhile, and then a batch is that much longer, as it is when they send."""
        if run:
            with self.lock:
                start = len(self.batch)
                if start:
                    self.batch += run
                else:
                    self.batch = run
                if self.retained:
                    self._retain(self.batch, start, len(self.batch))
                self._flush_or_arm_timer()
        return self.batching_minimum_length - len(self.batch)

    def send_with_properties(self, tidx: int, sqn: int, payload, block: bytes, flush: bool = False) -> int:
        """Append one message whose payload ends in a properties block (router.um.wire.
        lbmc_properties): an APPHDR_CHAIN header in each of its frames says how long the block
        is. Returns the next sequence number."""
        with self.lock:
            sqn = self._append_frames(sqn, message_frames(tidx, sqn, bytes(payload) + block, self.datagram_max_size,
                                                          properties_size=len(block)))
            if flush:
                self._flush_locked()
            else:
                self._flush_or_arm_timer()
        return sqn

    def send_request(self, tidx: int, sqn: int, payload, origin: RequestOrigin) -> int:
        """Append one request (router.um.requests: REQUEST first in each of its frames) after
        what is batched, and send it all now: a requester waits for the answer. Returns the next
        sequence number."""
        with self.lock:
            sqn = self._append_frames(sqn, message_frames(tidx, sqn, payload, self.datagram_max_size, origin))
            self._flush_locked()
        return sqn

    def _append_frames(self, sqn: int, frames) -> int:
        """Append router.um.requests.message_frames (lock held); returns the next sequence number."""
        for headers, piece in frames:
            start = len(self.batch)
            self.batch += headers
            self.batch += piece
            if self.retained:
                self._retain(self.batch, start, len(self.batch))
            sqn = (sqn + 1) & 0xFFFFFFFF    # topic sequence numbers wrap
            if len(self.batch) >= self.batching_minimum_length:
                self._flush_locked()
        return sqn

    def send_raw(self, frames, tidx: int | None = None, count: int = 0, now: bool = False) -> None:
        """Append `count` whole LBMC frames as they are (a router forwarding a source's frames).
        With `tidx`, each frame's topic index is set to it (in our batch: the caller's bytes stay).
        `now`: send them at once if nothing is batched before them, whatever their length."""
        with self.lock:
            if not self.batch and (now or len(frames) >= self.batching_minimum_length):
                if tidx is not None:               # rewritten in a copy: the caller's bytes stay
                    frames = with_topic_index(frames, tidx, count)
                if self.retained:
                    self._retain(frames, 0, len(frames))
                self._deliver_counted(frames)      # a batch already: no copy into ours
                return
            start = len(self.batch)
            self.batch += frames
            if tidx is not None:
                set_topic_index(self.batch, start, tidx, count)
            if self.retained:
                self._retain(self.batch, start, len(self.batch))
            self._flush_or_arm_timer()

    def _append_fragments(self, tidx: int, sqn: int, payload) -> int:
        piece = self.datagram_max_size - _FRAGMENT_OVERHEAD
        view = memoryview(payload)
        total = len(view)
        first = sqn
        for offset in range(0, total, piece):
            chunk = view[offset:offset + piece]
            self.batch += _pack_message(LBMC_TYPE_MESSAGE, NHDR_FRAG, len(chunk) + _FRAGMENT_OVERHEAD, tidx, sqn)
            self.batch += _pack_frag(NHDR_DATA, FRAG_HEADER.size, 0, first, offset, total)
            self.batch += chunk
            if self.retained:
                self._retain(self.batch, len(self.batch) - len(chunk) - _FRAGMENT_OVERHEAD, len(self.batch))
            sqn = (sqn + 1) & 0xFFFFFFFF
            if len(self.batch) >= self.batching_minimum_length:
                self._flush_locked()
        return sqn

    def _flush_or_arm_timer(self) -> None:
        """Implicit batching: send a full batch now, else make sure the interval flushes it."""
        if len(self.batch) >= self.batching_minimum_length:
            self._flush_locked()
        elif not self.flush_timer_armed:
            self.flush_timer_armed = True
            self.loop.call_soon_threadsafe(self._arm_flush_timer)

    def _arm_flush_timer(self) -> None:
        self.loop.call_later(self.batching_interval, self._timer_flush)

    def _timer_flush(self) -> None:
        if not self.lock.acquire(blocking=False):
            # A sending thread has the lock (it may wait for a receiver or the rate for long):
            # the loop does not wait; it looks again after the interval (the timer stays armed).
            self.loop.call_later(self.batching_interval, self._timer_flush)
            return
        try:
            self.flush_timer_armed = False
            if self.batch:
                self._flush_locked()
        finally:
            self.lock.release()

    def flush(self) -> None:
        with self.lock:
            self._flush_locked()
        if self.overflow == "block":
            self.wait_drained(0)

    def _flush_locked(self) -> None:
        """Hand the batch to the transport. Lock held."""
        if not self.batch:
            return
        data, self.batch = self.batch, bytearray()
        self._deliver_counted(data)

    def _deliver_counted(self, data) -> None:
        size = len(data)
        self._deliver(data)              # counted after: the send is what a paced message waits for
        self._count_batch(size)

    def _count_batch(self, size: int) -> None:
        self.counters["batches"] += 1
        self.counters["bytes_sent"] += size

    def _deliver(self, data) -> None:
        """Send or queue `data` (bytes-like; it may be a view valid only during this call)."""
        raise NotImplementedError

    def send_control(self, data) -> None:
        """Send a CONTROL message (a TSNI) from the loop's thread, lock held, never waiting for
        room: the caller sends only when nothing is queued, so each transport's _deliver goes
        straight through (LBT-IPC overrides: its ring may still be full)."""
        self._deliver(data)

    def backlog(self) -> float | None:
        """None while sends go through; else since when its receivers have taken nothing (a
        transport with no queues of its own never has a backlog)."""
        return None

    def wait_drained(self, limit: int, only=None, timeout: float | None = None) -> bool:
        """Block until the transport holds at most `limit` queued bytes (a transport with no
        queues of its own returns at once)."""
        return True

