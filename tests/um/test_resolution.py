"""Topic resolution semantics with real contexts on loopback: OTIDs, costs, final advertisements,
use queries, and surviving garbage on the resolver socket."""
import os
import socket
import threading
import time

import pytest

from router.um.context import Context
from router.um.wire.lbmr import (TMR_FLAG_RESPONSE, TMR_TOPIC_USE, LbmrPacket, Tmr, TopicManagement,
                                 decode_lbmr, encode_lbmr)
from router.um.wire.otid import tcp_otid
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration


class Collector:
    def __init__(self):
        self.messages = []
        self.events = []
        self.lock = threading.Lock()

    def on_message(self, message):
        with self.lock:
            self.messages.append(message)

    def on_event(self, event):
        with self.lock:
            self.events.append(event)

    def payloads(self):
        with self.lock:
            return [m.data for m in self.messages]


def test_two_sources_with_different_otids_both_reach_the_receiver(contexts):
    publisher_a, publisher_b, subscriber = contexts(), contexts(), contexts()
    got = Collector()
    subscriber.receiver("prices", got.on_message, got.on_event)
    a = publisher_a.source("prices")
    b = publisher_b.source("prices")
    wait_for(lambda: a.receiver_count and b.receiver_count, 10, message="receiver joins both sources")
    for n in range(100):
        a.send(b"A%d" % n)
        b.send(b"B%d" % n)
    a.flush(); b.flush()
    wait_for(lambda: len(got.payloads()) == 200, 10, message="200 messages")
    assert {m.source for m in got.messages} == {a.source_string, b.source_string}
    assert [p for p in got.payloads() if p.startswith(b"A")] == [b"A%d" % n for n in range(100)]


def test_same_otid_joins_only_the_cheaper_and_moves_on_final_advertisement(contexts):
    otid = tcp_otid("127.0.0.1", 1, 1)
    expensive_ctx, cheap_ctx, subscriber = contexts(), contexts(), contexts()
    expensive = expensive_ctx.source("quotes", otid=otid, cost=5, hop_count=1)
    cheap = cheap_ctx.source("quotes", otid=otid, cost=2, hop_count=1, final_advertisements=5)
    got = Collector()
    subscriber.receiver("quotes", got.on_message, got.on_event)
    wait_for(lambda: cheap.receiver_count == 1, 10, message="receiver joins the cheaper path")
    # A receiver joins one path per OTID: its single BOS names the cheap source, so no join of the
    # expensive path can follow until that source ends.
    wait_for(lambda: [e.kind for e in got.events] == ["BOS"], 5, message="one BOS")
    assert got.events[0].source == cheap.source_string
    assert expensive.receiver_count == 0
    cheap.send(b"via-cheap", flush=True)
    wait_for(lambda: got.payloads() == [b"via-cheap"], 10, message="message over the cheap path")
    closed_at = time.monotonic()
    cheap_ctx.close()     # its proxy-like source sends final advertisements
    wait_for(lambda: expensive.receiver_count == 1, 5, message="receiver moves to the other path")
    assert time.monotonic() - closed_at < 1.0
    expensive.send(b"via-expensive", flush=True)
    wait_for(lambda: got.payloads() == [b"via-cheap", b"via-expensive"], 10, message="message over the other path")
    kinds = [e.kind for e in got.events]
    assert kinds == ["BOS", "EOS", "BOS"]


def test_final_advertisement_ends_the_source_without_waiting_for_tcp(contexts):
    publisher, subscriber = contexts(), contexts()
    keep = publisher.source("keep")           # keeps the shared session open
    leaving = publisher.source("leaving", final_advertisements=3)
    got = Collector()
    subscriber.receiver("keep", lambda m: None)          # keeps the connection open
    subscriber.receiver("leaving", got.on_message, got.on_event)
    wait_for(lambda: any(e.kind == "BOS" for e in got.events), 10, message="BOS")
    leaving.close()
    wait_for(lambda: any(e.kind == "EOS" for e in got.events), 1.0, message="EOS within 1 s")
    assert keep.receiver_count == 1


