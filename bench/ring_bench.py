"""Shared-memory ring vs. pyzmq PUSH/PULL (ipc://), multiprocessing.Queue and a numpy memcpy.

Throughput: one producer process, one consumer process, 64 B / 1 KB / 64 KB messages, each run
bounded in time; the rate is counted at the consumer from its first message to the end marker.
Latency: one record at a time, sent after a pause long enough for the consumer to park, measured
from just before the send to the consumer's handler (both read CLOCK_MONOTONIC).

Run: ``.venv/bin/python -m bench.ring_bench`` (``--quick`` for a smoke run that writes nothing).
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
from router.ipc.wakeup import EventfdWakeup, RingWakeups

COMMAND = ".venv/bin/python -m bench.ring_bench"
SIZES = (64, 1024, 65536)
RUN_SECONDS = 1.0
REPEATS = 3
LATENCY_CASES = ((0.001, 0.0), (0.001, 0.0001), (0.00002, 0.0), (0.00002, 0.0001))  # (pause, spin) s
RING_CAPACITY = 4 << 20
END = 2  # record type / marker of the last message
TIMESTAMP = struct.Struct("<q")
FORK = multiprocessing.get_context("fork")
# Shared result slots: first-message time, end time, messages counted (no pickling between processes).
FIRST_NS, END_NS, MESSAGES = range(3)


def _queue_depth(size: int) -> int:
    """Messages pyzmq and the Queue may buffer: about 8 MiB (twice the ring), at least 1000."""
    return max(1000, (8 << 20) // size)


def _batch_of(size: int, batch_bytes: int = 128 * 1024) -> int:
    """Records per write_batch / messages per check of the clock."""
    return max(1, min(1024, batch_bytes // size))


# -- ring ------------------------------------------------------------------------------------------


def _ring(consumer_slots: int = 1) -> tuple[SharedSegment, RingWakeups]:
    segment = SharedSegment.create("bench", "r" + uuid.uuid4().hex[:10], layout.segment_size(RING_CAPACITY))
    init_ring(segment.memory, RING_CAPACITY, consumer_slots=consumer_slots, heartbeat_timeout=10.0)
    return segment, RingWakeups.eventfds(consumer_slots)


def _ring_producer(name: str, wakeups: RingWakeups, size: int, seconds: float) -> None:
    segment = SharedSegment.attach(name)
    producer = RingProducer(segment.memory, wakeups=wakeups)
    records = [(1, os.urandom(size), 1)] * _batch_of(size, RING_CAPACITY // 8)
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
    context = zmq.Context()
    socket = context.socket(zmq.PUSH)
    socket.setsockopt(zmq.SNDHWM, _queue_depth(size))
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
    context.term()  # waits until the queued messages, the end marker included, are delivered
    os._exit(0)


def _zmq_consumer(address: str, size: int, result) -> None:
    socket = zmq.Context().socket(zmq.PULL)
    socket.setsockopt(zmq.RCVHWM, _queue_depth(size))
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
        return _pair(_zmq_producer, (address, size, seconds), _zmq_consumer, (address, size))
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
    queue = FORK.Queue(maxsize=_queue_depth(size))
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
        receiver.join(20)
        finished = receiver.exitcode == 0
    finally:
        for process in (sender, receiver):
            if process.is_alive():
                process.kill()
            process.join(5)
    if not finished:  # the best-of-N keeps the other runs; say so rather than stop the benchmark
        print(f"warning: {consumer.__name__} did not finish within 20 s; run discarded", file=sys.stderr)
        return 0.0
    return result[MESSAGES] / ((result[END_NS] - result[FIRST_NS]) / 1e9)


# -- latency ---------------------------------------------------------------------------------------


class _TimedWakeup(EventfdWakeup):
    """Notes when the producer decides to wake the parked consumer (just before the eventfd write)."""

    def __init__(self, stamps) -> None:
        super().__init__()
        self.stamps, self.ping = stamps, 0

    def wake(self) -> None:
        self.stamps[self.ping] = time.monotonic_ns()
        super().wake()


def _ping_producer(name: str, wakeups: RingWakeups, pings: int, pause: float, sent) -> None:
    segment = SharedSegment.attach(name)
    producer = RingProducer(segment.memory, wakeups=wakeups)
    timed = wakeups.consumers[0]
    for ping in range(pings):
        time.sleep(pause)
        timed.ping = ping
        sent[ping] = time.monotonic_ns()
        producer.offer(1, TIMESTAMP.pack(ping), 1)
    producer.offer(END, b"", 1)
    os._exit(0)


def _ping_consumer(name: str, wakeups: RingWakeups, spin: float, received) -> None:
    segment = SharedSegment.attach(name)
    consumer = RingConsumer(segment.memory, 0, wakeups=wakeups)
    ended = []

    def handle(record_type: int, payload: memoryview) -> None:
        if record_type == END:
            ended.append(True)
        else:
            received[TIMESTAMP.unpack(payload)[0]] = time.monotonic_ns()

    while not ended:
        if consumer.read_batch(handle) == 0:
            consumer.wait(1.0, spin=spin)
    os._exit(0)


def ring_latency(pings: int, pause: float, spin: float) -> dict[str, float]:
    """Latency percentiles (µs) of one record sent every ``pause`` s to a consumer that polls for
    ``spin`` s before it parks: from the send, and from the producer's wake-up call."""
    sent, woken, received = (FORK.Array("q", pings, lock=False) for _ in range(3))
    segment = SharedSegment.create("bench", "l" + uuid.uuid4().hex[:10], layout.segment_size(RING_CAPACITY))
    init_ring(segment.memory, RING_CAPACITY, consumer_slots=1, heartbeat_timeout=10.0)
    wakeups = RingWakeups([_TimedWakeup(woken)], EventfdWakeup())
    try:
        consumer = FORK.Process(target=_ping_consumer, args=(segment.name, wakeups, spin, received))
        consumer.start()
        time.sleep(0.2)
        producer = FORK.Process(target=_ping_producer, args=(segment.name, wakeups, pings, pause, sent))
        producer.start()
        for process in (producer, consumer):
            process.join(60)
            if process.is_alive():
                process.kill()
    finally:
        wakeups.close()
        segment.close()
    sent, woken, received = (np.array(a[:], dtype=np.int64) for a in (sent, woken, received))
    delivered = received > 0
    parked = delivered & (woken > 0)
    from_send = (received[delivered] - sent[delivered]) / 1e3
    from_wake = (received[parked] - woken[parked]) / 1e3
    percentile = lambda values, q: float(np.percentile(values, q)) if len(values) >= 10 else float("nan")  # noqa: E731
    return {
        "parked": parked.sum() / max(1, delivered.sum()),
        "send p50": percentile(from_send, 50),
        "send p99": percentile(from_send, 99),
        "wake p50": percentile(from_wake, 50),
        "wake p99": percentile(from_wake, 99),
    }


