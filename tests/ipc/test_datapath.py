"""A worker's data path over real shared-memory rings: what a full ring tells the other portals."""
import uuid

import pytest

from router.ipc.ring_consumer import RingConsumer
from router.monitor.counters import PortalCounters
from router.um.loop import EventLoop
from router.worker.datapath import DataPath, DataPathSpec, RingSet


class _Connection:
    def __init__(self):
        self.paused = False

    def pause(self):
        self.paused = True

    def resume(self):
        self.paused = False


@pytest.fixture
def rings():
    ring_set = RingSet(f"t{uuid.uuid4().hex[:10]}", capacity=64 * 1024)
    for index in range(3):
        ring_set.create(index)
    loop = EventLoop("datapath-test")
    yield ring_set, loop
    loop.close()
    ring_set.close()


def test_a_full_ring_names_every_portal_its_waiting_records_are_for(rings):
    ring_set, loop = rings
    counters = PortalCounters()
    path = DataPath(DataPathSpec(ring_set, {"E0": 0, "E1": 1, "E2": 2}), 0, loop, counters)
    reader_1 = RingConsumer(ring_set.segments[0].memory, 1, wakeups=ring_set.wakeups(0))   # portal 1 reads ring 0
    reader_2 = RingConsumer(ring_set.segments[0].memory, 2, wakeups=ring_set.wakeups(0))
    try:
        connection = _Connection()
        frames = bytes(1000)
        while not connection.paused:            # records for portal 1 only, until the ring is full
            path.frames(0b010, 1, frames, 1, 1000, connection)
        assert counters.get("ring_full_events") == 1
        assert reader_1.producer_waiting_for() == 0b010
        path.frames(0b100, 2, frames, 1, 1000, connection)   # then one for portal 2 waits behind them
        assert reader_2.producer_waiting_for() == 0b110
        drained = []
        for reader in (reader_1, reader_2):
            while reader.read_batch(lambda t, p: drained.append(t)):
                pass
        assert loop.run_until(lambda: not connection.paused, 5)     # woken by the space: written, resumed
        assert reader_1.producer_waiting_for() == 0 and not path.pending
    finally:
        for reader in (reader_1, reader_2):
            reader.close()
        path.close()
