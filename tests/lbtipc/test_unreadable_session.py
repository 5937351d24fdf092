"""An advertised LBT-IPC session whose shared memory holds no ring this receiver can read (a
source built with another ring layout, say): joining it is refused with a clear error and
counted as malformed transport data, and leaves no receiver slot claimed nor memory mapped.
Real contexts, rings and shared memory."""
from __future__ import annotations

import glob
import struct

import pytest

from router.ipc import layout
from router.ipc.shm import SharedSegment
from router.um.context import Context
from tests.lbtipc.sessions import collect
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration


def test_a_session_whose_ring_is_of_another_layout_is_refused_and_counted(domain):
    options = domain.overrides()
    with Context(**options) as receiving, Context(transport="lbtipc", **options) as sending:
        source = sending.source("ipc.alien")
        session = source.session
        segment = SharedSegment.attach(session.segment.name)
        try:
            # The ring's layout magic of another version: the rest of it is as a receiver finds it.
            struct.pack_into("<Q", segment.memory, session.producer.capacity + layout.MAGIC_OFFSET,
                             layout.LAYOUT_MAGIC + 1)
        finally:
            segment.close()
        got, events = collect(receiving, "ipc.alien")
        wait_for(lambda: receiving.stream_counters["transport_malformed"] >= 1, 10,
                 message="the unreadable session counted as malformed")
        assert receiving.loop.callback_errors == 0
        assert not receiving.clients and events == []
        assert not glob.glob(f"/dev/shm/{session.segment.name.lstrip('/')}.slot*")
        assert session.receiver_count == 0
