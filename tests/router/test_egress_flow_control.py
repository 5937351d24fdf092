"""Egress flow control: a receiver that is behind makes the router hold records in its rings (and,
when they fill, push back on the source) instead of dropping them, as long as no other portal
pays for it (router.worker.datapath)."""
import pytest

from tests.support.routers import endpoint_xml

pytestmark = pytest.mark.integration


def test_an_unpaced_source_loses_nothing_to_a_receiver_that_keeps_up_on_average(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) +
                           endpoint_xml("LAN2", 2, lan2.config_path)).wait_ready()
    # 8 KB messages as fast as the source can send: far faster than the receiver's socket drains
    # in bursts, far more than the socket buffers and the 1 MB <max-queue> hold (160 MB in all).
    count, length = 20_000, 8192
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "-C", count, "--timeout", 120, "--idle-timeout", 10,
                           "unpaced")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-l", length, "--start-on-stdin",
                         "unpaced")
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    assert source.result(120)["sent"] == count
    got = receiver.result(120)
    lan2_counters = router.counters()[1]
    print(f"LAN2 portal held records back {lan2_counters['egress_backlog_holds']} times, "
          f"released {lan2_counters['egress_backlog_releases']} times")
    assert (got["received"], got["gaps"], got["duplicates"]) == (count, 0, 0), got
    assert lan2_counters["transport_topic_fragments_dropped_would_block"] == 0
    assert lan2_counters["transport_topic_fragments_sent"] >= count