def _eventfd_sleeper(wakeup: EventfdWakeup, current, received) -> None:
    while wakeup.wait(5.0):
        ping = current[0]
        if ping < 0:
            break
        received[ping] = time.monotonic_ns()
    os._exit(0)


def eventfd_latency(pings: int, pause: float) -> tuple[float, float]:
    """(p50, p99) µs of a bare eventfd wake-up between two Python processes: the floor under
    the ring's wake-up latency on this machine."""
    sent, received = FORK.Array("q", pings, lock=False), FORK.Array("q", pings, lock=False)
    current = FORK.Array("q", 1, lock=False)
    wakeup = EventfdWakeup()
    sleeper = FORK.Process(target=_eventfd_sleeper, args=(wakeup, current, received))
    sleeper.start()
    time.sleep(0.2)
    for ping in range(pings):
        time.sleep(pause)
        current[0] = ping
        sent[ping] = time.monotonic_ns()
        wakeup.wake()
    time.sleep(pause)
    current[0] = -1
    wakeup.wake()
    sleeper.join(30)
    if sleeper.is_alive():
        sleeper.kill()
    wakeup.close()
    sent, received = np.array(sent[:]), np.array(received[:])
    values = (received - sent)[received > 0] / 1e3
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


# -- report ----------------------------------------------------------------------------------------


