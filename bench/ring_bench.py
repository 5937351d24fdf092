"""Shared-memory ring vs. pyzmq PUSH/PULL (ipc://), multiprocessing.Queue and a numpy memcpy.

Throughput: one producer process, one consumer process, 64 B / 1 KB / 64 KB messages, each run
bounded in time; the rate is counted at the consumer from its first message to the end marker.
Latency: one record at a time, sent after a pause long enough for the consumer to park, measured
from just before the send to the consumer's handler (both read CLOCK_MONOTONIC).

Run: ``.venv/bin python -m bench.ring_bench`` (``--quick`` for a smoke run that writes nothing).
"""
from __future__ import annotations

import multiprocessing
import os
import struct
import sys
import time
import uuid

import numpy as np
import zmq

from bench.report import table, write_section
from router.ipc import layout
from router.ipc.ring import RingConsumer, RingProducer, init_ring
from router.ipc.shm import SharedSegment
from router.ipc.wakeup import RingWakeups

COMMAND = ".venv/bin/python -m bench.ring_bench"
SIZES = (64, 1024, 65536)
RUN_SECONDS = 2.0
RING_CAPACITY = 4 << 20
END = 2  # record type / marker of the last message
TIMESTAMP = struct.Struct("<q")
FORK = multiprocessing.get_context("fork")
# Shared result slots: first-message time, end time, messages counted (no pickling between processes).
FIRST_NS, END_NS, MESSAGES = range(3)


