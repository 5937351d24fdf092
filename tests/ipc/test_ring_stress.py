"""Cross-process stress: 1 producer and 3 consumers in separate processes, millions of records of
random sizes (wrapping a 1 MiB ring thousands of times), each consumer addressed by a different
random subset. Every consumer must see exactly its records, in order, uncorrupted; with one consumer
SIGKILLed mid-run the others must still get everything and the producer must not stay blocked.

``UMR_STRESS_RECORDS`` sets the record count (default 5,000,000). Rates are printed, never asserted.
"""
from __future__ import annotations

import os
import signal
import struct
import time
import zlib

import numpy as np

from router.ipc import layout
from router.ipc.ring import ConsumerLapped, RingConsumer, RingProducer, read_counters
from router.ipc.shm import SharedSegment
from router.ipc.wakeup import RingWakeups

RECORDS = int(os.environ.get("UMR_STRESS_RECORDS", "5000000"))
CAPACITY = 1 << 20
CONSUMERS = 3
END_OF_TEST = 1000  # record type of the final record, addressed to everyone
SEQUENCE_AND_CHECKSUM = struct.Struct("<QI")  # so the smallest payload is 12 bytes
BODIES = 4096
BATCH_BYTES = 64 * 1024
FINISH_DEADLINE = 600.0  # generous: the run normally takes a small fraction of this

# Result slots per consumer, in a shared array (no pickling between processes).
RECEIVED, ERRORS, FIRST_BAD_SEQUENCE, DONE, ELAPSED_NS, LAPS = range(6)
RESULT_FIELDS = 6


def _workload(records: int):
    """Deterministic per-record destination masks and bodies (with their checksums), made once
    before forking. Sizes: mostly small, a tail up to 64 KB."""
    rng = np.random.default_rng(20240603)
    masks = rng.integers(1, 1 << CONSUMERS, size=records, dtype=np.int64)
    small = rng.integers(0, 244, size=BODIES)
    medium = rng.integers(244, 4084, size=BODIES)
    large = rng.integers(4084, 65536 - SEQUENCE_AND_CHECKSUM.size + 1, size=BODIES)
    kind = rng.random(BODIES)
    lengths = np.where(kind < 0.90, small, np.where(kind < 0.99, medium, large))
    pool = rng.bytes(2 * 65536)
    offsets = rng.integers(0, 65536, size=BODIES)
    bodies = [pool[o : o + n] for o, n in zip(offsets.tolist(), lengths.tolist())]
    checksums = [zlib.crc32(body) for body in bodies]
    choice = rng.integers(0, BODIES, size=records).tolist()
    return masks, bodies, checksums, choice


def _producer(segment_name: str, wakeups: RingWakeups, workload, result) -> None:
    masks, bodies, checksums, choice = workload
    mask_list = masks.tolist()
    pack = SEQUENCE_AND_CHECKSUM.pack
    segment = SharedSegment.attach(segment_name)
    producer = RingProducer(segment.memory, wakeups=wakeups)
    started = time.monotonic_ns()
    sequence = 0
    total = len(mask_list)
    pending: list = []
    while sequence < total or pending:
        batch_bytes = sum(len(payload) for _, payload, _ in pending)
        while sequence < total and batch_bytes < BATCH_BYTES:
            body = choice[sequence]
            payload = pack(sequence, checksums[body]) + bodies[body]
            pending.append((sequence % 251, payload, mask_list[sequence]))
            batch_bytes += len(payload)
            sequence += 1
        written = producer.write_batch(pending)
        del pending[:written]
        if pending:
            producer.wait_for_space(len(pending[0][1]), None)
    while not producer.offer(END_OF_TEST, b"", (1 << CONSUMERS) - 1):
        producer.wait_for_space(0, None)
    result[ELAPSED_NS] = time.monotonic_ns() - started
    result[DONE] = 1
    producer.close()
    os._exit(0)


def _consumer(index: int, segment_name: str, wakeups: RingWakeups, masks, bodies_checksums, result) -> None:
    expected = np.flatnonzero(masks & (1 << index)).tolist()
    expected.append(-1)  # sentinel: nothing more is expected
    base = index * RESULT_FIELDS
    unpack = SEQUENCE_AND_CHECKSUM.unpack_from
    crc32 = zlib.crc32
    state = {"next": 0, "errors": 0, "end": False}

    def handle(record_type: int, view: memoryview) -> None:
        if record_type == END_OF_TEST:
            state["end"] = True
            return
        sequence, checksum = unpack(view)
        position = state["next"]
        state["next"] = position + 1
        if sequence != expected[position] or record_type != sequence % 251 or crc32(view[12:]) != checksum:
            if state["errors"] == 0:
                result[base + FIRST_BAD_SEQUENCE] = sequence
            state["errors"] += 1

    segment = SharedSegment.attach(segment_name)
    consumer = RingConsumer(segment.memory, index, wakeups=wakeups)
    started = time.monotonic_ns()
    while not state["end"]:
        try:
            received = consumer.read_batch(handle, 1024)
        except ConsumerLapped:
            result[base + LAPS] += 1
            continue
        if received == 0:
            consumer.wait(1.0)
        result[base + RECEIVED] = state["next"]
    result[base + RECEIVED] = state["next"]
    result[base + ERRORS] = state["errors"] + (0 if expected[state["next"]] == -1 else 1)
    result[base + ELAPSED_NS] = time.monotonic_ns() - started
    result[base + DONE] = 1
    consumer.close()
    os._exit(0)