def best_throughputs(seconds: float, repeats: int) -> dict[tuple[str, int], float]:
    """Best of ``repeats`` runs per (transport, size), the transports interleaved within each
    repeat so that load from elsewhere on the machine hits them alike."""
    measures = {"ring": ring_throughput, "pyzmq": zmq_throughput, "queue": queue_throughput}
    best: dict[tuple[str, int], float] = {}
    for _ in range(repeats):
        for size in SIZES:
            for name, measure in measures.items():
                best[name, size] = max(best.get((name, size), 0.0), measure(size, seconds))
    return best


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in ([], ["--quick"]):
        print(__doc__, file=sys.stderr)
        return 2
    quick = argv == ["--quick"]
    seconds, repeats, pings = (0.3, 1, 300) if quick else (RUN_SECONDS, REPEATS, 2000)
    started, load_before = time.monotonic(), os.getloadavg()[0]
    memcpy = max(memcpy_bandwidth(seconds) for _ in range(repeats))
    best = best_throughputs(seconds, repeats)
    throughput_rows = []
    for size in SIZES:
        ring, zmq_rate, queue = best["ring", size], best["pyzmq", size], best["queue", size]
        throughput_rows.append(
            [
                _size(size),
                f"{ring:,.0f}",
                f"{zmq_rate:,.0f}",
                f"{queue:,.0f}",
                f"{memcpy / size:,.0f}",
                f"**{_ratio(ring, zmq_rate):.2f}×**",
                f"{_ratio(ring, queue):.1f}×",
                f"{ring * size / 1e9:.2f} / {memcpy / 1e9:.2f} = **{ring * size / memcpy:.0%}**",
            ]
        )
    latency_rows = []
    for pause, spin in LATENCY_CASES:
        result = ring_latency(pings, pause, spin)
        latency_rows.append(
            [f"{pause * 1e6:.0f} µs", f"{spin * 1e6:.0f} µs", f"{result['parked']:.0%}"]
            + [_microseconds(result[key]) for key in ("wake p50", "wake p99", "send p50", "send p99")]
        )
    floor_p50, floor_p99 = eventfd_latency(pings, LATENCY_CASES[0][0])
    latency_rows.append(
        [f"{LATENCY_CASES[0][0] * 1e6:.0f} µs", "bare eventfd", "100%", f"{floor_p50:.1f}", f"{floor_p99:.1f}", "", ""]
    )
    body = (
        f"Throughput: one producer and one consumer process, best of {repeats} runs of {seconds:g} s per cell "
        "(transports interleaved). Ring: "
        f"{RING_CAPACITY >> 20} MiB, `write_batch` of up to 1024 records / {RING_CAPACITY >> 13} KB, "
        "`read_batch`, consumer parks on an eventfd when idle. pyzmq: PUSH/PULL over ipc://, one "
        "`send`/`recv` per message (zero-copy from 16 KB; `send_multipart` batches measured slower). "
        "`multiprocessing.Queue`: put/get. memcpy: numpy copies of 64 KB blocks into a ring-sized buffer in "
        "one process, the memory-bandwidth limit, shown as msgs/s of each size. The ring's consumer gets "
        "zero-copy views; pyzmq's and the queue's get message objects.\n\n"
        + table(
            ["size", "ring msgs/s", "pyzmq msgs/s", "mp.Queue msgs/s", "memcpy msgs/s",
             "ring / pyzmq", "ring / Queue", "ring / memcpy GB/s"],
            throughput_rows,
        )
        + f"\n\nWake-up latency: {pings} single 8-byte records, one every *pause*, to a consumer that polls for "
        "*spin* and then parks on its eventfd. *wake*: from the producer's eventfd write (after publishing) "
        "to the consumer's handler, over the records that found the consumer parked; *send*: from just "
        "before `offer` to the handler, over all records. Both processes sleep between records, so each "
        "send starts on an idle, cache-cold vCPU. The last row is the floor: a bare eventfd write in one "
        "process to a `poll` return in the other, no ring.\n\n"
        + table(["pause", "spin", "parked", "wake p50 µs", "wake p99 µs", "send p50 µs", "send p99 µs"],
                latency_rows)
        + "\n\nGoals (issue #3): 64 B ring ≥ 2× pyzmq msgs/s; 64 KB ring ≥ 50% of memcpy GB/s; parked wake-up "
        "p50 < 30 µs. Spinning before parking only pays when the next record comes within the spin "
        "(20 µs pauses), so `RingConsumer.wait` spins 0 s by default."
        + f"\n\nTotal benchmark time {time.monotonic() - started:.0f} s; 1-minute load average before it "
        f"{load_before:.2f} (other work on the machine lowers every number; compare within one run)."
    )
    print(body)
    if not quick:
        write_section("Shared-memory rings", body, COMMAND)
    return 0


def _microseconds(value: float) -> str:
    return "–" if value != value else f"{value:.1f}"  # NaN: too few samples (the consumer never parked)


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else float("nan")


def _size(size: int) -> str:
    return f"{size // 1024} KB" if size >= 1024 else f"{size} B"


if __name__ == "__main__":
    sys.exit(main())
