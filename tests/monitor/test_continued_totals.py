"""Figures counted by objects that come and go (transport sessions, a worker's channel) kept as totals."""
from types import SimpleNamespace

from router.monitor.counters import ContinuedTotals, PortalCounters
from router.portals.endpoint import EndpointPortal
from router.um.rate_limiter import RateLimiter

BYTES, FRAMES = "transport_topic_fragment_bytes_dropped_would_block", "transport_topic_fragments_dropped_would_block"


def test_growth_is_added_a_new_object_counts_from_zero_and_a_gone_one_keeps_what_it_counted():
    counters = PortalCounters()
    totals = ContinuedTotals(counters)
    first, second = object(), object()
    assert totals.update(BYTES, [(first, 100)]) == 100
    assert totals.update(BYTES, [(first, 150), (second, 10)]) == 60
    assert totals.update(BYTES, [(second, 30)]) == 20              # first is gone: its 150 stay counted
    assert totals.update(BYTES, [(second, 5)]) == 5                # went down: it started again
    assert totals.update(BYTES, []) == 0
    assert counters.get(BYTES) == 185


class Session:
    def __init__(self):
        self.counters = {"dropped_would_block_bytes": 0, "dropped_would_block_frames": 0}

    def drop(self, frames: int, size: int) -> None:
        self.counters["dropped_would_block_frames"] += frames
        self.counters["dropped_would_block_bytes"] += size

    @staticmethod
    def queued_bytes() -> int:
        return 0

    @staticmethod
    def queued_for_receivers() -> int:
        return 0


def endpoint_with(counters: PortalCounters, sessions: list) -> EndpointPortal:
    """An endpoint portal reduced to what refresh_queue_counters reads."""
    endpoint = EndpointPortal.__new__(EndpointPortal)
    channel = SimpleNamespace(counters={"packets_sent": 0, "malformed": 0})
    endpoint.context = SimpleNamespace(channel=channel, stream_counters={"transport_malformed": 0}, immediate=None,
                                       request_port=None)
    endpoint.egress = SimpleNamespace(sessions=lambda: list(sessions))
    endpoint.counters = counters
    endpoint.worker_totals = ContinuedTotals(counters)
    endpoint.queue_episodes = SimpleNamespace(sample=lambda waiting, now: None)
    endpoint._rate_limited = lambda name, text: None
    endpoint.config = SimpleNamespace(max_queue=1000)
    return endpoint


def test_would_block_drops_keep_counting_after_the_session_that_dropped_most_has_closed():
    """A transport session closes with its last proxy source; the next one counts from zero. Its
    drops are drops too, though fewer than the closed session's."""
    counters = PortalCounters()
    sessions = [Session()]
    endpoint = endpoint_with(counters, sessions)
    sessions[0].drop(10, 10_000)
    endpoint.refresh_queue_counters()
    assert (counters.get(FRAMES), counters.get(BYTES)) == (10, 10_000)

    sessions[:] = [Session()]                   # the sources went, and came back: a new session
    endpoint.refresh_queue_counters()
    sessions[0].drop(2, 500)
    endpoint.refresh_queue_counters()
    assert (counters.get(FRAMES), counters.get(BYTES)) == (12, 10_500)


def test_a_restarted_worker_adds_to_the_totals_of_the_one_before():
    counters = PortalCounters()
    counters.set(FRAMES, 10)                    # what the killed worker counted, in the shared segment
    counters.set(BYTES, 10_000)
    counters.set("lbmr_packets_sent", 40)
    sessions = [Session()]
    endpoint = endpoint_with(counters, sessions)
    endpoint.context.channel.counters["packets_sent"] = 3
    sessions[0].drop(1, 300)
    endpoint.refresh_queue_counters()
    assert (counters.get(FRAMES), counters.get(BYTES), counters.get("lbmr_packets_sent")) == (11, 10_300, 43)


def test_a_restarted_peer_worker_continues_the_rtt_sum_exactly():
    """rtt_sum_us is a running total (the exact mean over any interval comes from it): a new keepalive
    monitor over the same counters resumes it, not the whole-µs running mean times the samples."""
    from router.portals.peer_keepalive import KeepaliveMonitor, keepalive_header
    now = [10_000_000_000]
    counters = PortalCounters()
    for name, value in (("rtt_samples", 3), ("rtt_sum_us", 1000), ("rtt_mean", 333), ("rtt_min", 300),
                        ("rtt_max", 400)):
        counters.set(name, value)                 # what the killed worker's monitor left
    monitor = KeepaliveMonitor(100, 300, True, counters, clock_ns=lambda: now[0])
    response = KeepaliveMonitor.make_response(keepalive_header(monitor.make_query()))
    now[0] += 500_000                             # 500 µs later
    assert monitor.on_response(keepalive_header(response)) == 500
    assert (counters.get("rtt_samples"), counters.get("rtt_sum_us"), counters.get("rtt_mean")) == (4, 1500, 375)


def test_grew_names_the_objects_counting_since_the_last_update():
    totals = ContinuedTotals(PortalCounters())
    first, second = object(), object()
    assert totals.grew(BYTES, [(first, 0)]) == []
    assert totals.grew(BYTES, [(first, 100)]) == [first]
    totals.update(BYTES, [(first, 100), (second, 0)])
    assert totals.grew(BYTES, [(first, 100), (second, 5)]) == [second]
    totals.update(BYTES, [(first, 100), (second, 5)])
    assert totals.grew(BYTES, [(first, 3), (second, 5)]) == [first]     # it started again


def test_the_drop_line_says_what_held_the_queue_back_a_rate_limit_or_a_receiver():
    """An LBT-RM or LBT-RU proxy source never waits for its receivers: its queue overflows because
    its data rate limit holds back what comes faster, and the line says so, naming the option; a
    TCP session's overflows because a receiver does not keep up."""
    counters, lines = PortalCounters(), []
    tcp, multicast = Session(), Session()
    multicast.kind, multicast.rate_limit_option = "LBT-RM", "transport_lbtrm_data_rate_limit"
    multicast.data_rate = RateLimiter(1_000_000, 0.1, 8192)
    endpoint = endpoint_with(counters, [tcp, multicast])
    endpoint._rate_limited = lambda name, text: lines.append(text)
    multicast.drop(1, 800)
    endpoint.refresh_queue_counters()
    assert lines == ["the LBT-RM rate limit (transport_lbtrm_data_rate_limit 1000000 bits/s) holds back what comes "
                     "faster: 800 bytes dropped so far (queue limit 1000 bytes)"]
    tcp.drop(1, 200)
    endpoint.refresh_queue_counters()
    assert lines[-1] == "a receiver is not keeping up: 1000 bytes dropped so far (queue limit 1000 bytes)"
    tcp.drop(1, 100)
    multicast.drop(1, 100)
    endpoint.refresh_queue_counters()
    assert lines[-1].startswith("a receiver is not keeping up; the LBT-RM rate limit (transport_lbtrm_data_rate_limit")
