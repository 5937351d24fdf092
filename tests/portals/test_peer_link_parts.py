"""The peer link's pure parts: keepalive timing and RTT, the outbound queue, the handshake."""
import pytest

from router.monitor.counters import PortalCounters
from router.portals.peer_handshake import HandshakeError, build_handshake, parse_handshake
from router.portals.peer_keepalive import KeepaliveMonitor, keepalive_header
from router.portals.peer_outbound import BATCH_STARTED, DROPPED, QUEUED, OutboundQueue
from router.um.wire.lbmc import KA_QUERY, KA_RESPONSE, LBMC_TYPE_CONTROL, GatewayName, LbmcMessage, RouteInfo

MS = 1_000_000


class Clock:
    def __init__(self):
        self.now = 10_000 * MS

    def __call__(self):
        return self.now

    def advance(self, ms):
        self.now += int(ms * MS)


def monitor(idle=True, interval=100, timeout=300):
    clock, counters = Clock(), PortalCounters()
    return KeepaliveMonitor(interval, timeout, idle, counters, clock_ns=clock, wall_clock=lambda: 1700000000.5), clock


def test_idle_keepalives_skip_a_link_busy_both_ways_but_not_a_one_way_one():
    ka, clock = monitor(idle=True)
    for _ in range(5):                      # traffic both ways every 50 ms
        clock.advance(50)
        ka.note_sent()
        ka.note_received()
        assert not ka.query_due()
    for _ in range(3):                      # only sending: the companion might be gone
        clock.advance(50)
        ka.note_sent()
    assert ka.query_due()
    ka.make_query()
    assert not ka.query_due()               # not again within the interval


def test_non_idle_keepalives_go_every_interval():
    ka, clock = monitor(idle=False)
    clock.advance(99)
    ka.note_sent()
    ka.note_received()
    assert not ka.query_due()
    clock.advance(1)
    assert ka.query_due()


def test_rtt_from_the_echoed_timestamp_and_the_statistics():
    ka, clock = monitor()
    clock.advance(100)
    query = ka.make_query()
    header = keepalive_header(query)
    assert header.flags == KA_QUERY and header.idx == 1
    response = KeepaliveMonitor.make_response(header)
    assert keepalive_header(response).flags == KA_RESPONSE
    assert keepalive_header(response).ts_microseconds == header.ts_microseconds
    clock.advance(0.25)
    assert ka.on_response(keepalive_header(response)) == 250
    clock.advance(0.5)
    assert ka.on_response(keepalive_header(response)) == 750
    stats = {k: ka.counters.get(k) for k in ("rtt_samples", "rtt_min", "rtt_mean", "rtt_max", "last_ka_time")}
    assert stats == {"rtt_samples": 2, "rtt_min": 250, "rtt_mean": 500, "rtt_max": 750, "last_ka_time": 1700000000}
    future = KeepaliveMonitor.make_response(keepalive_header(query)).headers[0]
    future.ts_seconds += 100
    assert ka.on_response(future) is None and ka.counters.get("rtt_samples") == 2


def test_silence_beyond_timeout_is_death_unless_keepalives_are_off():
    ka, clock = monitor(timeout=300)
    clock.advance(299)
    assert not ka.is_dead()
    clock.advance(1)
    assert ka.is_dead() and ka.silent_ms() == 300
    off, clock = monitor(interval=0)
    clock.advance(10**6)
    assert not off.is_dead() and not off.query_due()
    assert keepalive_header(LbmcMessage(LBMC_TYPE_CONTROL, [GatewayName("x")])) is None


class FakeSocket:
    def __init__(self, accept=None):
        self.accept, self.data = accept, bytearray()

    def sendmsg(self, views):
        total = b"".join(bytes(v) for v in views)
        take = len(total) if self.accept is None else min(self.accept, len(total))
        if take == 0:
            raise BlockingIOError
        self.data += total[:take]
        if self.accept is not None:
            self.accept -= take
        return take


def queue(max_queue=1000, min_length=100, max_datagram=250):
    counters = PortalCounters()
    return OutboundQueue(max_queue, min_length, max_datagram, counters), counters


def test_data_is_batched_until_min_length_and_control_flushes_in_order():
    q, counters = queue()
    assert q.add_data(b"a" * 40) == BATCH_STARTED
    assert q.add_data(b"b" * 40) == QUEUED
    assert not q.has_unwritten and q.batch_pending
    assert q.add_control(b"C" * 10)
    sock = FakeSocket()
    q.write_to(sock)
    assert bytes(sock.data) == b"a" * 40 + b"b" * 40 + b"C" * 10
    assert q.add_data(b"c" * 60) == BATCH_STARTED
    assert q.add_data(b"d" * 60) == QUEUED and q.has_unwritten     # 120 >= min-length: sent as one batch
    q.write_to(sock)
    assert counters.get("batches") == 2
    assert counters.get("data_fragments_sent") == 4 and counters.get("data_fragment_bytes_sent") == 200


def test_a_batch_never_exceeds_max_datagram_but_a_big_message_still_goes():
    q, counters = queue(max_queue=10_000, min_length=10_000, max_datagram=250)
    q.add_data(b"a" * 200)
    q.add_data(b"b" * 100)                  # 300 > 250: the first batch closes before it
    assert q.has_unwritten and q.batch_pending
    q.flush_batch()
    q.add_data(b"c" * 900)                  # bigger than max-datagram alone: fine
    q.flush_batch()
    assert counters.get("batches") == 3


