"""The peer link's outbound queue: batching, a byte bound, and honest drop counting.

Data messages collect in a batch that goes out when it reaches ``<batching><min-length>``,
when its first message has waited ``<batch-interval>`` (the link's timer calls
:meth:`OutboundQueue.flush_batch`), when the next message would make it exceed
``<max-datagram>``, or when a control message is sent: control messages flush the batch first
(order is kept) and are never held back (spec/dro.md §1.6).

Everything not yet written to the socket (batch + unwritten chunks) counts against
``<max-queue>`` bytes; a data message that would exceed it is dropped and counted "would block"
(spec/dro.md §2.1). Control messages are queued whatever the queue holds, behind the data
before them: an interest message, an advertisement or its EOS refused by a link busy with data
would be lost for good (nothing sends it again until the link reconnects: the companion would
never forward that topic, or keep a stream that ended), where a dropped data message is one
message. They are few and small; a companion that reads nothing for so long that they pass
:data:`CONTROL_BACKLOG` bytes beyond the bound (one that still sends keepalives while its own
rings hold it back for good) gets its link dropped instead (False), and what the link repeats on
coming up again replaces them. Data left in the
queue when the connection goes down is counted "not operational" by :meth:`discard`.
Fragments are counted "sent" only once the socket took all of their bytes.

Data may be lent, not given: a memoryview of a ring record (or any bytes-like object that is not
`bytes`) is the caller's only for its call. A lent message that goes out as a chunk of its own
(it fills a batch alone: any ring read of `<min-length>` bytes or more) is written from the
caller's memory, and only what the socket did not take is copied, by :meth:`OutboundQueue.keep_lent`,
which the caller calls before its memory moves on; one that waits in a batch is copied at once.
An 8 KB record would otherwise be copied into a new object every time, though the socket nearly
always takes it at once.
"""
from __future__ import annotations

import itertools
import time
from collections import deque

_MAX_IOVEC = 64
CONTROL_BACKLOG = 16 << 20

QUEUED = "queued"
BATCH_STARTED = "batch-started"     # the first message of a new batch: start the batch timer
DROPPED = "dropped"


class _Chunk:
    __slots__ = ("view", "fragments", "data_bytes")

    def __init__(self, data: bytes, fragments: int, data_bytes: int):
        self.view, self.fragments, self.data_bytes = memoryview(data), fragments, data_bytes


