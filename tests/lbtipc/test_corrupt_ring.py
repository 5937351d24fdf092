"""An LBT-IPC ring whose record header says more than its source published (a length another
process scribbled over, a source of another build): the receiver counts it as malformed, says
so, and goes on from what was published; its context's loop does not spin on it for ever.
Real contexts, rings and shared memory."""
from __future__ import annotations

import pytest

from router.ipc import layout
from router.ipc.shm import SharedSegment
from router.um.context import Context
from tests.lbtipc.sessions import collect, joined_stream
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration


def test_a_record_longer_than_what_was_published_is_counted_and_the_loop_goes_on(domain):
    options = domain.overrides()
    with Context(**options) as receiving, Context(transport="lbtipc", **options) as sending:
        got, events = collect(receiving, "ipc.scribbled")
        source = sending.source("ipc.scribbled")
        session = source.session
        stream = joined_stream(receiving)
        wait_for(lambda: session.receiver_count == 1, 10, message="the receiver reads the ring")
        source.send(b"first", flush=True)
        wait_for(lambda: got == [b"first"], 10, message="the first message")
        receiving.loop.call_and_wait(stream.pause)
        position = session.producer.position
        source.send(b"second", flush=True)
        segment = SharedSegment.attach(session.segment.name)
        try:
            offset = position & (session.producer.capacity - 1)
            _, record_type, destinations = layout.RECORD_HEADER.unpack_from(segment.memory, offset)
            layout.RECORD_HEADER.pack_into(segment.memory, offset, 900_000, record_type, destinations)
        finally:
            segment.close()
        receiving.loop.call_and_wait(stream.resume)
        wait_for(lambda: stream.counters["malformed"] >= 1, 10, message="the bad record counted")
        assert receiving.loop.call_and_wait(lambda: True, timeout=10)    # the loop runs its other work
        assert receiving.stream_counters["transport_malformed"] == 1
        source.send(b"third", flush=True)                   # what is published after it is read
        wait_for(lambda: len(got) >= 2, 10, message="the message after the bad record")
        assert got == [b"first", b"third"] and not stream.closed
        assert events == ["BOS", "UNRECOVERABLE_LOSS"]           # "second" went with the bad record, told
