"""Use queries for many long topic names: the router packs them into LBMR datagrams no larger than
its resolver_datagram_max_size (a UM context reads no more than that of one), and every topic's
interest stays alive on its receivers' answers."""
from __future__ import annotations


import pytest

from router.um.context import Context
from router.um.wire.errors import WireError
from router.um.wire.lbmr import SRC_TYPE_TNWGD, TMR_FLAG_RESPONSE, SrcTypeOption, TopicManagement, decode_lbmr
from tests.router.test_endpoints import start_router
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration

TOPICS = 200
# The router's resolver datagrams: one Ethernet frame's worth (no IP fragments). The applications
# keep UM's default (8192): each of their use-query answers confirms about thirty topics at once.
DATAGRAM_MAX = 1400
# Quick use queries, unlimited (the rate limit is not what this test is about); one start-up
# resolution request only, so the use queries alone keep the interest alive afterwards.
QUICK_QUERIES = ('      <topic-resolution>\n'
                 '        <topic-use-query periodic-interval="1000" timeout="500" max="3">'
                 '<rate-limit bps="0" objects-per-second="0"/></topic-use-query>\n'
                 '        <initial-request periodic-interval="1000" duration="1"/>\n'
                 '      </topic-resolution>\n')


def _long_topic(n: int) -> str:
    return f"{n:03d}." + "long-topic-name-" * 14 + "end"          # 247 characters


class UseQueryWatcher:
    """Listens in a domain for the router's use queries: the size of each datagram holding them,
    and the topics they ask about."""

    def __init__(self, domain):
        self.sock = domain.resolver_listener(receive_buffer=8 * 1024 * 1024)
        self.sizes: list[int] = []
        self.asked: dict[str, int] = {}

    def drain(self) -> None:
        while True:
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                return
            try:
                packet = decode_lbmr(data)
            except WireError:
                continue
            if not isinstance(packet.body, TopicManagement):
                continue
            if not any(isinstance(o, SrcTypeOption) and o.src_type == SRC_TYPE_TNWGD for o in packet.options):
                continue
            queries = [tmr.name for tmr in packet.body.tmrs if not tmr.flags & TMR_FLAG_RESPONSE]
            if queries:
                self.sizes.append(len(data))
                for name in queries:
                    self.asked[name] = self.asked.get(name, 0) + 1

    def asked_each(self, topics, times: int) -> bool:
        self.drain()
        return all(self.asked.get(topic, 0) >= times for topic in topics)

    def close(self) -> None:
        self.sock.close()


def test_use_queries_for_long_topic_names_fit_the_resolver_datagram_size(routers, make_domain):
    lan1, lan2 = make_domain(), make_domain(f"context resolver_datagram_max_size {DATAGRAM_MAX}")
    router = start_router(routers, [lan1, lan2], after_config=QUICK_QUERIES)
    # Receivers that stop querying after a second, as quiet receivers do: only their answers to
    # the router's use queries keep their interest alive then.
    applications = Context(**lan2.overrides(), resolver_query_minimum_initial_duration=1000,
                           resolver_query_sustain_interval=0)
    watcher = UseQueryWatcher(lan2)
    topics = [_long_topic(n) for n in range(TOPICS)]
    try:
        for topic in topics:
            applications.receiver(topic, lambda message: None)
        wait_for(lambda: router.counters()[1]["local_interest_topics"] == TOPICS, 30, message="all interest learned")
        # Three rounds of use queries: each round confirms every topic, or the interest would
        # have expired by the third (periodic 1 s, then three unanswered 0.5 s timeouts).
        wait_for(lambda: watcher.asked_each(topics, 3), 60, message="three use queries for every topic")
        # The worker counts a round once all its datagrams are out, so the watcher may read the last
        # of them before the count moves.
        wait_for(lambda: router.counters()[1]["use_queries_sent"] >= 3 * TOPICS, 10, message="use queries counted")
        counters = router.counters()[1]
    finally:
        watcher.close()
        applications.close()
    assert max(watcher.sizes) <= DATAGRAM_MAX, sorted(watcher.sizes)[-5:]
    assert counters["local_interest_topics"] == TOPICS, counters