def test_use_queries_are_answered(contexts, domain):
    subscriber = contexts()
    subscriber.receiver("wanted", lambda m: None)
    listener = _resolver_listener(domain)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
    query = encode_lbmr(LbmrPacket(TopicManagement([Tmr(TMR_TOPIC_USE, 0, "wanted"),
                                                    Tmr(TMR_TOPIC_USE, 0, "unwanted")])))
    responses = []
    deadline = time.monotonic() + 5
    while not responses and time.monotonic() < deadline:
        sender.sendto(query, (domain.group, domain.port))
        try:
            while True:
                packet = decode_lbmr(listener.recv(65536))
                if isinstance(packet.body, TopicManagement):
                    responses += [t for t in packet.body.tmrs if t.flags & TMR_FLAG_RESPONSE]
        except socket.timeout:
            pass
    assert [(t.tmr_type, t.name) for t in responses][:1] == [(TMR_TOPIC_USE, "wanted")]
    assert all(t.name != "unwanted" for t in responses)


def test_garbage_on_the_resolver_socket_is_counted_and_survived(contexts, domain):
    publisher, subscriber = contexts(), contexts()
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
    for size in (1, 3, 7, 50, 500, 1400):
        for _ in range(20):
            sender.sendto(os.urandom(size), (domain.group, domain.port))
    sender.sendto(b"\x00\x05\x00\x01" + b"\xff" * 40, (domain.group, domain.port))
    wait_for(lambda: subscriber.counters()["lbmr_malformed"] > 0, 5, message="malformed packets counted")
    got = Collector()
    subscriber.receiver("still.works", got.on_message)
    source = publisher.source("still.works")
    wait_for(lambda: source.receiver_count == 1, 10, message="resolution after garbage")
    source.send(b"ok", flush=True)
    wait_for(lambda: got.payloads() == [b"ok"], 5, message="delivery after garbage")


def test_unicast_resolution_through_a_resolver_daemon(domain):
    from router.um.lbmrd import ResolverDaemon
    from router.um.loop import EventLoop
    loop = EventLoop("lbmrd-test")
    daemon = ResolverDaemon(loop, "127.0.0.1", 0)
    loop.start_thread()
    # The domain's groups and ports (private to this test, even beside other workers' tests; UM's
    # default immediate-message group is anyone's), not its multicast resolver: the unicast
    # resolver's UDP ports are numbered like the domain's request range.
    settings = {**{name: value for name, value in domain.overrides().items() if not name.startswith("resolver_")},
                "resolver_unicast_daemon": f"127.0.0.1:{daemon.address[1]}",
                "resolver_unicast_port_low": domain.request_low, "resolver_unicast_port_high": domain.request_high}
    publisher, subscriber = Context(**settings), Context(**settings)
    try:
        got = Collector()
        subscriber.receiver("unicast.topic", got.on_message)
        source = publisher.source("unicast.topic")
        wait_for(lambda: source.receiver_count == 1, 10, message="resolution through the daemon")
        source.send(b"hello", flush=True)
        wait_for(lambda: got.payloads() == [b"hello"], 5, message="delivery")
        assert daemon.counters["datagrams_relayed"] > 0
    finally:
        publisher.close()
        subscriber.close()
        loop.call_and_wait(daemon.close)
        loop.close()


def test_a_context_forgets_sources_that_are_gone_so_topic_churn_does_not_grow_it(contexts):
    from router.um.source_cache import CACHE_TIMEOUT
    publisher, watcher = contexts(), contexts()
    seen = Collector()
    wildcard = watcher.wildcard_receiver(r"^churn\.", seen.on_message, seen.on_event)
    for n in range(5):
        source = publisher.source(f"churn.{n}")
        wait_for(lambda: source.receiver_count == 1, 10, message="the wildcard receiver joined")
        source.send(b"once")
        source.flush()
        wait_for(lambda: len(seen.payloads()) == n + 1, 10, message="the message arrived")
        source.close()
    wait_for(lambda: sum(e.kind == "EOS" for e in seen.events) == 5, 10, message="every source ended")
    resolver = watcher.resolver
    assert len(resolver.cache) == 5 and len(wildcard.topics) == 5
    watcher._call(resolver.expire_cache, time.monotonic() + CACHE_TIMEOUT + 1)
    assert resolver.cache == {} and wildcard.topics == {} and resolver.receivers == {}
    # A new source of an old topic is found and joined as before.
    again = publisher.source("churn.1")
    wait_for(lambda: again.receiver_count == 1, 10, message="joined again")


