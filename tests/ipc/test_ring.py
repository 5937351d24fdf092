"""Ring behaviour in one process: flow control, padding at the wrap, abort, drop policy, detach,
lapped consumers, masks, batch limits."""
from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.ipc import layout
from router.ipc.ring import (
    ConsumerLapped,
    OverflowPolicy,
    RecordTooLarge,
    RingConsumer,
    RingProducer,
    read_counters,
)
from router.ipc.wakeup import RingWakeups

CAPACITY = 4096


def payload(number: int, length: int) -> bytes:
    return (number.to_bytes(4, "little") * (length // 4 + 1))[:length]


def drain(consumer: RingConsumer, limit: int = 1 << 20) -> list[tuple[int, bytes]]:
    received: list[tuple[int, bytes]] = []
    while consumer.read_batch(lambda record_type, view: received.append((record_type, bytes(view))), limit):
        pass
    return received


def test_producer_never_overwrites_what_the_slowest_consumer_has_not_read(make_ring):
    segment = make_ring(CAPACITY, consumer_slots=2)
    producer = RingProducer(segment.memory)
    fast, slow = RingConsumer(segment.memory, 0), RingConsumer(segment.memory, 1)
    sent = []
    while True:
        claim = producer.try_claim(100, 1, 0b11)
        if claim is None:
            break
        claim.payload[:] = payload(len(sent), 100)
        producer.commit(claim)
        sent.append(payload(len(sent) - 0, 100))
        drain(fast)  # the fast consumer keeps up; only the slow one holds the producer back
    assert len(sent) > CAPACITY // 200
    assert producer.offer(1, payload(999, 100), 0b11) is False
    assert [data for _, data in drain(slow)] == sent  # every unread record intact, in order
    assert producer.offer(1, payload(1000, 100), 0b11) is True  # and now there is room again
    assert producer.counters().blocked_events == 1


def test_every_time_the_ring_fills_is_a_blocked_event_also_after_waiting_for_space(make_ring):
    """The way a worker writes: a full ring, wait_for_space until the consumer frees room, write
    on until the ring is full again. Each fill is one blocked event."""
    segment = make_ring(CAPACITY, consumer_slots=1)
    producer, consumer = RingProducer(segment.memory), RingConsumer(segment.memory, 0)
    for fill in (1, 2, 3):
        while producer.offer(1, payload(fill, 100), 1):
            pass
        assert producer.counters().blocked_events == fill
        assert producer.offer(1, payload(fill, 100), 1) is False      # still the same fill
        assert producer.counters().blocked_events == fill
        assert drain(consumer)
        assert producer.wait_for_space(100, 5)


def test_every_payload_is_contiguous_across_the_wrap_with_a_padding_record(make_ring):
    segment = make_ring(CAPACITY, consumer_slots=1)
    producer, consumer = RingProducer(segment.memory), RingConsumer(segment.memory, 0)
    assert producer.write_batch([(1, payload(0, 1500), 1), (1, payload(1, 1500), 1)]) == 2
    assert drain(consumer) == [(1, payload(0, 1500)), (1, payload(1, 1500))]
    # 2 x 1520 bytes used; a 1200-byte record does not fit in the 1056 left before the end.
    assert producer.offer(2, payload(2, 1200), 1)
    length, record_type, mask = layout.RECORD_HEADER.unpack_from(segment.memory, 3040)
    assert (length + layout.HEADER_LENGTH, record_type, mask) == (CAPACITY - 3040, layout.PADDING_TYPE, 0)
    assert layout.RECORD_HEADER.unpack_from(segment.memory, 0) == (1200, 2, 1)
    assert drain(consumer) == [(2, payload(2, 1200))]


@pytest.mark.parametrize(
    "capacity, length_of",
    [
        (CAPACITY, lambda n: (n * 37) % 1500),  # small records: joined runs
        (1 << 18, lambda n: (n * 7919) % 200 if n % 3 else 33000 + (n * 104729) % 30000),  # big ones inline
    ],
)
def test_write_batch_wraps_many_times_and_keeps_order(make_ring, capacity, length_of):
    segment = make_ring(capacity, consumer_slots=1)
    producer, consumer = RingProducer(segment.memory), RingConsumer(segment.memory, 0)
    records = [(n % 5, payload(n, length_of(n)), 1) for n in range(2000)]
    received, pending = [], records
    while pending:
        written = producer.write_batch(pending)
        pending = pending[written:]
        received += drain(consumer)
    assert received == [(record_type, data) for record_type, data, _ in records]
    counters = producer.counters()
    assert counters.records_written == 2000
    assert counters.bytes_written == sum(len(data) for _, data, _ in records)


def test_abort_turns_the_claim_into_padding_that_nobody_receives(make_ring):
    segment = make_ring(CAPACITY, consumer_slots=1)
    producer, consumer = RingProducer(segment.memory), RingConsumer(segment.memory, 0)
    claim = producer.try_claim(50, 9, 1)
    claim.payload[:] = payload(1, 50)
    producer.abort(claim)
    assert producer.offer(3, b"after", 1)
    assert drain(consumer) == [(3, b"after")]
    assert producer.counters().records_written == 1
    with pytest.raises(RuntimeError):
        producer.commit(claim)  # an ended claim cannot be committed


def test_one_claim_at_a_time(make_ring):
    producer = RingProducer(make_ring(CAPACITY, consumer_slots=1).memory)
    claim = producer.try_claim(10, 1, 1)
    with pytest.raises(RuntimeError, match="outstanding claim"):
        producer.try_claim(10, 1, 1)
    producer.commit(claim)


def test_drop_policy_drops_and_counts_without_touching_unread_records(make_ring):
    segment = make_ring(CAPACITY, consumer_slots=1, overflow=OverflowPolicy.DROP)
    producer, consumer = RingProducer(segment.memory), RingConsumer(segment.memory, 0)
    records = [(1, payload(n, 200), 1) for n in range(40)]
    written = producer.write_batch(records)
    assert 0 < written < 40
    assert producer.counters().records_dropped == 40 - written
    assert producer.try_claim(200, 1, 1) is None
    assert producer.claim(200, 1, 1, deadline=time.monotonic() + 10) is None  # drop never waits
    assert producer.counters().records_dropped == 40 - written + 2
    assert [data for _, data in drain(consumer)] == [data for _, data, _ in records[:written]]
    assert producer.counters().blocked_events == 0


def test_claim_waits_until_its_deadline_under_the_block_policy(make_ring):
    segment = make_ring(CAPACITY, consumer_slots=1)
    producer, consumer = RingProducer(segment.memory), RingConsumer(segment.memory, 0)
    while producer.offer(1, payload(0, 500), 1):
        pass
    started = time.monotonic()
    assert producer.claim(500, 1, 1, deadline=started + 0.05) is None
    assert time.monotonic() - started >= 0.05
    drain(consumer)
    claim = producer.claim(500, 1, 1, deadline=time.monotonic() + 10)
    assert claim is not None
    producer.commit(claim)


def test_records_larger_than_half_the_ring_are_rejected(make_ring):
    segment = make_ring(CAPACITY, consumer_slots=1)
    producer, consumer = RingProducer(segment.memory), RingConsumer(segment.memory, 0)
    assert producer.max_payload_length == CAPACITY // 2 - layout.HEADER_LENGTH
    too_long = producer.max_payload_length + 1
    with pytest.raises(RecordTooLarge, match=f"{too_long} bytes exceeds"):
        producer.try_claim(too_long, 1, 1)
    with pytest.raises(RecordTooLarge):
        producer.offer(1, bytes(too_long), 1)
    with pytest.raises(RecordTooLarge):
        producer.write_batch([(1, b"fine", 1), (1, bytes(too_long), 1)])
    assert producer.counters().records_written == 0  # the batch was rejected whole
    assert drain(consumer) == []
    assert isinstance(RecordTooLarge("x"), ValueError)
    assert producer.offer(1, bytes(producer.max_payload_length), 1)
    assert drain(consumer) == [(1, bytes(producer.max_payload_length))]


def test_each_consumer_receives_only_records_addressed_to_it(make_ring):
    segment = make_ring(CAPACITY, consumer_slots=3)
    producer = RingProducer(segment.memory)
    consumers = [RingConsumer(segment.memory, index) for index in range(3)]
    records = [(mask, payload(n, 20), mask) for n, mask in enumerate([1, 2, 4, 3, 5, 6, 7, 0, 4])]
    assert producer.write_batch(records) == len(records)
    for index, consumer in enumerate(consumers):
        expected = [(t, data) for t, data, mask in records if mask & (1 << index)]
        assert drain(consumer) == expected


@pytest.mark.parametrize("length", [1, 8, 13, 100])
def test_lone_record_says_whether_exactly_one_record_is_past_the_head(make_ring, length):
    segment = make_ring(CAPACITY, consumer_slots=2)
    producer, consumer = RingProducer(segment.memory), RingConsumer(segment.memory, 0)
    assert not consumer.lone_record()                       # empty
    producer.write_batch([(1, payload(1, length), 0b10)])   # one record, for the other consumer
    assert consumer.lone_record()
    producer.write_batch([(1, payload(2, length), 0b01)])
    assert not consumer.lone_record()                       # two
    assert [data for _, data in drain(consumer)] == [payload(2, length)]
    assert not consumer.lone_record()                       # read dry


@pytest.mark.parametrize("bound, delivered", [({"limit": 4}, 4), ({"max_bytes": 250}, 3)],
                         ids=["at most limit records", "stops after the record reaching max_bytes"])
def test_read_batch_stops_at_its_bound_and_resumes(make_ring, bound, delivered):
    segment = make_ring(CAPACITY, consumer_slots=1)
    producer, consumer = RingProducer(segment.memory), RingConsumer(segment.memory, 0)
    producer.write_batch([(1, payload(n, 100), 1) for n in range(10)])
    first: list = []
    assert consumer.read_batch(lambda t, view: first.append(bytes(view)), **bound) == delivered
    assert first == [payload(n, 100) for n in range(delivered)]
    assert consumer.has_records()
    assert [data for _, data in drain(consumer)] == [payload(n, 100) for n in range(delivered, 10)]


def test_a_handler_that_cannot_take_more_ends_the_read_after_its_record(make_ring):
    segment = make_ring(CAPACITY, consumer_slots=1)
    producer, consumer = RingProducer(segment.memory), RingConsumer(segment.memory, 0)
    producer.write_batch([(1, payload(n, 100), 1) for n in range(5)])
    first: list = []

    def handler(record_type, view) -> bool:
        first.append(bytes(view))
        return len(first) == 2                  # full after the second
    assert consumer.read_batch(handler) == 2
    assert first == [payload(0, 100), payload(1, 100)]
    assert [data for _, data in drain(consumer)] == [payload(n, 100) for n in range(2, 5)]


def test_a_parked_producer_tells_consumers_whom_its_waiting_record_is_for(make_ring):
    segment = make_ring(CAPACITY, consumer_slots=3)
    wakeups = RingWakeups.eventfds(3)
    try:
        producer = RingProducer(segment.memory, wakeups=wakeups)
        consumers = [RingConsumer(segment.memory, i, wakeups=wakeups) for i in range(3)]
        assert consumers[0].producer_waiting_for() == 0
        while producer.offer(1, payload(0, 500), 0b001):
            pass
        assert producer.wait_for_space(500, 0, dest_mask=0b110) is False
        assert [c.producer_waiting_for() for c in consumers] == [0b110] * 3
        drain(consumers[0])
        producer.unpark()
        assert consumers[1].producer_waiting_for() == 0
        while producer.offer(1, payload(0, 500), 0b001):
            pass
        assert producer.wait_for_space(500, 0, dest_mask=1 << 63) is False     # the int64 slot's sign bit
        assert consumers[2].producer_waiting_for() == 1 << 63
    finally:
        wakeups.close()


def test_a_detached_consumer_stops_holding_the_producer_back_and_learns_what_it_lost(make_ring):
    segment = make_ring(CAPACITY, consumer_slots=2)
    producer = RingProducer(segment.memory)
    reader, leaver = RingConsumer(segment.memory, 0), RingConsumer(segment.memory, 1)
    leaver.detach()
    for n in range(100):  # many times the capacity
        assert producer.offer(1, payload(n, 300), 0b11)
        drain(reader)
    returning = RingConsumer(segment.memory, 1, resume=True)
    with pytest.raises(ConsumerLapped) as lapped:
        drain(returning)
    assert lapped.value.bytes_lost > CAPACITY and not lapped.value.views_stale
    assert producer.offer(1, b"fresh", 0b11)
    assert drain(returning) == [(1, b"fresh")]  # continues cleanly after the lap
    assert returning.laps == 1


def test_a_consumer_with_a_stale_heartbeat_is_skipped_and_counted(make_ring):
    segment = make_ring(CAPACITY, consumer_slots=2, heartbeat_timeout=0.05)
    producer = RingProducer(segment.memory)
    reader, stalled = RingConsumer(segment.memory, 0), RingConsumer(segment.memory, 1)
    while producer.offer(1, payload(0, 300), 0b11):
        drain(reader)
    time.sleep(0.1)  # the stalled consumer misses its heartbeat deadline
    for n in range(30):
        assert producer.offer(1, payload(n, 300), 0b11)
        drain(reader)
    assert producer.counters().evicted_consumers == 1 and stalled.evictions == 1
    assert read_counters(segment.memory).evicted_consumers == 1
    with pytest.raises(ConsumerLapped):
        drain(stalled)


class _Model:
    """What each consumer should receive, kept by the test independently of the ring."""

    def __init__(self, consumers: int):
        self.expected: list[list[tuple[int, bytes]]] = [[] for _ in range(consumers)]

    def written(self, records):
        for record_type, data, mask in records:
            for index, queue in enumerate(self.expected):
                if mask >> index & 1:
                    queue.append((record_type, data))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["batch", "claim", "abort", "read0", "read1"]),
            st.lists(st.tuples(st.integers(0, 1800), st.integers(0, 3)), min_size=1, max_size=8),
        ),
        max_size=40,
    )
)
def test_random_interleavings_match_a_model(make_ring, steps):
    segment = make_ring(CAPACITY, consumer_slots=2)
    producer = RingProducer(segment.memory)
    consumers = [RingConsumer(segment.memory, 0), RingConsumer(segment.memory, 1)]
    model, received = _Model(2), [[], []]
    serial = 0
    for action, shapes in steps:
        records = []
        for length, mask in shapes:
            records.append((serial % 100, payload(serial, length), mask))
            serial += 1
        if action == "batch":
            model.written(records[: producer.write_batch(records)])
        elif action in ("claim", "abort"):
            record_type, data, mask = records[0]
            claim = producer.try_claim(len(data), record_type, mask)
            if claim is not None:
                claim.payload[:] = data
                if action == "claim":
                    producer.commit(claim)
                    model.written([records[0]])
                else:
                    producer.abort(claim)
        else:
            index = int(action[-1])
            received[index] += drain(consumers[index], limit=len(shapes))
    for index in range(2):
        received[index] += drain(consumers[index])
        assert received[index] == model.expected[index]
    for consumer in consumers:
        consumer.close()
    producer.close()


