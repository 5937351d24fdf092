"""An LBT-IPC receiver closed from its own message callback (an application that stops after the
message it waited for): the stream lets go of the ring while the ring is being read, so what
it let go of must wait until the read is over. Real contexts, rings and shared memory."""
from __future__ import annotations

import os

import pytest

from router.lbtipc import naming, source
from router.um.context import Context
from tests.lbtipc.sessions import joined_stream
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration


def test_a_receiver_closed_by_its_own_message_callback_lets_go_of_the_ring(domain):
    options = domain.overrides()
    with Context(**options) as receiving, Context(transport="lbtipc", **options) as sending:
        got = []
        receiver = None

        def on_message(message):
            got.append(message.data)
            if message.data == b"stop":
                receiver.close()

        receiver = receiving.receiver("ipc.stop", on_message=on_message)
        source_ = sending.source("ipc.stop")
        stream = joined_stream(receiving)
        wait_for(lambda: source_.session.receiver_count == 1, 10, message="the receiver reads the ring")
        for data in (b"first", b"stop", b"after", b"and more"):   # one batch, one record of the ring
            source_.send(data)
        source_.flush()
        wait_for(lambda: stream.closed, 10, message="the stream closed with its last receiver")
        # It let go of its slot, its mapping and its wakeups, and nothing failed on the way.
        wait_for(lambda: source_.session.receiver_count == 0, 10, message="the source sees its receiver gone")
        assert not any(os.path.exists(f"{naming.SHM_DIRECTORY}/{source_.session.segment.name.lstrip('/')}.slot{n}")
                       for n in range(source.SLOTS))
        assert stream.segment._mmap.closed
        assert stream.counters["callback_errors"] == 0
        assert receiving.loop.callback_errors == 0
        assert got[:2] == [b"first", b"stop"]
