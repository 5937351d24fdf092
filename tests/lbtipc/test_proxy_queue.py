"""A router's LBT-IPC proxy source queues what its full ring cannot take; a receiver that dies
while batches wait must stop holding them back once its heartbeat is stale, although it never
wakes the source again (real ring and shared memory, one process: the dead receiver is a consumer
that attached and then stopped)."""
from __future__ import annotations

import contextlib
import os
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


def _proxy_session(loop, hold: float):
    return source.LbtipcSourceSession(loop, id_low=30000, id_high=30999, window=1 << 20, datagram_max_size=8192,
                                      batching_minimum_length=1, batching_interval=0.01, overflow="drop",
                                      max_queue=4 << 20, hold_for_receiver=hold)


@contextlib.contextmanager
def _session_and_its_segment(hold: float):
    """(loop, a proxy LBT-IPC session, its ring's segment attached as a receiver would), closed after."""
    loop = EventLoop("test")
    session = _proxy_session(loop, hold)
    segment = SharedSegment.attach(session.segment.name)
    try:
        yield loop, session, segment
    finally:
        segment.close()
        session.close()
        loop.close()


def test_what_is_sent_before_the_first_receiver_attaches_reaches_it_in_order():
    with _session_and_its_segment(hold=30.0) as (loop, session, segment):
        name = session.segment.name
        slot, receiver = None, None
        try:
            for n in range(3):
                session.send_raw(b"early-%d" % n)
            assert len(session.held) == 3 and session.queued_bytes() == 3 * 7
            assert session.producer.position == 0                 # nothing in the ring: nobody would read it
            slot = naming.claim_slot(name, source.SLOTS)
            receiver = RingConsumer(segment.memory, slot)         # attaches at the tail, as a receiver does
            deadline = time.monotonic() + 10
            while session.held and time.monotonic() < deadline:
                loop.run_once(0.05)
            session.send_raw(b"late")                             # after the held ones, not before
            got = []
            receiver.read_batch(lambda record_type, payload: got.append(bytes(payload)))
            assert got == [b"early-0", b"early-1", b"early-2", b"late"]
            assert session.counters["held_batches_delivered"] == 3 and session.counters["held_batches_expired"] == 0
        finally:
            if receiver is not None:
                receiver.close()
                naming.release_slot(name, slot)


def test_held_batches_expire_after_the_hold_and_an_application_source_holds_nothing():
    loop = EventLoop("test")
    proxy, application = _proxy_session(loop, hold=0.05), _proxy_session(loop, hold=0.0)
    try:
        proxy.send_raw(b"too early")
        time.sleep(0.1)                                       # past the hold, with nobody attached
        proxy.send_raw(b"still nobody")
        assert [batch for _, batch in proxy.held.batches] == [b"still nobody"]
        assert proxy.counters["held_batches_expired"] == 1
        application.send_raw(b"straight in")
        assert not application.held and application.producer.position > 0
    finally:
        proxy.close()
        application.close()
        loop.close()


def test_a_receiver_counts_once_it_reads_the_ring_not_when_it_claims_its_slot():
    """A receiver claims its slot, then attaches to the ring at the tail it finds: a source that
    counted it on its slot alone and sent at once lost what it sent in between (seen once in CI:
    17 of 500 messages)."""
    with _session_and_its_segment(hold=0.0) as (_, session, segment):
        name = session.segment.name
        slot = naming.claim_slot(name, source.SLOTS)
        consumer = None
        try:
            assert session.receiver_count == 0            # claimed, not reading yet
            consumer = RingConsumer(segment.memory, slot)
            assert session.receiver_count == 1
            naming.release_slot(name, slot)
            assert session.receiver_count == 0            # its slot released: gone, heartbeat or not
        finally:
            if consumer is not None:
                consumer.close()
            naming.release_slot(name, slot)


def test_a_proxy_session_closed_on_its_loop_with_the_ring_full_does_not_wait_for_room():
    """A router deletes its last proxy source on a session while the receiver is a full ring
    behind: the close returns at once (the worker's loop, every portal on it, went on only after
    two seconds of waiting for room for the end record, and then ended without it), the
    session's names are gone, and the end record follows once the receiver has made room."""
    with _session_and_its_segment(hold=0.0) as (loop, session, segment):
        name = session.segment.name
        slot = naming.claim_slot(name, source.SLOTS)
        receiver = RingConsumer(segment.memory, slot)
        try:
            while not session.waiting:                # 128-byte records: the ring fills to its last byte
                session.send_raw(bytes(100))
            session.close()
            assert not os.path.exists(f"{naming.SHM_DIRECTORY}/{name.lstrip('/')}")
            kinds = []
            deadline = time.monotonic() + 10
            while source.RECORD_END not in kinds and time.monotonic() < deadline:
                receiver.read_batch(lambda record_type, payload: kinds.append(record_type))
                loop.run_once(0.05)
            assert kinds.count(source.RECORD_FRAMES) == session.counters["batches"] - \
                session.counters["dropped_would_block_batches"]
            assert kinds[-1] == source.RECORD_END
        finally:
            receiver.close()
            naming.release_slot(name, slot)
