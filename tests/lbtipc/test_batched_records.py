"""An LBT-IPC receiver parses the records of one read of the ring at once: what a source wrote
while its receiver was not reading arrives as one batch, in order, whole; a record that is not
whole frames is dropped, after the records before it went, and ends the stream. Real contexts,
rings and shared memory."""
from __future__ import annotations

import pytest

from router.ipc import layout
from router.ipc.shm import SharedSegment
from router.um.context import Context
from router.um.frame_batch import BATCH_BYTES
from tests.lbtipc.sessions import joined_stream
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration


def _message(n: int, size: int) -> bytes:
    return (b"message %06d " % n).ljust(size, bytes([n & 0xFF]))


def test_the_records_of_one_read_reach_the_application_as_one_batch(domain):
    options = domain.overrides()
    with Context(**options) as receiving, Context(transport="lbtipc", **options) as sending:
        batches = []
        receiving.receiver("ipc.batched", on_batch=lambda messages: batches.append([m.data for m in messages]))
        source = sending.source("ipc.batched")
        stream = joined_stream(receiving)
        wait_for(lambda: source.session.receiver_count == 1, 10, message="the receiver reads the ring")
        receiving.loop.call_and_wait(stream.pause)
        # Each larger than the batching minimum: a record of its own in the source's ring.
        sent = [_message(n, 3000) for n in range(40)]
        for data in sent:
            source.send(data)
        receiving.loop.call_and_wait(stream.resume)
        wait_for(lambda: sum(map(len, batches)) == len(sent), 10, message="every message")
        assert [data for batch in batches for data in batch] == sent
        assert len(batches) == 1                       # 40 records, 120 KB: one read, one parse
        # A read of more than BATCH_BYTES is parsed in pieces, still in order.
        receiving.loop.call_and_wait(stream.pause)
        more = [_message(n, 30000) for n in range(40, 60)]
        for data in more:
            source.send(data)
        receiving.loop.call_and_wait(stream.resume)
        wait_for(lambda: sum(map(len, batches)) == len(sent) + len(more), 10, message="the larger messages")
        assert [data for batch in batches[1:] for data in batch] == more
        assert 1 < len(batches) - 1 <= -(-len(more) * 30000 // BATCH_BYTES) + 1
        assert stream.counters["malformed"] == 0 and not stream.closed


def test_a_record_that_is_not_whole_frames_is_dropped_after_the_records_before_it_and_ends_the_stream(domain):
    options = domain.overrides()
    with Context(**options) as receiving, Context(transport="lbtipc", **options) as sending:
        got = []
        receiving.receiver("ipc.broken", on_batch=lambda messages: got.extend(m.data for m in messages))
        source = sending.source("ipc.broken")
        session = source.session
        stream = joined_stream(receiving)
        wait_for(lambda: session.receiver_count == 1, 10, message="the receiver reads the ring")
        receiving.loop.call_and_wait(stream.pause)
        source.send(_message(1, 3000))
        position = session.producer.position
        source.send(_message(2, 3000))
        source.send(_message(3, 3000))
        # The second record's frame claims 100 bytes more than its record holds.
        segment = SharedSegment.attach(session.segment.name)
        try:
            payload = (position & (session.producer.capacity - 1)) + layout.RECORD_HEADER.size
            length = int.from_bytes(segment.memory[payload + 2:payload + 4], "big")
            segment.memory[payload + 2:payload + 4] = (length + 100).to_bytes(2, "big")
        finally:
            segment.close()
        receiving.loop.call_and_wait(stream.resume)
        wait_for(lambda: stream.closed, 10, message="the stream ends at the broken record")
        # The record before it first; the broken one dropped (what came after it in the same read
        # still goes, as the stream ends once the read is over).
        assert got[0] == _message(1, 3000) and _message(2, 3000) not in got
        assert stream.counters["malformed"] >= 1
