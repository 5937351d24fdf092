"""Adaptive worker scheduling: the policy follows the fragments a worker moves, with hysteresis."""
from __future__ import annotations

import os

import pytest

from router.monitor.counters import PortalCounters
from router.worker.scheduling import (BATCH_ABOVE, LATENCY_SLICE_NS, NORMAL_BELOW, NUDGE_INTERVAL, READ_COALESCING,
                                      WorkerScheduling, policy_of, slice_of, wants_batch)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def scheduling(mode="adaptive", fail=False):
    counters, clock, applied = PortalCounters(), Clock(), []

    def set_policy(batch: bool) -> None:
        if fail:
            raise PermissionError(1, "Operation not permitted")
        applied.append(batch)
    return WorkerScheduling(mode, [counters], clock, set_policy), counters, clock, applied


def run(sched, counters, clock, rates, counter="transport_topic_fragments_rcvd", interval=0.1):
    for rate in rates:
        clock.now += interval
        counters.add(counter, int(rate * interval))
        sched.tick()


@pytest.mark.parametrize("batching, rate, expected", [
    (False, BATCH_ABOVE - 1, False), (False, BATCH_ABOVE, True),
    (True, NORMAL_BELOW, True), (True, NORMAL_BELOW - 1, False), (True, BATCH_ABOVE - 1, True),
])
def test_thresholds_have_hysteresis(batching, rate, expected):
    assert wants_batch(batching, rate) is expected


def test_a_stream_switches_to_batch_and_idleness_back():
    sched, counters, clock, applied = scheduling()
    assert applied == [False]                                 # the normal policy with the short slice
    run(sched, counters, clock, [0, 2000, 2000])             # paced messages: stays normal
    assert applied == [False] and not sched.batching
    run(sched, counters, clock, [400_000])
    assert applied == [False, True] and sched.batching
    run(sched, counters, clock, [10_000, 6_000])              # between the thresholds: keeps batching
    assert applied == [False, True]
    run(sched, counters, clock, [0])
    assert applied == [False, True, False] and not sched.batching


@pytest.mark.parametrize("counter", ["transport_topic_fragments_sent", "data_msgs_rcvd", "data_fragments_sent"])
def test_every_kind_of_portal_counts_its_work(counter):
    sched, counters, clock, applied = scheduling()
    run(sched, counters, clock, [0, 100_000], counter=counter)
    assert applied == [False, True]


def test_a_burst_judges_the_rate_at_once_but_not_more_often_than_the_nudge_interval():
    """A stream that starts after an idle spell is batched within milliseconds of its first
    bursts, not at the next heartbeat."""
    sched, counters, clock, applied = scheduling()
    run(sched, counters, clock, [0])                          # a heartbeat of an idle worker
    clock.now += NUDGE_INTERVAL / 2
    counters.add("transport_topic_fragments_rcvd", 5_000)
    sched.nudge()                                             # judged just now: waits
    clock.now += NUDGE_INTERVAL
    sched.nudge()                                             # 5,000 fragments in 7.5 ms: a stream
    assert applied == [False, True] and sched.batching
    clock.now += 1.0
    sched.nudge()                                             # batching: only heartbeats judge
    assert applied == [False, True] and sched.batching


def test_a_burst_of_paced_traffic_does_not_batch():
    sched, counters, clock, applied = scheduling()
    run(sched, counters, clock, [2000])
    for _ in range(20):                                        # 8 KB messages, 2000 a second
        clock.now += NUDGE_INTERVAL
        counters.add("transport_topic_fragments_rcvd", 10)
        sched.nudge()
    assert applied == [False] and not sched.batching


def test_normal_never_switches():
    """It takes the normal policy with the short slice once, and never batches."""
    sched, counters, clock, applied = scheduling("normal")
    run(sched, counters, clock, [0, 1_000_000, 1_000_000])
    clock.now += 1.0
    counters.add("transport_topic_fragments_rcvd", 1_000_000)
    sched.nudge()
    assert applied == [False] and not sched.batching


def test_a_refused_switch_keeps_the_normal_policy_for_good():
    sched, counters, clock, applied = scheduling(fail=True)
    run(sched, counters, clock, [0, 1_000_000])
    assert sched.mode == "normal" and not sched.batching
    run(sched, counters, clock, [1_000_000])
    assert not sched.batching


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="adaptive, normal"):
        scheduling("realtime")


def test_the_real_policy_switch_is_visible_to_other_processes():
    """The kernel calls themselves, in a child (so this test process keeps its policy): an adaptive
    worker starts on the normal policy with the short slice, and batches with the default one."""
    default_slice = slice_of(os.getpid())
    step_r, step_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            counters, clock = PortalCounters(), Clock()
            sched = WorkerScheduling("adaptive", [counters], clock)
            os.write(step_w, b"1")
            os.read(go_r, 1)
            run(sched, counters, clock, [0, 1_000_000])
            os.write(step_w, b"1" if sched.batching else b"0")
            os.read(go_r, 1)
        finally:
            os._exit(0)
    try:
        assert os.read(step_r, 1) == b"1"
        assert policy_of(pid) == "normal"
        # A kernel with custom slices (6.12 and later) reports each task's slice; one without
        # reports none, and ignores the request.
        assert slice_of(pid) == (LATENCY_SLICE_NS if default_slice is not None else None)
        os.write(go_w, b"x")
        assert os.read(step_r, 1) == b"1"
        assert policy_of(pid) == "batch"
        assert slice_of(pid) == default_slice
        assert policy_of(os.getpid()) == "normal" and slice_of(os.getpid()) == default_slice
    finally:
        os.write(go_w, b"x")
        os.waitpid(pid, 0)
        for fd in (step_r, step_w, go_r, go_w):
            os.close(fd)


def test_a_worker_started_with_a_policy_of_its_own_keeps_it():
    counters, clock, applied = PortalCounters(), Clock(), []
    sched = WorkerScheduling("adaptive", [counters], clock, applied.append, inherited=os.SCHED_FIFO)
    run(sched, counters, clock, [0, 1_000_000])
    assert sched.mode == "normal" and applied == []


class _Loop:
    read_coalescing = 0.0


def test_a_batching_worker_coalesces_its_reads_and_stops_when_it_goes_back():
    counters, clock, loop = PortalCounters(), Clock(), _Loop()
    sched = WorkerScheduling("adaptive", [counters], clock, lambda batch: None, loop=loop)
    run(sched, counters, clock, [0, 2000])
    assert loop.read_coalescing == 0.0
    run(sched, counters, clock, [400_000])
    assert loop.read_coalescing == READ_COALESCING > 0
    run(sched, counters, clock, [0])
    assert loop.read_coalescing == 0.0


def test_a_worker_whose_policy_switch_is_refused_never_coalesces():
    def refuse(batch):
        raise PermissionError(1, "Operation not permitted")
    counters, clock, loop = PortalCounters(), Clock(), _Loop()
    sched = WorkerScheduling("adaptive", [counters], clock, refuse, loop=loop)
    run(sched, counters, clock, [0, 400_000])
    assert loop.read_coalescing == 0.0 and not sched.batching
