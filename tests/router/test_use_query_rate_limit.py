"""<topic-use-query><rate-limit>: a router keeping 200 topics' interest alive asks about them no
faster than the limit allows, and loses none of them for it (tshark counts the queries)."""
from __future__ import annotations

import time

import pytest

from router.um.context import Context
from tests.router.test_endpoints import start_router
from tests.support.processes import wait_for
from tests.support.tshark import LiveCapture, decode

pytestmark = pytest.mark.integration

TOPICS = 200
PER_SECOND = 40
# One start-up resolution request only: while the series lasts, every receiver answers each
# request for all its topics, which keeps the interest alive without any use query.
LIMITED = ('      <topic-resolution>\n'
           '        <topic-use-query periodic-interval="1000" timeout="500" max="3">'
           f'<rate-limit bps="0" objects-per-second="{PER_SECOND}"/></topic-use-query>\n'
           '        <initial-request periodic-interval="1000" duration="1"/>\n'
           '      </topic-resolution>\n')
TMR_RESPONSE = 0x80


def test_use_queries_keep_to_the_rate_limit_and_no_interest_is_lost(routers, make_domain, tmp_path):
    lan1, lan2 = make_domain(), make_domain()
    router = start_router(routers, [lan1, lan2], after_config=LIMITED)
    # Receivers that stop querying after a second, as quiet receivers do: only the router's use
    # queries keep their interest alive then.
    applications = Context(**lan2.overrides(), resolver_query_minimum_initial_duration=1000,
                           resolver_query_sustain_interval=0)
    pcap = tmp_path / "lan2.pcapng"
    try:
        for n in range(TOPICS):
            applications.receiver(f"limited.{n}", lambda message: None)
        wait_for(lambda: router.counters()[1]["local_interest_topics"] == TOPICS, 30, message="all interest learned")
        wait_for(lambda: router.counters()[1]["use_queries_sent"] > 0, 30, message="the first use queries")
        with LiveCapture(capture_filter=f"udp port {lan2.port}", path=pcap):
            start = time.monotonic()
            wait_for(lambda: time.monotonic() - start > 5, 10, message="five seconds of use queries")
        counters = router.counters()[1]
        assert counters["local_interest_topics"] == TOPICS          # every topic kept: answers still came
        assert counters["use_queries_rate_limited"] > 0
        # While held back the check sleeps until the limit lets the next query through: about
        # one deferred check per query sent, not one every millisecond.
        assert counters["use_queries_rate_limited"] <= 3 * counters["use_queries_sent"] + 20, counters
    finally:
        applications.close()
    frames = decode(pcap, [f"udp.port=={lan2.port},lbmr"],
                    fields=["frame.time_epoch", "lbmr.tmb.tmr.type", "lbmr.tmb.tmr.flags"])
    stamps = []
    for frame in frames:
        for flags in frame.get("lbmr.tmb.tmr.flags", []):
            if not int(flags, 0) & TMR_RESPONSE:                   # a query; answers carry RESPONSE
                stamps.append(float(frame["frame.time_epoch"][0]))
    assert stamps, "the router sent no use queries"
    span = max(stamps) - min(stamps)
    # At most a second's burst plus the rate; unlimited, all 200 would go every second.
    assert len(stamps) <= PER_SECOND * (span + 1) + 1, (len(stamps), span)
    for first in stamps:
        assert sum(first <= t < first + 1 for t in stamps) <= 2 * PER_SECOND
    assert len(stamps) >= PER_SECOND * 3                            # and it does keep asking