def _batch_of(size: int) -> int:
    """Records per write_batch / messages per zmq check of the clock: about 128 KB worth."""
    return max(1, min(1024, (128 * 1024) // size))


# -- ring ------------------------------------------------------------------------------------------


def _ring(consumer_slots: int = 1) -> tuple[SharedSegment, RingWakeups]:
    segment = SharedSegment.create("bench", "r" + uuid.uuid4().hex[:10], layout.segment_size(RING_CAPACITY))
    init_ring(segment.memory, RING_CAPACITY, consumer_slots=consumer_slots, heartbeat_timeout=10.0)
    return segment, RingWakeups.eventfds(consumer_slots)


def _ring_producer(name: str, wakeups: RingWakeups, size: int, seconds: float) -> None:
    segment = SharedSegment.attach(name)
    producer = RingProducer(segment.memory, wakeups=wakeups)
    records = [(1, os.urandom(size), 1)] * _batch_of(size)
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        pending = records
        while pending:
            written = producer.write_batch(pending)
            pending = pending[written:] if written else pending
            if pending:
                producer.wait_for_space(size, 1.0)
    while not producer.offer(END, b"", 1):
        producer.wait_for_space(0, 1.0)
    os._exit(0)


def _ring_consumer(name: str, wakeups: RingWakeups, result) -> None:
    segment = SharedSegment.attach(name)
    consumer = RingConsumer(segment.memory, 0, wakeups=wakeups)
    ended = []

    def handle(record_type: int, payload: memoryview) -> None:
        if record_type == END:
            ended.append(time.monotonic_ns())

    count = 0
    while not ended:
        received = consumer.read_batch(handle, 4096)
        if received:
            if count == 0:
                result[FIRST_NS] = time.monotonic_ns()
            count += received
        else:
            consumer.wait(1.0)
    result[END_NS], result[MESSAGES] = ended[0], count - 1
    os._exit(0)


def ring_throughput(size: int, seconds: float) -> float:
    segment, wakeups = _ring()
    try:
        return _pair(_ring_producer, (segment.name, wakeups, size, seconds), _ring_consumer, (segment.name, wakeups))
    finally:
        wakeups.close()
        segment.close()


# -- pyzmq -----------------------------------------------------------------------------------------


def _zmq_producer(address: str, size: int, seconds: float) -> None:
    socket = zmq.Context().socket(zmq.PUSH)
    socket.setsockopt(zmq.SNDHWM, 100_000)
    socket.connect(address)
    payload, batch = os.urandom(size), _batch_of(size)
    send = socket.send
    copy = size < 16384  # zero-copy only pays for large messages
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        for _ in range(batch):
            send(payload, copy=copy)
    send(b"")
    socket.close(linger=-1)
    os._exit(0)


def _zmq_consumer(address: str, result) -> None:
    socket = zmq.Context().socket(zmq.PULL)
    socket.setsockopt(zmq.RCVHWM, 100_000)
    socket.bind(address)
    recv = socket.recv
    count = 0
    first = recv(copy=False)
    result[FIRST_NS] = time.monotonic_ns()
    while True:
        message = recv(copy=False)
        if len(message) == 0:
            break
        count += 1
    result[END_NS], result[MESSAGES] = time.monotonic_ns(), count
    del first
    os._exit(0)


def zmq_throughput(size: int, seconds: float) -> float:
    address = f"ipc:///tmp/umr-bench-{uuid.uuid4().hex[:10]}"
    try:
        return _pair(_zmq_producer, (address, size, seconds), _zmq_consumer, (address,))
    finally:
        if os.path.exists(address[6:]):
            os.unlink(address[6:])


# -- multiprocessing.Queue -------------------------------------------------------------------------


def _queue_producer(queue, size: int, seconds: float) -> None:
    payload, batch = os.urandom(size), _batch_of(size)
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        for _ in range(batch):
            queue.put(payload)
    queue.put(None)
    queue.close()
    queue.join_thread()
    os._exit(0)


def _queue_consumer(queue, result) -> None:
    count = 0
    queue.get()
    result[FIRST_NS] = time.monotonic_ns()
    while queue.get() is not None:
        count += 1
    result[END_NS], result[MESSAGES] = time.monotonic_ns(), count
    os._exit(0)


def queue_throughput(size: int, seconds: float) -> float:
    queue = FORK.Queue(maxsize=100_000)
    return _pair(_queue_producer, (queue, size, seconds), _queue_consumer, (queue,))


# -- memcpy (the physical limit) -------------------------------------------------------------------


def memcpy_bandwidth(seconds: float) -> float:
    """Bytes/s of numpy copies of 64 KB blocks into a ring-sized buffer, cycling, like the ring."""
    source = np.frombuffer(os.urandom(65536), dtype=np.uint8)
    target = np.zeros(RING_CAPACITY, dtype=np.uint8)
    blocks = [target[offset : offset + 65536] for offset in range(0, RING_CAPACITY, 65536)]
    copied, stop = 0, time.monotonic() + seconds
    started = time.perf_counter()
    while time.monotonic() < stop:
        for block in blocks:
            np.copyto(block, source)
        copied += RING_CAPACITY
    return copied / (time.perf_counter() - started)


def _pair(producer, producer_args, consumer, consumer_args) -> float:
    """Run a producer and a consumer process; messages/s as counted by the consumer."""
    result = FORK.Array("q", 3, lock=False)
    receiver = FORK.Process(target=consumer, args=(*consumer_args, result))
    receiver.start()
    time.sleep(0.2)  # let it bind / attach
    sender = FORK.Process(target=producer, args=producer_args)
    sender.start()
    try:
        receiver.join(60)
        if receiver.exitcode != 0:
            raise RuntimeError(f"{consumer.__name__} did not finish")
    finally:
        for process in (sender, receiver):
            if process.is_alive():
                process.kill()
            process.join(5)
    return result[MESSAGES] / ((result[END_NS] - result[FIRST_NS]) / 1e9)


# -- latency ---------------------------------------------------------------------------------------


def _ping_producer(name: str, wakeups: RingWakeups, pings: int, pause: float) -> None:
    segment = SharedSegment.attach(name)
    producer = RingProducer(segment.memory, wakeups=wakeups)
    for _ in range(pings):
        time.sleep(pause)
        producer.offer(1, TIMESTAMP.pack(time.monotonic_ns()), 1)
    producer.offer(END, b"", 1)
    os._exit(0)


def _ping_consumer(name: str, wakeups: RingWakeups, spin: float, latencies) -> None:
    segment = SharedSegment.attach(name)
    consumer = RingConsumer(segment.memory, 0, wakeups=wakeups)
    count = [0]

    def handle(record_type: int, payload: memoryview) -> None:
        if record_type == END:
            count.append(None)
        else:
            latencies[count[0]] = time.monotonic_ns() - TIMESTAMP.unpack(payload)[0]
            count[0] += 1

    while len(count) == 1:
        if consumer.read_batch(handle) == 0:
            consumer.wait(1.0, spin=spin)
    os._exit(0)


def ring_latency(pings: int, pause: float, spin: float) -> tuple[float, float]:
    """(p50, p99) in µs of one record sent every ``pause`` s to a consumer that parks after ``spin`` s."""
    segment, wakeups = _ring()
    latencies = FORK.Array("q", pings, lock=False)
    try:
        consumer = FORK.Process(target=_ping_consumer, args=(segment.name, wakeups, spin, latencies))
        consumer.start()
        time.sleep(0.2)
        producer = FORK.Process(target=_ping_producer, args=(segment.name, wakeups, pings, pause))
        producer.start()
        for process in (producer, consumer):
            process.join(60)
            if process.is_alive():
                process.kill()
    finally:
        wakeups.close()
        segment.close()
    values = np.array(latencies[:], dtype=np.float64) / 1e3
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


# -- report ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    quick = "--quick" in (argv if argv is not None else sys.argv[1:])
    seconds = 0.3 if quick else RUN_SECONDS
    memcpy = memcpy_bandwidth(seconds)
    throughput_rows = []
    for size in SIZES:
        ring, zmq_rate, queue = (measure(size, seconds) for measure in (ring_throughput, zmq_throughput, queue_throughput))
        throughput_rows.append(
            [
                _size(size),
                f"{ring:,.0f}",
                f"{zmq_rate:,.0f}",
                f"{queue:,.0f}",
                f"{memcpy / size:,.0f}",
                f"**{ring / zmq_rate:.2f}×**",
                f"{ring / queue:.1f}×",
                f"{ring * size / 1e9:.2f} / {memcpy / 1e9:.2f} = **{ring * size / memcpy:.0%}**",
            ]
        )
    pings = 300 if quick else 2000
    latency_rows = []
    for pause, spin in ((0.001, 0.0), (0.001, 0.0001), (0.00002, 0.0), (0.00002, 0.0001)):
        p50, p99 = ring_latency(pings, pause, spin)
        latency_rows.append([f"{pause * 1e6:.0f} µs", f"{spin * 1e6:.0f} µs", f"{p50:.1f}", f"{p99:.1f}"])
    body = (
        f"Throughput, one producer and one consumer process, {seconds:.0f} s per cell, ring of "
        f"{RING_CAPACITY >> 20} MiB with `write_batch`/`read_batch`; pyzmq PUSH/PULL over ipc:// "
        "(`send`/`recv`, zero-copy from 16 KB); `multiprocessing.Queue` put/get; memcpy = numpy copies of "
        "64 KB blocks into a ring-sized buffer, in one process (the memory-bandwidth limit, in msgs/s of "
        "that size). The ring's consumer gets zero-copy views; zmq's and the queue's get a message object.\n\n"
        + table(
            ["size", "ring msgs/s", "pyzmq msgs/s", "mp.Queue msgs/s", "memcpy msgs/s",
             "ring / pyzmq", "ring / Queue", "ring / memcpy GB/s"],
            throughput_rows,
        )
        + f"\n\nWake-up latency of a parked consumer: {pings} single records, one every *pause*, the consumer "
        "polling for *spin* before it parks on its eventfd; send to handler, µs.\n\n"
        + table(["pause", "spin", "p50 µs", "p99 µs"], latency_rows)
    )
    print(body)
    if not quick:
        write_section("Shared-memory rings", body, COMMAND)
    return 0


def _size(size: int) -> str:
    return f"{size // 1024} KB" if size >= 1024 else f"{size} B"


if __name__ == "__main__":
    sys.exit(main())