def test_each_batch_counts_in_the_smallest_mean_and_largest_messages_and_bytes_per_batch():
    q, counters = queue(max_queue=100_000, min_length=100_000, max_datagram=100_000)
    figures = lambda kind: [counters.get(f"batch_{kind}_{which}") for which in ("min", "mean", "max")]   # noqa: E731
    assert figures("msgs") == figures("bytes") == [0, 0, 0]        # no batch yet
    for sizes in ([10, 20, 30], [500], [40, 40]):                   # 3 messages, 1, 2
        for size in sizes:
            q.add_data(b"x" * size)
        q.flush_batch()
    assert counters.get("batches") == 3
    assert figures("msgs") == [1, 2, 3] and figures("bytes") == [60, 213, 500]   # mean 6 // 3, 640 // 3
    assert (counters.get("batch_msgs_total"), counters.get("batch_bytes_total")) == (6, 640)
    q.add_data(b"y", fragments=7)                                   # one piece of 7 frames (a ring read)
    q.flush_batch()
    assert figures("msgs") == [1, 3, 7] and figures("bytes") == [1, 160, 500]    # 13 // 4, 641 // 4


class RecordingSocket(FakeSocket):
    """Also notes the objects whose memory each write came from."""
    def __init__(self, accept=None):
        super().__init__(accept)
        self.sources = []

    def sendmsg(self, views):
        self.sources.append([view.obj for view in views])
        return super().sendmsg(views)


def test_lent_data_is_written_from_the_lender_and_only_what_waits_is_copied():
    """A ring record is lent for one call: what the socket takes at once is never copied; what it
    does not take, or what waits in a batch, is copied before the lender's memory moves on."""
    q, counters = queue(max_queue=10_000, min_length=100)
    record = bytearray(b"r" * 300)                   # a record of min-length or more: a chunk alone
    assert q.add_data(memoryview(record), fragments=3) == QUEUED
    sock = RecordingSocket()
    q.write_to(sock)
    q.keep_lent()
    assert sock.sources == [[record]], "written from the record itself"
    record[:] = b"R" * 300                           # the ring reuses the slot
    assert bytes(sock.data) == b"r" * 300 and counters.get("data_fragments_sent") == 3

    record[:] = b"s" * 300
    q.add_data(memoryview(record))
    sock = RecordingSocket(accept=120)               # takes part of it
    q.write_to(sock)
    q.keep_lent()
    record[:] = b"X" * 300
    sock.accept = None
    q.write_to(sock)
    assert bytes(sock.data) == b"s" * 300, "the rest was copied before the slot was reused"

    record[:] = b"v" * 300
    q.add_data(memoryview(record))
    q.add_control(b"C" * 10)                         # queued behind it before the caller is done
    q.keep_lent()
    record[:] = b"Z" * 300
    q.write_to(sock)
    assert bytes(sock.data).endswith(b"v" * 300 + b"C" * 10)

    small = bytearray(b"t" * 40)                     # under min-length: it waits in a batch
    q.add_data(memoryview(small))
    small[:] = b"Y" * 40
    q.add_data(b"u" * 60)
    q.keep_lent()
    q.write_to(sock)
    assert bytes(sock.data).endswith(b"t" * 40 + b"u" * 60)


def test_bounded_queue_drops_would_block_and_discard_counts_not_operational():
    q, counters = queue(max_queue=300, min_length=1)
    sock = FakeSocket(accept=50)
    for _ in range(5):
        q.add_data(b"x" * 100)
    q.write_to(sock)
    assert counters.get("data_fragments_dropped_would_block") == 2
    assert counters.get("data_fragment_bytes_dropped_would_block") == 200
    assert counters.get("data_bytes_enqueued") == 250 and counters.get("data_bytes_enqueued_max") == 300
    assert counters.get("data_bytes_enqueued_limit") == 300
    assert q.add_control(b"k" * 64)         # control is queued beyond the bound
    assert q.add_data(b"y" * 10) == DROPPED
    assert q.discard() == (3, 300)
    assert counters.get("data_fragments_dropped_not_operational") == 3
    assert counters.get("data_fragments_forwarded") == 6 and counters.get("data_bytes_enqueued") == 0


def test_handshake_round_trip_and_refusals():
    identity = parse_handshake(build_handshake("router-B", 77), own_node_id=5)
    assert (identity.name, identity.node_id, identity.version) == ("router-B", 77, 1)
    with pytest.raises(HandshakeError, match="our own node id"):
        parse_handshake(build_handshake("router-A", 5), own_node_id=5)
    with pytest.raises(HandshakeError, match="not a handshake"):
        parse_handshake(LbmcMessage(LBMC_TYPE_CONTROL, [RouteInfo(1, 0, 7, 0, 0, 0, 0)]), own_node_id=5)
    truncated = build_handshake("router-B", 77)
    truncated.headers.pop()
    with pytest.raises(HandshakeError, match="expected TnwgCapabilities -> GatewayName -> RouteInfo"):
        parse_handshake(truncated, own_node_id=5)
    other_version = build_handshake("router-B", 77)
    other_version.headers[0].version = 9
    with pytest.raises(HandshakeError, match="version 9"):
        parse_handshake(other_version, own_node_id=5)