def test_parking_rechecks_the_ring_so_no_wakeup_is_lost(make_ring):
    segment = make_ring(CAPACITY, consumer_slots=1)
    producer, consumer = RingProducer(segment.memory), RingConsumer(segment.memory, 0)
    assert consumer.prepare_to_park() is True  # nothing to read: safe to sleep
    consumer.unpark()
    assert consumer.wait(0.02) is False  # no wakeups configured: it polls until the timeout
    producer.offer(1, b"x", 1)
    assert consumer.prepare_to_park() is False  # a record arrived: do not sleep
    assert consumer.wait(10) is True
    assert drain(consumer) == [(1, b"x")]


def test_an_event_loop_producer_is_woken_when_a_consumer_frees_space(make_ring):
    segment = make_ring(CAPACITY, consumer_slots=1)
    wakeups = RingWakeups.eventfds(1)
    try:
        producer = RingProducer(segment.memory, wakeups=wakeups)
        consumer = RingConsumer(segment.memory, 0, wakeups=wakeups)
        while producer.offer(1, payload(0, 500), 1):
            pass
        assert producer.wait_for_space(500, 0) is False  # full: stays parked, returns at once
        assert not wakeups.producer.wait(0)
        drain(consumer)  # the consumer frees space and sees the producer parked
        assert wakeups.producer.wait(0)
        producer.unpark()
        assert producer.offer(1, payload(1, 500), 1)
    finally:
        wakeups.close()