def test_a_flood_of_advertised_topics_nobody_wants_is_bounded_and_a_wanted_one_stays(contexts, monkeypatch):
    """The cache keeps advertisements five minutes; a flood of topics nobody here receives would
    grow it without bound. Beyond MAX_CACHED_TOPICS the oldest unwanted topics are forgotten (a
    tenth at a time, counted); a topic a receiver here has is kept, and still joined."""
    from router.um import topic_resolver
    from router.um.wire.lbmr import TcpInfo, Tir
    monkeypatch.setattr(topic_resolver, "MAX_CACHED_TOPICS", 100)
    publisher, watcher = contexts(), contexts()
    got = Collector()
    watcher.receiver("flood.wanted", got.on_message)
    source = publisher.source("flood.wanted")
    wait_for(lambda: source.receiver_count == 1, 10, message="the wanted topic joined")
    resolver = watcher.resolver

    def flood():
        for n in range(1000):
            resolver._observe(Tir(f"flood.{n}", TcpInfo("10.9.9.9", 20000 + n % 1000, 1), 1, 0, []))
    watcher._call(flood)
    assert len(resolver.cache) <= 100
    assert "flood.wanted" in resolver.cache and "flood.999" in resolver.cache
    assert resolver.counters["resolver_cache_evictions"] >= 900
    source.send(b"still", flush=True)
    wait_for(lambda: got.payloads() == [b"still"], 10, message="the wanted topic still delivered")


# Sources that advertise for a fraction of a second, then answer queries only (quiescent), and
# receivers that query as briefly: the state of a domain minutes after its sources started.
_BRIEF_ADVERTISING = {"resolver_advertisement_minimum_initial_duration": 200,
                      "resolver_advertisement_sustain_interval": 0}
_BRIEF_QUERYING = {"resolver_query_minimum_initial_duration": 200, "resolver_query_sustain_interval": 0}


def _quiet(ctx) -> bool:
    resolver = ctx.resolver
    return ctx._call(lambda: all(s.quiescent for s in [*resolver.source_schedules.values(),
                                                      *resolver.query_schedules.values()]))


def test_a_final_advertisement_ends_a_joined_source_the_cache_no_longer_holds(contexts):
    """A source joined long ago, quiet since (quiescent), is no longer in the resolver cache (it
    forgets advertisements unheard for CACHE_TIMEOUT): its final advertisements still end it."""
    from router.um.source_cache import CACHE_TIMEOUT
    publisher, subscriber = contexts(**_BRIEF_ADVERTISING), contexts(**_BRIEF_QUERYING)
    keep = publisher.source("quiet.keep")                    # keeps the shared TCP session open
    leaving = publisher.source("quiet.leaving", final_advertisements=3)
    got = Collector()
    subscriber.receiver("quiet.keep", lambda m: None)
    subscriber.receiver("quiet.leaving", got.on_message, got.on_event)
    wait_for(lambda: any(e.kind == "BOS" for e in got.events), 10, message="BOS")
    wait_for(lambda: _quiet(publisher) and _quiet(subscriber), 10, message="resolution quiescent")
    subscriber._call(subscriber.resolver.expire_cache, time.monotonic() + CACHE_TIMEOUT + 1)
    leaving.close()
    wait_for(lambda: any(e.kind == "EOS" for e in got.events), 2.0, message="EOS from the final advertisements")
    assert keep.receiver_count == 1
    assert subscriber.counters()["final_advertisements_received"] >= 1


def _resolver_listener(domain) -> socket.socket:
    return domain.resolver_listener(timeout=0.2)


def test_use_query_responses_and_wildcard_queries_fit_the_resolver_datagram_size(contexts, domain):
    """A context answering a router's topic resolution request for many receivers, and querying
    for many wildcard receivers, packs its TMRs and wildcard TQRs into datagrams no larger than
    resolver_datagram_max_size (UM contexts read no more than that: a longer one is lost)."""
    from router.um.wire.lbmr import TRREQ_QUERY, TRREQ_WILDCARD_QUERY, TopicResRequest, WildcardQuery
    max_size = 600
    listener = _resolver_listener(domain)
    subscriber = contexts(resolver_datagram_max_size=max_size)
    topics = {f"market.data.equities.venue{n:03d}.instrument.level1.quotes" for n in range(60)}
    patterns = {f"^market\\.data\\.options\\.venue{n:03d}\\.instrument\\..*" for n in range(20)}
    for topic in topics:
        subscriber.receiver(topic, lambda m: None)
    for pattern in patterns:
        subscriber.wildcard_receiver(pattern, lambda m: None)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
    request = encode_lbmr(LbmrPacket(TopicResRequest(TRREQ_QUERY | TRREQ_WILDCARD_QUERY)))
    answered, queried, sizes = set(), set(), []
    deadline = time.monotonic() + 10
    try:
        while (answered != topics | patterns or queried != patterns) and time.monotonic() < deadline:
            sender.sendto(request, (domain.group, domain.port))
            try:
                while True:
                    data = listener.recv(65536)
                    packet = decode_lbmr(data)
                    if isinstance(packet.body, TopicManagement):
                        answered |= {t.name for t in packet.body.tmrs if t.flags & TMR_FLAG_RESPONSE}
                    elif isinstance(packet.body, WildcardQuery):
                        queried |= {q.pattern for q in packet.body.queries}
                    else:
                        continue
                    sizes.append(len(data))
            except socket.timeout:
                pass
    finally:
        listener.close()
        sender.close()
    assert answered == topics | patterns and queried == patterns
    assert max(sizes) <= max_size, f"datagrams of {max(sizes)} bytes over resolver_datagram_max_size {max_size}"


