"""A router's LBT-IPC proxy source queues what its full ring cannot take; a receiver that dies
while batches wait must stop holding them back once its heartbeat is stale, although it never
wakes the source again (real ring and shared memory, one process: the dead receiver is a consumer
that attached and then stopped)."""
from __future__ import annotations

import time

from router.ipc.ring_consumer import RingConsumer
from router.ipc.shm import SharedSegment
from router.lbtipc import naming, source
from router.um.loop import EventLoop


def test_a_dead_receiver_stops_holding_the_queue_back(monkeypatch):
    monkeypatch.setattr(source, "HEARTBEAT_TIMEOUT", 0.5)
    loop = EventLoop("test")
    session = source.LbtipcSourceSession(loop, id_low=30000, id_high=30999, window=1 << 20, datagram_max_size=8192,
                                         batching_minimum_length=1, batching_interval=0.01, overflow="drop",
                                         max_queue=4 << 20)
    name = session.segment.name
    segment = SharedSegment.attach(name)
    slot = naming.claim_slot(name, source.SLOTS)
    dead = RingConsumer(segment.memory, slot)
    try:
        dead.heartbeat()                          # attached and alive, then never reads again
        batch = bytes(100_000)
        for _ in range(15):                       # 1.5 MB into a 1 MiB ring
            session.send_raw(batch)
        assert session.waiting and session.backlog() is not None
        deadline = time.monotonic() + 10
        while session.waiting and time.monotonic() < deadline:
            loop.run_once(0.05)
        assert not session.waiting, "the queue still waits for a receiver that died"
        assert session.backlog() is None
        assert session.counters["dropped_would_block_batches"] == 0
    finally:
        dead.close()
        naming.release_slot(name, slot)
        segment.close()
        session.close()
        loop.close()
