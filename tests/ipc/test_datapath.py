"""A worker's data path over real shared-memory rings: what a full ring tells the other portals."""
import os
import select
import time
import uuid

import pytest

from router.ipc.ring_consumer import RingConsumer
from router.monitor.counters import PortalCounters
from router.um.loop import EventLoop
from router.worker.datapath import BURST_BYTES, BURST_FRAMES, DataPath, DataPathSpec, RingSet
from router.worker.records import RECORD_FRAMES, decode_frames, decode_late_join_answer


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


class _Portal:
    """What a portal gives its DataPath: record handlers and a flush, noting what reached it."""

    def __init__(self, path: DataPath):
        self.got: list[tuple[int, bytes]] = []        # (stream id, frames), in arrival order
        self.now: list[bool] = []                     # for each record read from a ring: sent at once?
        self.flushes = 0
        path.handler = self.on_record
        path.handler_frames = self.on_frames
        path.after_batch = self.flush

    def on_record(self, ring, record_type, payload, now=False):
        self.now.append(now)
        if record_type == RECORD_FRAMES:
            self.on_frames(ring, record_type, *decode_frames(payload))

    def on_frames(self, ring, record_type, stream_id, count, longest, frames):
        self.got.append((stream_id, bytes(frames)))

    def flush(self):
        self.flushes += 1


def test_portals_in_one_process_hand_records_over_and_fall_back_to_the_ring_in_order(rings):
    ring_set, loop = rings
    spec = DataPathSpec(ring_set, {"E0": 0, "E1": 1, "E2": 2})
    ingress, egress = DataPath(spec, 0, loop, PortalCounters()), DataPath(spec, 1, loop, PortalCounters())
    ingress.join_local({1: egress})
    egress.join_local({0: ingress})
    portal = _Portal(egress)
    remote = RingConsumer(ring_set.segments[0].memory, 2, wakeups=ring_set.wakeups(0))   # portal 2: elsewhere
    try:
        loop.run_until(lambda: False, 0.05)          # both paths settle (parked on their rings)
        written, flushes = ingress.producer.position, portal.flushes
        ingress.frames(0b010, 1, b"first", 1, 5)
        assert portal.got == [(1, b"first")]         # at once: no ring, no wake-up,
        assert ingress.producer.position == written and portal.flushes == flushes + 1    # and sent on
        ingress.frames(0b110, 1, b"both", 1, 4)      # for portal 2 too: only it reads the ring
        assert portal.got[-1] == (1, b"both")
        seen = []
        remote.read_batch(lambda t, p: seen.append(decode_frames(p)[3].tobytes()))
        assert seen == [b"both"]

        # Its sends would block: records go through the ring, where it holds them back.
        behind = {"since": time.monotonic()}
        egress.backlog = lambda: behind["since"]
        ingress.frames(0b010, 1, b"held", 1, 4)
        assert portal.got[-1] == (1, b"both") and ingress.producer.position > written
        behind["since"] = None                       # it caught up: but "held" is still in the ring,
        ingress.frames(0b010, 1, b"after", 1, 5)     # so "after" goes behind it, not past it
        assert portal.got[-1] == (1, b"both")
        assert loop.run_until(lambda: len(portal.got) == 4, 2)
        assert [frames for _, frames in portal.got] == [b"first", b"both", b"held", b"after"]
        position = ingress.producer.position
        ingress.frames(0b010, 1, b"direct again", 1, 12)     # the ring read dry: handed over again
        assert portal.got[-1] == (1, b"direct again") and ingress.producer.position == position
    finally:
        remote.close()
        ingress.close()
        egress.close()