def test_a_receiver_whose_source_ends_queries_again_and_finds_a_quiet_other_path(contexts):
    """Two paths to one source (one OTID: two routers' proxy sources), both quiet for long
    (quiescent, forgotten by the receiver's cache). When the joined path ends, the receiver goes
    back to sustaining-phase querying (spec/dro.md §2.2), so the other path answers and is joined."""
    from router.um.source_cache import CACHE_TIMEOUT
    otid = tcp_otid("127.0.0.1", 2, 1)
    cheap_ctx, expensive_ctx = contexts(**_BRIEF_ADVERTISING), contexts(**_BRIEF_ADVERTISING)
    subscriber = contexts(resolver_query_minimum_initial_duration=200, resolver_query_sustain_interval=200,
                          resolver_query_minimum_sustain_duration=1)
    cheap = cheap_ctx.source("failover", otid=otid, cost=2, hop_count=1, final_advertisements=3)
    expensive = expensive_ctx.source("failover", otid=otid, cost=5, hop_count=1)
    got = Collector()
    subscriber.receiver("failover", got.on_message, got.on_event)
    wait_for(lambda: cheap.receiver_count == 1, 10, message="the cheaper path joined")
    wait_for(lambda: all(_quiet(c) for c in (cheap_ctx, expensive_ctx, subscriber)), 10,
             message="resolution quiescent")
    subscriber._call(subscriber.resolver.expire_cache, time.monotonic() + CACHE_TIMEOUT + 1)
    cheap_ctx.close()
    wait_for(lambda: expensive.receiver_count == 1, 5, message="the other path found and joined")
    wait_for(lambda: [e.kind for e in got.events] == ["BOS", "EOS", "BOS"], 2, message="EOS, then BOS")
    expensive.send(b"via-expensive", flush=True)
    wait_for(lambda: got.payloads() == [b"via-expensive"], 5, message="delivery over the other path")


def _finals_heard(listener: socket.socket, topic: str, expected: int, timeout: float) -> int:
    """Final advertisements of `topic` heard on the resolver group until `expected` of them or
    `timeout` (and a little past `expected`: one too many would show)."""
    from router.um.wire.lbmr import COST_INFINITE, CostOption, TopicResolution
    heard = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            packet = decode_lbmr(listener.recv(65536))
        except socket.timeout:
            if heard >= expected:
                break
            continue
        if isinstance(packet.body, TopicResolution):
            heard += sum(1 for tir in packet.body.tirs if tir.topic == topic and any(
                isinstance(option, CostOption) and option.cost == COST_INFINITE for option in tir.options))
    return heard


def test_closing_a_context_sends_its_sources_whole_series_of_final_advertisements(domain):
    """resolver_send_final_advertisements N: N final advertisements, also when the context is
    closed with the source still open (the source's close schedules them; the context's close
    must not close the resolver socket under them)."""
    listener = _resolver_listener(domain)
    try:
        publisher = Context(**domain.overrides())
        publisher.source("closing.context", final_advertisements=4)
        publisher.close()
        assert _finals_heard(listener, "closing.context", 4, 5) == 4
    finally:
        listener.close()


def test_a_context_on_a_shared_loop_sends_the_series_after_it_closed(domain):
    """A router's endpoint context runs on its worker's loop and is closed on that loop's thread
    (a portal removed by a reload): its proxy sources' final advertisements still all go out."""
    from router.um.loop import EventLoop
    listener = _resolver_listener(domain)
    loop = EventLoop("shared-loop-test")
    loop.start_thread()
    try:
        publisher = loop.call_and_wait(lambda: Context(**domain.overrides(), loop=loop))
        loop.call_and_wait(lambda: publisher.source("closing.portal", final_advertisements=4))
        loop.call_and_wait(publisher.close)
        assert _finals_heard(listener, "closing.portal", 4, 5) == 4
        wait_for(lambda: loop.call_and_wait(lambda: publisher.channel.sender.fileno() == -1), 5,
                 message="the resolver socket closed after the last one")
    finally:
        loop.close()
        listener.close()