def _run(make_ring, fork_context, processes, *, kill_consumer: int | None, heartbeat_timeout: float):
    workload = _workload(RECORDS)
    masks = workload[0]
    segment = make_ring(CAPACITY, consumer_slots=CONSUMERS, heartbeat_timeout=heartbeat_timeout)
    wakeups = RingWakeups.eventfds(CONSUMERS)
    consumer_results = fork_context.Array("q", CONSUMERS * RESULT_FIELDS, lock=False)
    producer_result = fork_context.Array("q", RESULT_FIELDS, lock=False)
    try:
        consumers = [
            fork_context.Process(
                target=_consumer, args=(i, segment.name, wakeups, masks, None, consumer_results)
            )
            for i in range(CONSUMERS)
        ]
        for process in consumers:
            processes.append(process)
            process.start()
        _wait_until_attached(segment, CONSUMERS)
        producer = fork_context.Process(
            target=_producer, args=(segment.name, wakeups, workload, producer_result)
        )
        processes.append(producer)
        started = time.monotonic()
        producer.start()
        if kill_consumer is not None:
            victim_base = kill_consumer * RESULT_FIELDS
            while consumer_results[victim_base + RECEIVED] < len(masks) // 10:
                assert time.monotonic() - started < FINISH_DEADLINE, "victim made no progress"
                time.sleep(0.01)
            os.kill(consumers[kill_consumer].pid, signal.SIGKILL)
        producer.join(FINISH_DEADLINE)
        assert producer_result[DONE] == 1, "producer did not finish: blocked by a dead consumer?"
        for index, process in enumerate(consumers):
            if index != kill_consumer:
                process.join(max(1.0, FINISH_DEADLINE - (time.monotonic() - started)))
        elapsed = time.monotonic() - started
    finally:
        wakeups.close()
    counters = read_counters(segment.memory)
    _report(masks, consumer_results, producer_result, counters, elapsed, kill_consumer)
    return masks, consumer_results, counters


def _wait_until_attached(segment: SharedSegment, consumers: int) -> None:
    deadline = time.monotonic() + 60
    for index in range(consumers):
        offset = CAPACITY + layout.consumer_heartbeat_offset(index)
        while struct.unpack_from("<q", segment.memory, offset)[0] == 0:
            assert time.monotonic() < deadline, f"consumer {index} never attached"
            time.sleep(0.005)


def _report(masks, results, producer_result, counters, elapsed, killed) -> None:
    seconds = producer_result[ELAPSED_NS] / 1e9 or elapsed
    print(
        f"\nring stress: {len(masks):,} records, {counters.bytes_written / 1e9:.2f} GB in {seconds:.1f} s "
        f"= {len(masks) / seconds / 1e6:.2f} M records/s, {counters.bytes_written / seconds / 1e9:.2f} GB/s "
        f"(producer); blocked events {counters.blocked_events}, evictions {counters.evicted_consumers}"
        + (f", consumer {killed} SIGKILLed" if killed is not None else "")
    )
    for index in range(CONSUMERS):
        base = index * RESULT_FIELDS
        print(
            f"  consumer {index}: {results[base + RECEIVED]:,} records, errors {results[base + ERRORS]}, "
            f"laps {results[base + LAPS]}, done {bool(results[base + DONE])}"
        )


def _assert_consumer_got_everything(masks, results, index) -> None:
    base = index * RESULT_FIELDS
    assert results[base + DONE] == 1, f"consumer {index} did not finish"
    assert results[base + LAPS] == 0, f"consumer {index} was lapped"
    assert results[base + ERRORS] == 0, (
        f"consumer {index}: {results[base + ERRORS]} bad records, first at sequence "
        f"{results[base + FIRST_BAD_SEQUENCE]}"
    )
    assert results[base + RECEIVED] == int(np.count_nonzero(masks & (1 << index)))


def test_every_consumer_gets_exactly_its_records_in_order_uncorrupted(make_ring, fork_context, processes):
    masks, results, counters = _run(
        make_ring, fork_context, processes, kill_consumer=None, heartbeat_timeout=30.0
    )
    for index in range(CONSUMERS):
        _assert_consumer_got_everything(masks, results, index)
    assert counters.records_written == len(masks) + 1
    assert counters.evicted_consumers == 0


def test_a_killed_consumer_does_not_stop_the_others_or_block_the_producer(
    make_ring, fork_context, processes
):
    killed = 1
    masks, results, counters = _run(
        make_ring, fork_context, processes, kill_consumer=killed, heartbeat_timeout=0.5
    )
    for index in range(CONSUMERS):
        if index != killed:
            _assert_consumer_got_everything(masks, results, index)
    assert results[killed * RESULT_FIELDS + DONE] == 0
    assert counters.evicted_consumers >= 1