class OutboundQueue:
    def __init__(self, max_queue: int, min_length: int, max_datagram: int, counters):
        self.max_queue = max_queue
        self.min_length = min_length
        self.max_datagram = max_datagram
        self.counters = counters
        self._batch: list[bytes] = []
        self._batch_bytes = 0
        self._batch_fragments = 0
        self._chunks: deque[_Chunk] = deque()
        self._unwritten = 0
        self._lent: _Chunk | None = None   # the chunk still in the caller's memory (keep_lent)
        self.progress = 0.0           # time.monotonic() of the last write while chunks were waiting
        counters.set("data_bytes_enqueued_limit", max_queue)

    @property
    def total_bytes(self) -> int:
        return self._batch_bytes + self._unwritten

    @property
    def has_unwritten(self) -> bool:
        return bool(self._chunks)

    @property
    def unwritten_bytes(self) -> int:
        """Bytes the socket has not taken yet (the batch being filled is not counted)."""
        return self._unwritten

    @property
    def batch_pending(self) -> bool:
        return bool(self._batch)

    def add_data(self, data, fragments: int = 1) -> str:
        """Queue data (`bytes`, or lent: see the module's docstring)."""
        counters = self.counters
        counters.add_pair("data_fragments_forwarded", "data_fragment_bytes_forwarded", fragments, len(data))
        if self.total_bytes + len(data) > self.max_queue:
            counters.add_pair("data_fragments_dropped_would_block", "data_fragment_bytes_dropped_would_block",
                              fragments, len(data))
            return DROPPED
        if self._batch and self._batch_bytes + len(data) > self.max_datagram:
            self.flush_batch()
        started = not self._batch
        lent = type(data) is not bytes
        if lent and (self._batch or len(data) < self.min_length):
            data, lent = bytes(data), False             # it waits in a batch, after the caller's call
        self._batch.append(data)
        self._batch_bytes += len(data)
        self._batch_fragments += fragments
        if self._batch_bytes >= self.min_length:
            self.flush_batch()
            if lent:
                self._lent = self._chunks[-1]
            started = False
        self._update_gauges()
        return BATCH_STARTED if started else QUEUED

    def keep_lent(self) -> None:
        """Copy what the socket has not taken of a lent chunk: the caller's memory moves on now."""
        chunk, self._lent = self._lent, None
        if chunk is None:
            return
        for queued in reversed(self._chunks):       # the newest, short of a control message after it
            if queued is chunk:
                chunk.view = memoryview(bytes(chunk.view))
                return

    def add_control(self, data: bytes) -> bool:
        """Queue a control message behind any pending batch, whatever data the queue holds; False
        only past CONTROL_BACKLOG (see above)."""
        if self.total_bytes + len(data) > self.max_queue + CONTROL_BACKLOG:
            return False
        self.flush_batch()
        self._chunks.append(_Chunk(data, 0, 0))
        self._unwritten += len(data)
        self._update_gauges()
        return True

    def flush_batch(self) -> None:
        """Close the current batch: it becomes one chunk for the socket."""
        if not self._batch:
            return
        data = self._batch[0] if len(self._batch) == 1 else b"".join(self._batch)
        self._chunks.append(_Chunk(data, self._batch_fragments, len(data)))
        self._unwritten += len(data)
        self._count_batch(self._batch_fragments, len(data))
        self._batch, self._batch_bytes, self._batch_fragments = [], 0, 0

    def _count_batch(self, messages: int, size: int) -> None:
        """The DRO's batch figures: messages and bytes per batch, smallest, mean and largest."""
        counters = self.counters
        batches = counters.add_get("batches")
        for value, total, low, mean, high in ((messages, "batch_msgs_total", "batch_msgs_min", "batch_msgs_mean",
                                               "batch_msgs_max"),
                                              (size, "batch_bytes_total", "batch_bytes_min", "batch_bytes_mean",
                                               "batch_bytes_max")):
            counters.set(mean, counters.add_get(total, value) // batches)
            counters.set_max(high, value)
            smallest = counters.get(low)
            if not smallest or value < smallest:
                counters.set(low, value)

    def write_to(self, sock) -> int:
        """Write as much as the socket (or the link's stream, router.portals.peer_stream) takes;
        the bytes written. OSError other than BlockingIOError (a reset, a broken pipe) is the
        caller's: the connection is gone."""
        written = 0
        while self._chunks:
            # islice, not a copy of the deque: a backlog of thousands of chunks is not copied per write.
            views = [chunk.view for chunk in itertools.islice(self._chunks, _MAX_IOVEC)]
            try:
                sent = sock.sendmsg(views)
            except BlockingIOError:
                break
            if sent == 0:
                break
            written += sent
            self._advance(sent)
        if self._chunks:
            if written or not self.progress:
                self.progress = time.monotonic()
        else:
            self.progress = 0.0
        self._update_gauges()
        return written

    def _advance(self, sent: int) -> None:
        self._unwritten -= sent
        while sent:
            chunk = self._chunks[0]
            if sent < len(chunk.view):
                chunk.view = chunk.view[sent:]
                return
            sent -= len(chunk.view)
            self._chunks.popleft()
            if chunk.fragments:
                self.counters.add_pair("data_fragments_sent", "data_fragment_bytes_sent",
                                       chunk.fragments, chunk.data_bytes)

    def discard(self) -> tuple[int, int]:
        """Drop everything (the connection is gone); data counted "not operational".
        Returns (fragments, bytes) of data dropped."""
        fragments = self._batch_fragments + sum(c.fragments for c in self._chunks)
        data_bytes = self._batch_bytes + sum(c.data_bytes for c in self._chunks)
        if fragments:
            self.counters.add_pair("data_fragments_dropped_not_operational",
                                   "data_fragment_bytes_dropped_not_operational", fragments, data_bytes)
        self._chunks.clear()
        self._unwritten = 0
        self._lent = None
        self._batch, self._batch_bytes, self._batch_fragments = [], 0, 0
        self._update_gauges()
        return fragments, data_bytes

    def _update_gauges(self) -> None:
        total = self.total_bytes
        self.counters.set("data_bytes_enqueued", total)
        self.counters.set_max("data_bytes_enqueued_max", total)
