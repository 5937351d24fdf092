"""A domain whose receivers come up together: thousands of topics of interest in a burst.

Every topic heard in one domain is an update on the router's bus for every portal, and following
the interest (proxy receivers, streams, interest for other routers) takes a pass over all of it.
Followed once per update, a burst of a few thousand topics stalled the other portals' workers for
longer than the supervisor's heartbeat timeout: they were killed as hung and restarted, their data
stalled meanwhile. Followed once per loop turn, the router takes the burst in its stride.
"""
from __future__ import annotations

import pytest

from router.um.context import Context
from tests.support.processes import wait_for
from tests.support.routers import endpoint_xml

pytestmark = pytest.mark.integration


def test_thousands_of_topics_at_once_stall_no_worker(routers, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path)
                           + endpoint_xml("LAN2", 2, lan2.config_path)).wait_ready()
    pids = router.worker_pids()
    topics = 5000
    with Context(**lan2.overrides()) as receiving:
        for n in range(topics):
            receiving.receiver(f"burst.{n}", on_message=lambda message: None)
        wait_for(lambda: router.counters()[0]["receiver_topics"] == topics, 300,
                 message="LAN1 pulled in every topic LAN2's receivers want")
        assert router.counters()[1]["local_interest_topics"] == topics
    assert "missed heartbeats" not in router.log(), router.log()
    assert router.worker_pids() == pids, "no worker was restarted"
