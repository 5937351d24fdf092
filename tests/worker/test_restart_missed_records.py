"""A restarted worker and the records addressed to its portal while no worker read them: not sent
(their streams and proxies went with the worker that died, and the record it died on must not kill
its successor too), but counted and logged, never skipped unseen."""
import multiprocessing
import os
import signal
import uuid

import pytest

from router.ipc.ring_producer import RingProducer
from router.monitor.counters import PortalCounters
from router.um.loop import EventLoop
from router.worker.datapath import DataPath, DataPathSpec, RingSet
from router.worker.records import RECORD_FRAMES, encode_frames
from tests.support.processes import wait_for

PAYLOAD = encode_frames(7, bytes(1000), 1, 1000)


@pytest.fixture
def rings():
    ring_set = RingSet(f"t{uuid.uuid4().hex[:10]}", capacity=64 * 1024)
    for index in range(2):
        ring_set.create(index)
    yield ring_set
    ring_set.close()


@pytest.fixture
def crashed_worker(rings):
    """Portal E1's first worker: reads ring 0 until it is killed (SIGKILL: no detach, no goodbye)."""
    context = multiprocessing.get_context("fork")
    ready, child_ready = context.Pipe()

    def run() -> None:
        loop = EventLoop("worker-E1")
        path = DataPath(DataPathSpec(rings, {"E0": 0, "E1": 1}), 1, loop, PortalCounters())
        path.handler = lambda *args: None
        child_ready.send("ready")
        loop.run_until(lambda: False, 60)

    process = context.Process(target=run)
    process.start()
    try:
        assert ready.poll(10) and ready.recv() == "ready"
        yield process
    finally:
        if process.is_alive():
            process.kill()
        process.join(10)
        ready.close()


def kill(process) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.join(10)
    assert not process.is_alive()


def restarted_egress(rings, counters: PortalCounters, got: list) -> DataPath:
    path = DataPath(DataPathSpec(rings, {"E0": 0, "E1": 1}), 1, EventLoop("worker-E1-again"), counters,
                    restarted=True)
    path.handler = lambda ring, record_type, payload, now=False: got.append(bytes(payload))
    return path


def test_records_addressed_to_a_portal_while_its_worker_was_down_are_counted_when_it_restarts(
        rings, crashed_worker, caplog):
    producer = RingProducer(rings.segments[0].memory, wakeups=rings.wakeups(0))
    counters, got, egress = PortalCounters(), [], None
    try:
        assert producer.offer(RECORD_FRAMES, PAYLOAD, 0b10)    # read by the first worker, or lost with it
        kill(crashed_worker)
        for _ in range(10):                                    # while it is down
            assert producer.offer(RECORD_FRAMES, PAYLOAD, 0b10)
        assert producer.offer(RECORD_FRAMES, PAYLOAD, 0b01)    # not its: not counted
        with caplog.at_level("WARNING", logger="router"):
            egress = restarted_egress(rings, counters, got)
        missed = counters.get("ring_records_missed_while_down")
        assert missed in (10, 11), missed       # the first one too if the first worker died before reading it
        assert counters.get("ring_record_bytes_missed_while_down") == missed * len(PAYLOAD)
        assert any("UMR-3002-3" in r.getMessage() and f"{missed} records" in r.getMessage()
                   for r in caplog.records), caplog.text
        assert got == [] and counters.get("ring_laps") == 0
        assert producer.offer(RECORD_FRAMES, PAYLOAD, 0b10)    # after the restart: delivered, not skipped
        wait_for(lambda: egress.loop.run_once(0.01) or got, 10, message="the new record is read")
        assert got == [PAYLOAD] and counters.get("ring_records_missed_while_down") == missed
    finally:
        producer.close()
        if egress is not None:
            egress.close()
            egress.loop.close()


def test_a_restarted_worker_whose_records_were_overwritten_counts_them_as_lapped(rings, crashed_worker):
    """Down longer than the rings' heartbeat timeout with traffic for it: the producers wrote on over
    what it had not read. The restarted worker counts those bytes as lost (ring_bytes_lapped)."""
    producer = RingProducer(rings.segments[0].memory, wakeups=rings.wakeups(0))
    counters, got, egress = PortalCounters(), [], None
    try:
        kill(crashed_worker)
        written = 0
        while written < 200 * 1024:                            # 200 KB through a 64 KB ring
            if producer.offer(RECORD_FRAMES, PAYLOAD, 0b10):
                written += len(PAYLOAD)
            else:
                producer.wait_for_space(len(PAYLOAD), 10)      # until the dead worker is judged so
        egress = restarted_egress(rings, counters, got)
        assert counters.get("ring_laps") == 1 and counters.get("ring_bytes_lapped") > 64 * 1024
        assert got == [] and counters.get("ring_records_missed_while_down") == 0
    finally:
        producer.close()
        if egress is not None:
            egress.close()
            egress.loop.close()
