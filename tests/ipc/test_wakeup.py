"""Wakeups: a consumer parked in another process is woken by the producer, through an eventfd
(forked workers) and through a FIFO (unrelated processes); both plug into a selector."""
from __future__ import annotations

import os
import selectors
import struct
import time

import pytest

from router.ipc import layout
from router.ipc.ring import RingConsumer, RingProducer
from router.ipc.shm import SharedSegment
from router.ipc.wakeup import EventfdWakeup, FifoWakeup, RingWakeups

CAPACITY = 1 << 16
PARKED_TIMEOUT = 60.0  # the consumer would sleep this long if nobody woke it


def _park_slot_value(segment: SharedSegment, consumer: int) -> int:
    return struct.unpack_from("<q", segment.memory, CAPACITY + layout.consumer_park_offset(consumer))[0]


def _consumer_process(segment_name: str, wakeups: RingWakeups, result) -> None:
    segment = SharedSegment.attach(segment_name)
    consumer = RingConsumer(segment.memory, 0, wakeups=wakeups)
    result[0] = 1  # attached
    received: list[bytes] = []
    deadline = time.monotonic() + PARKED_TIMEOUT
    while not received and time.monotonic() < deadline:
        woke_at = time.monotonic_ns()
        if consumer.wait(deadline - time.monotonic()):
            consumer.read_batch(lambda record_type, view: received.append(bytes(view)))
        result[2] = time.monotonic_ns() - woke_at
    result[1] = 1 if received == [b"wake up"] else -1
    os._exit(0)


@pytest.mark.parametrize("kind", ["eventfd", "fifo"])
def test_a_parked_consumer_in_another_process_is_woken_by_the_producer(
    kind, make_ring, fork_context, processes
):
    segment = make_ring(CAPACITY, consumer_slots=1, heartbeat_timeout=PARKED_TIMEOUT * 4)
    if kind == "eventfd":
        wakeups = RingWakeups.eventfds(1)
    else:
        wakeups = RingWakeups.fifos(segment.name, 1, create=True)
    try:
        result = fork_context.Array("q", 3, lock=False)
        process = fork_context.Process(target=_consumer_process, args=(segment.name, wakeups, result))
        processes.append(process)
        process.start()
        deadline = time.monotonic() + 30
        while _park_slot_value(segment, 0) == 0:  # wait until it really sleeps
            assert time.monotonic() < deadline and process.is_alive(), "consumer never parked"
            time.sleep(0.01)
        time.sleep(0.05)
        producer = RingProducer(segment.memory, wakeups=wakeups)
        assert producer.offer(1, b"wake up", 1)
        process.join(30)  # far below PARKED_TIMEOUT: only a wakeup gets it out this early
        assert process.exitcode == 0
        assert result[1] == 1
        assert result[2] < PARKED_TIMEOUT * 1e9 / 2
        print(f"{kind}: parked consumer received the record {result[2] / 1e3:.0f} us after parking began")
        producer.close()
    finally:
        wakeups.close()
        wakeups.unlink()


@pytest.mark.parametrize("make", [EventfdWakeup, lambda: None])
def test_wakeups_work_in_a_selector_loop(make, tmp_path):
    wakeup = make() or FifoWakeup.create(str(tmp_path / "wake"))
    selector = selectors.DefaultSelector()
    selector.register(wakeup.fileno(), selectors.EVENT_READ)
    try:
        assert selector.select(0) == []
        assert wakeup.drain() == 0
        wakeup.wake()
        wakeup.wake()
        assert len(selector.select(5)) == 1
        assert wakeup.drain() == 2
        assert selector.select(0) == []
        assert wakeup.wait(0.01) is False
    finally:
        selector.close()
        wakeup.close()


def test_a_fifo_waker_without_a_sleeper_does_nothing(tmp_path):
    waker = FifoWakeup.create(str(tmp_path / "wake"))
    waker.wake()  # nobody holds the FIFO open for reading: no error, no block
    sleeper = FifoWakeup(waker.path)
    sleeper.fileno()
    waker.wake()
    assert sleeper.wait(5)
    sleeper.close()
    waker.wake()  # the sleeper went away again
    waker.close()
    waker.unlink()
    assert not os.path.exists(waker.path)


def _draining_consumer(segment_name: str, wakeups: RingWakeups) -> None:
    segment = SharedSegment.attach(segment_name)
    consumer = RingConsumer(segment.memory, 0, wakeups=wakeups, resume=True)
    park_offset = CAPACITY + layout.PRODUCER_PARK_OFFSET
    deadline = time.monotonic() + 30
    while struct.unpack_from("<q", segment.memory, park_offset)[0] == 0:  # until the producer sleeps
        if time.monotonic() > deadline:
            os._exit(2)
        time.sleep(0.01)
    consumer.read_batch(lambda record_type, view: None)
    os._exit(0)


def test_a_producer_parked_on_a_full_ring_is_woken_by_a_consumer_in_another_process(
    make_ring, fork_context, processes
):
    segment = make_ring(CAPACITY, consumer_slots=1, heartbeat_timeout=PARKED_TIMEOUT * 4)
    wakeups = RingWakeups.eventfds(1)
    try:
        producer = RingProducer(segment.memory, wakeups=wakeups)
        holder = RingConsumer(segment.memory, 0)  # attaches slot 0; the child resumes from its head
        while producer.offer(1, bytes(1000), 1):
            pass
        process = fork_context.Process(target=_draining_consumer, args=(segment.name, wakeups))
        processes.append(process)
        process.start()
        claim = producer.claim(1000, 1, 1, deadline=time.monotonic() + PARKED_TIMEOUT)
        assert claim is not None  # only the consumer's wakeup ends the sleep before the deadline
        producer.commit(claim)
        process.join(30)
        assert process.exitcode == 0
        holder.close()
        producer.close()
    finally:
        wakeups.close()
