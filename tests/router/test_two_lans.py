"""One router, endpoint portals on loopback domains: data crosses only where there is interest."""
import pytest

from tests.support.routers import endpoint_xml

pytestmark = pytest.mark.integration


def bridge(routers, *domains, costs=None):
    portals = "".join(endpoint_xml(f"LAN{i + 1}", i + 1, d.config_path, (costs or {}).get(i, 1))
                      for i, d in enumerate(domains))
    return routers.start(portals).wait_ready()


def test_two_lans_100k_messages_cross_with_no_loss(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = bridge(routers, lan1, lan2)
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "-C", 100_000, "--timeout", 240, "cross.topic")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", 100_000, "-l", 64, "--start-on-stdin", "cross.topic")
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    assert source.result(240)["sent"] == 100_000
    got = receiver.result(240)
    assert (got["received"], got["gaps"], got["duplicates"]) == (100_000, 0, 0), got
    counters = router.counters()
    assert counters[0]["transport_topic_fragments_forwarded"] >= 100_000
    assert counters[1]["transport_topic_fragments_sent"] >= 100_000
    assert counters[1]["proxy_sources"] == 1 and counters[0]["proxy_receivers"] == 1