def test_records_read_together_stop_at_the_one_after_which_sends_would_block(rings):
    """Records behind the one that filled the portal's sockets stay in the ring, held back, rather
    than going into its queue behind what it could not send (where a record larger than what
    `<max-queue>` has left would be dropped); they follow in order once its receivers catch up."""
    ring_set, loop = rings
    spec = DataPathSpec(ring_set, {"E0": 0, "E1": 1})
    ingress, egress = DataPath(spec, 0, loop, PortalCounters()), DataPath(spec, 1, loop, PortalCounters())
    portal = _Portal(egress)
    behind = {"since": None}
    egress.backlog = lambda: behind["since"]
    sent = portal.on_frames

    def on_frames(*args):                       # the first record fills the receivers' sockets
        sent(*args)
        behind["since"] = time.monotonic()
    portal.on_frames = on_frames
    try:
        loop.run_until(lambda: False, 0.05)          # the egress parks on ring 0
        for n in range(3):                           # three records before the egress wakes
            ingress.frames(0b010, 7, b"record %d" % n, 1, 8)
        assert loop.run_until(lambda: portal.got, 2)
        loop.run_until(lambda: False, 0.05)
        assert [frames for _, frames in portal.got] == [b"record 0"]
        assert egress.counters.get("egress_backlog_holds") == 1
        portal.on_frames = sent
        behind["since"] = None                       # the receivers took it
        assert loop.run_until(lambda: len(portal.got) == 3, 2)
        assert [frames for _, frames in portal.got] == [b"record 0", b"record 1", b"record 2"]
    finally:
        ingress.close()
        egress.close()


def test_a_record_read_alone_is_sent_at_once_and_records_read_together_are_batched(rings):
    """A paced message is the one record in the ring when its egress wakes: nothing to batch it
    with, so it goes out at once (`now`). A burst read in one turn is batched, then flushed."""
    ring_set, loop = rings
    spec = DataPathSpec(ring_set, {"E0": 0, "E1": 1})
    ingress, egress = DataPath(spec, 0, loop, PortalCounters()), DataPath(spec, 1, loop, PortalCounters())
    portal = _Portal(egress)
    try:
        loop.run_until(lambda: False, 0.05)          # the egress parks on ring 0
        ingress.frames(0b010, 7, b"alone", 1, 5)
        assert loop.run_until(lambda: len(portal.got) == 1, 2)
        assert portal.now == [True]
        for n in range(3):                           # three records before the egress wakes
            ingress.frames(0b010, 7, b"burst %d" % n, 1, 7)
        assert loop.run_until(lambda: len(portal.got) == 4, 2)
        assert portal.now[1:] == [False, False, False]
        assert [frames for _, frames in portal.got] == [b"alone", b"burst 0", b"burst 1", b"burst 2"]
    finally:
        ingress.close()
        egress.close()