def test_patterns_of_wildcard_queries_heard_are_remembered_within_a_bound(contexts, monkeypatch):
    """Every distinct pattern other contexts query with is compiled once and remembered; months
    of wildcard receivers made with patterns of their own (a session's, a request's) must not
    grow that without bound. The oldest are forgotten (compiled again if heard again)."""
    from router.um import topic_resolver
    from router.um.wire.lbmr import PATTERN_PCRE, WcTqr, WildcardQuery
    monkeypatch.setattr(topic_resolver, "MAX_QUERY_PATTERNS", 100)
    publisher = contexts()
    source = publisher.source("patterns.kept")
    resolver = publisher.resolver
    answered = []
    publisher._call(lambda: setattr(publisher.channel, "send_resolution",
                                    lambda tqrs=(), tirs=(): answered.extend(t.topic for t in tirs)))

    def hear(patterns):
        """On the loop's thread: what the source sends meanwhile answers these queries only."""
        answered.clear()
        for start in range(0, len(patterns), 50):
            queries = [WcTqr(pattern, PATTERN_PCRE) for pattern in patterns[start:start + 50]]
            resolver.on_packet(LbmrPacket(WildcardQuery(queries)), ("127.0.0.1", 1))
        return list(answered)
    heard = [f"^session\\.{n}\\." for n in range(1000)] + ["(unbalanced"] * 3 + ["^patterns\\."]
    assert publisher._call(hear, heard) == [source.topic]
    assert len(resolver.query_patterns) <= 100
    assert resolver.counters["bad_patterns"] == 1


def test_a_wildcard_query_too_deeply_nested_to_compile_is_counted_and_queries_go_on(contexts, domain):
    """A wildcard query's pattern comes from any application in the domain. One nested a few
    thousand groups deep fits in a resolver datagram but is beyond what the regular-expression
    compiler can recurse through: it is a bad pattern like any other (counted, not answered),
    and the queries after it are answered as before."""
    from router.um.wire.lbmr import WcTqr, WildcardQuery
    from router.um.wire.lbmr_constants import PATTERN_PCRE
    publisher = contexts()
    publisher.source("nested.ok")
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
    deep = encode_lbmr(LbmrPacket(WildcardQuery([WcTqr("(" * 3000 + "nested" + ")" * 3000)])))
    good = encode_lbmr(LbmrPacket(WildcardQuery([WcTqr("^nested\\.")])))
    sender.sendto(deep, (domain.group, domain.port))
    wait_for(lambda: publisher.resolver.counters["bad_patterns"] == 1, 5, message="the deep pattern counted")
    sender.sendto(good, (domain.group, domain.port))
    wait_for(lambda: (PATTERN_PCRE, "^nested\\.") in publisher.resolver.query_patterns, 5,
             message="the next query handled")
    assert publisher.resolver.counters["bad_patterns"] == 1


def test_a_wildcard_query_that_backtracks_without_end_is_cut_short_and_queries_go_on(contexts, domain):
    """UM matches a query's pattern with PCRE, which gives up at its match limit. Python's re
    does not: '(a|aa)+$' against a topic of sixty 'a's and a 'b' backtracks for longer than the
    universe has existed, and the context (a router's portal) answered nothing ever after. The
    pattern is cut short, counted as bad, and later queries are answered."""
    from router.um.wire.lbmr import WcTqr, WildcardQuery
    from router.um.wire.lbmr_constants import PATTERN_PCRE
    publisher = contexts()
    publisher.source("a" * 60 + "b")
    publisher.source("backtrack.ok")
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
    costly = encode_lbmr(LbmrPacket(WildcardQuery([WcTqr("(a|aa)+$")])))
    good = encode_lbmr(LbmrPacket(WildcardQuery([WcTqr("^backtrack\\.")])))
    sender.sendto(costly, (domain.group, domain.port))
    wait_for(lambda: publisher.resolver.counters["bad_patterns"] == 1, 10, message="the costly pattern counted")
    sender.sendto(costly, (domain.group, domain.port))      # heard again: not matched again
    sender.sendto(good, (domain.group, domain.port))
    wait_for(lambda: (PATTERN_PCRE, "^backtrack\\.") in publisher.resolver.query_patterns, 5,
             message="the next queries handled")
    assert publisher.resolver.counters["bad_patterns"] == 1