def test_bursts_are_told_so_the_worker_judges_its_rate_at_once(rings):
    """A socket read of many frames (ingress) and a ring read of many bytes (egress) call
    `on_burst`; a paced message, one frame at a time, does not (router.worker.scheduling)."""
    ring_set, loop = rings
    spec = DataPathSpec(ring_set, {"E0": 0, "E1": 1})
    ingress, egress = DataPath(spec, 0, loop, PortalCounters()), DataPath(spec, 1, loop, PortalCounters())
    _Portal(egress)
    told = {"ingress": 0, "egress": 0}
    ingress.on_burst = lambda: told.__setitem__("ingress", told["ingress"] + 1)
    egress.on_burst = lambda: told.__setitem__("egress", told["egress"] + 1)
    try:
        loop.run_until(lambda: False, 0.05)
        ingress.frames(0b010, 7, bytes(64), 1, 64)                  # a paced message
        assert loop.run_until(lambda: egress.consumers[0].head == ingress.producer.position, 2)
        assert told == {"ingress": 0, "egress": 0}
        ingress.frames(0b010, 7, bytes(64 * BURST_FRAMES), BURST_FRAMES, 64)   # one read of a stream
        assert told["ingress"] == 1
        assert loop.run_until(lambda: egress.consumers[0].head == ingress.producer.position, 2)
        assert told["egress"] == 0                                  # 1 KB read from the ring
        for n in range(BURST_BYTES // 1000 + 1):                    # a few KB before the egress wakes
            ingress.frames(0b010, 7, bytes(1000), 1, 1000)
        assert loop.run_until(lambda: told["egress"] == 1, 2)
        assert told["ingress"] == 1
    finally:
        ingress.close()
        egress.close()


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def test_a_readable_socket_wakes_the_workers_its_data_goes_to_before_the_data_is_read(rings):
    """Early wake-ups: the egress wakes while the ingress still reads, once per park; a
    ring's own eventfd being ready sets none off; one with no record after it is counted."""
    ring_set, loop = rings
    spec = DataPathSpec(ring_set, {"E0": 0, "E1": 1})
    counters = PortalCounters(), PortalCounters()
    ingress, egress = DataPath(spec, 0, loop, counters[0]), DataPath(spec, 1, loop, counters[1])
    portal = _Portal(egress)
    socket_fd = os.eventfd(0)            # any descriptor that is not a ring's: a source's socket
    try:
        loop.run_until(lambda: False, 0.05)                          # the egress parks on ring 0
        ingress.on_ready([socket_fd])
        assert not _readable(egress.wakeup.fileno())                 # no frames went anywhere yet
        ingress.frames(0b010, 7, b"first", 1, 5)
        assert loop.run_until(lambda: len(portal.got) == 1, 2)
        loop.run_until(lambda: False, 0.02)                          # parked again
        assert not _readable(egress.wakeup.fileno())

        ingress.on_ready([ingress.wakeup.fileno(), ingress.producer_wakeup.fileno()])
        assert not _readable(egress.wakeup.fileno())                 # ring eventfds: no reason
        ingress.on_ready([ingress.wakeup.fileno(), socket_fd])
        assert _readable(egress.wakeup.fileno())                     # woken before the record
        assert counters[0].get("ring_early_wakeups_sent") == 1
        ingress.frames(0b010, 7, b"second", 1, 6)                    # its commit wakes no one again
        assert counters[0].get("ring_early_wakeups_sent") == 1
        assert loop.run_until(lambda: len(portal.got) == 2, 2)
        assert counters[1].get("ring_early_wakeups_idle") == 0

        loop.run_until(lambda: False, 0.02)
        ingress.on_ready([socket_fd])                                # data, but none for the egress
        assert loop.run_until(lambda: counters[1].get("ring_early_wakeups_idle") == 1, 2)
        loop.run_until(lambda: False, 0.02)                          # it parked again
        ingress.on_ready([socket_fd])
        assert counters[0].get("ring_early_wakeups_sent") == 2       # no frames since the last one
        ingress.frames(0b010, 7, b"third", 1, 5)                     # the commit wakes it as ever
        assert loop.run_until(lambda: len(portal.got) == 3, 2)
        assert [frames for _, frames in portal.got] == [b"first", b"second", b"third"]
    finally:
        os.close(socket_fd)
        ingress.close()
        egress.close()


def test_a_portal_lapped_in_a_ring_counts_and_logs_what_it_lost(rings, caplog):
    """The rings block rather than overwrite; only a consumer the producer judged dead (a hung
    worker: no heartbeat for RING_HEARTBEAT_TIMEOUT) is written past. When that portal reads
    again, what was overwritten is counted and logged with its id (UMR-3002-2), not silently gone."""
    ring_set, ingress_loop = rings
    egress_loop = EventLoop("lapped-egress")
    spec = DataPathSpec(ring_set, {"E0": 0, "E1": 1})
    egress_counters = PortalCounters()
    ingress = DataPath(spec, 0, ingress_loop, PortalCounters())
    egress = DataPath(spec, 1, egress_loop, egress_counters)
    egress.handler = lambda *args: None
    try:
        connection = _Connection()
        frames = bytes(1000)
        while not connection.paused:              # E1 is alive: the ring fills and pushes back
            ingress.frames(0b010, 1, frames, 1, 1000, connection)
        # E1 never beats: once its heartbeat is older than the timeout the producer writes on (the
        # ingress worker's own heartbeat, as in a worker, looks at its waiting records again).
        ingress_loop.call_every(0.2, ingress.heartbeat)
        assert ingress_loop.run_until(lambda: not connection.paused, 10), "the producer gave up on E1"
        for _ in range(200):                      # 200 KB through a 64 KB ring
            ingress.frames(0b010, 1, frames, 1, 1000)
        with caplog.at_level("ERROR", logger="router"):
            assert egress_loop.run_until(lambda: egress_counters.get("ring_laps") >= 1, 5)
        [line] = [r.getMessage() for r in caplog.records if "UMR-3002-2" in r.getMessage()]
        assert line.startswith("UMR-3002-2: portal E1: ") and "from portal E0 were overwritten" in line, line
        lost = int(line.split(": ")[2].split(" bytes")[0])
        assert egress_counters.get("ring_bytes_lapped") == lost > 64 * 1024
        assert egress_counters.get("ring_records_malformed") == 0     # lost, not malformed
    finally:
        ingress.close()
        egress.close()
        egress_loop.close()


def test_a_record_larger_than_a_ring_is_dropped_counted_and_logged(rings, caplog):
    ring_set, loop = rings
    counters = PortalCounters()
    path = DataPath(DataPathSpec(ring_set, {"E0": 0, "E1": 1}), 0, loop, counters)
    reader = RingConsumer(ring_set.segments[0].memory, 1, wakeups=ring_set.wakeups(0))
    try:
        with caplog.at_level("WARNING", logger="router"):
            path.frames(0b010, 1, bytes(100_000), 1, 100_000, _Connection())     # the ring holds 64 KB
            path.frames(0b010, 1, b"small", 1, 5, _Connection())                 # the next goes through
        assert counters.get("transport_topic_fragments_dropped_size_error") == 1
        assert counters.get("transport_topic_fragment_bytes_dropped_size_error") > 100_000
        [line] = [r.getMessage() for r in caplog.records if "UMR-3001-2" in r.getMessage()]
        assert line.startswith("UMR-3001-2: portal E0: a ") and "larger than a ring can carry" in line, line
        got = []
        reader.read_batch(lambda t, p: got.append(decode_frames(p)[3].tobytes()))
        assert got == [b"small"]
    finally:
        reader.close()
        path.close()


def test_a_record_its_portal_fails_on_is_counted_and_the_records_around_it_go_through_once(rings, caplog):
    """A handler that raises on one record (a record the egress cannot take) must not stop the
    portal reading its rings, nor have the records before it in the same read delivered again."""
    ring_set, loop = rings
    spec = DataPathSpec(ring_set, {"E0": 0, "E1": 1})
    counters = PortalCounters()
    ingress, egress = DataPath(spec, 0, loop, PortalCounters()), DataPath(spec, 1, loop, counters)
    got = []

    def handler(ring, record_type, payload, now=False):
        frames = decode_frames(payload)[3].tobytes()
        if frames == b"poison":
            raise ValueError("the egress cannot take this record")
        got.append(frames)

    egress.handler = handler
    try:
        for frames in (b"one", b"two", b"poison", b"three"):
            ingress.frames(0b010, 1, frames, 1, len(frames))
        with caplog.at_level("ERROR", logger="router"):
            loop.run_until(lambda: len(got) >= 3 and egress.consumers[0].head == ingress.producer.position, 2)
        ingress.frames(0b010, 1, b"four", 1, 4)                       # and it goes on reading
        assert loop.run_until(lambda: b"four" in got, 2)
        loop.run_until(lambda: False, 0.05)
        assert got == [b"one", b"two", b"three", b"four"]
        assert counters.get("ring_records_malformed") == 1
        assert any("could not take a record" in r.getMessage() for r in caplog.records)
    finally:
        caplog.clear()                 # its traceback holds the record's view of the ring
        ingress.close()
        egress.close()


def test_a_full_ring_does_not_wake_a_portal_that_has_read_everything_in_it(rings):
    """A ring fills because one portal reads slowly: the producer wakes the parked portals that
    hold it back, not one that is idle with nothing left to read (that wake-up is a wasted turn of
    its worker each time the ring fills, and was counted as an early wake-up with no record)."""
    ring_set, loop = rings
    spec = DataPathSpec(ring_set, {"E0": 0, "E1": 1, "E2": 2})
    idle_counters = PortalCounters()
    ingress = DataPath(spec, 0, loop, PortalCounters())
    idle = DataPath(spec, 2, loop, idle_counters)
    idle.handler = lambda *args: None
    slow = RingConsumer(ring_set.segments[0].memory, 1, wakeups=ring_set.wakeups(0))   # E1 reads nothing
    try:
        loop.run_until(lambda: False, 0.05)                    # E2 parks on ring 0
        connection = _Connection()
        while not connection.paused:                           # records for E1 only, until the ring is full
            ingress.frames(0b010, 1, bytes(1000), 1, 1000, connection)
            loop.run_once(0)                                   # E2 reads past them when woken
        loop.run_until(lambda: False, 0.05)
        assert idle.consumers[0].head == ingress.producer.position     # E2 read everything and parked
        ingress.heartbeat()                                    # E0 tries the full ring again, as every 0.1 s
        loop.run_until(lambda: False, 0.05)
        assert idle_counters.get("ring_early_wakeups_idle") == 0
    finally:
        slow.close()
        ingress.close()
        idle.close()


def test_a_backlog_of_costly_records_leaves_the_loop_turns_for_its_timers(rings):
    """Records whose handling is slow (late-join requests, each decoded, rewritten and sent on; a
    CPU lent to others makes any slow) are read a turn's time budget at a time, not a ring's worth
    at once: the worker's timers (its heartbeat, a link's keepalive) run in between, or a busy
    worker is taken for hung and killed."""
    ring_set, loop = rings
    spec = DataPathSpec(ring_set, {"E0": 0, "E1": 1})
    ingress, egress = DataPath(spec, 0, loop, PortalCounters()), DataPath(spec, 1, loop, PortalCounters())
    portal = _Portal(egress)
    sent = portal.on_frames

    def slow(*args):
        time.sleep(0.002)
        sent(*args)
    portal.on_frames = slow
    ticks = []
    ticking = loop.call_every(0.005, lambda: ticks.append(len(portal.got)))
    try:
        loop.run_until(lambda: False, 0.05)          # the egress parks on ring 0
        records = 200                                # 0.4 s of handling, far less than a ring's worth
        for n in range(records):
            ingress.frames(0b010, 7, b"request %d" % n, 1, 12)
        assert loop.run_until(lambda: len(portal.got) == records, 30)
        assert [frames for _, frames in portal.got] == [b"request %d" % n for n in range(records)]
        during = [got for got in ticks if 0 < got < records]
        assert len(set(during)) >= 5, ticks          # the timer ran between many turns of the backlog
        assert portal.flushes >= len(set(during))    # and each turn's records went out before it
    finally:
        ticking.cancel()
        ingress.close()
        egress.close()


def test_the_late_join_answers_of_one_turn_go_into_the_ring_together_at_its_end(rings):
    """One read of an origin's connection brings hundreds of answers. Written one by one, each
    woke the egress worker again as often as it had read the last one and parked meanwhile; they
    are written at the end of the turn, in order, with one wake-up."""
    ring_set, loop = rings
    path = DataPath(DataPathSpec(ring_set, {"E0": 0, "E1": 1, "E2": 2}), 0, loop, PortalCounters())
    egress = RingConsumer(ring_set.segments[0].memory, 1, wakeups=ring_set.wakeups(0))
    woken = ring_set.consumer_wakeups[1]
    got = []
    try:
        loop.run_until(lambda: False, 0.05)
        woken.drain()
        for n in range(5):
            assert egress.prepare_to_park()                    # the egress read what came, and parked
            path.late_join_answer(1, "10.0.0.7", 14000 + n, bytes([n]) * 20)
            egress.read_batch(lambda record_type, payload: got.append(decode_late_join_answer(payload)))
        assert got == [] and woken.drain() == 0                # not yet: the turn goes on
        assert loop.run_until(lambda: egress.has_records(), 2)
        egress.read_batch(lambda record_type, payload: got.append(decode_late_join_answer(payload)))
        assert got == [("10.0.0.7", 14000 + n, bytes([n]) * 20) for n in range(5)]
        assert woken.drain() == 1
    finally:
        egress.close()
        path.close()
