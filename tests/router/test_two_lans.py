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


def test_a_wildcard_receiver_with_posix_classes_gets_the_topics_it_names(routers, tools, make_domain):
    """PCRE and POSIX regex both know ``[[:digit:]]``: a wildcard receiver in LAN2 with such a
    pattern gets LAN1's source of a topic it matches (the router's interest, its proxy wildcard
    receiver in LAN1 and the contexts all match it as UM does)."""
    lan1, lan2 = make_domain(), make_domain()
    router = bridge(routers, lan1, lan2)
    count = 200
    wildcard = tools.umwrcv("-c", lan2.config_path, "--json", "-C", count, "--timeout", 60,
                            r"^feed\.[[:digit:]]+$")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-P", 1000, "--start-on-stdin", "feed.42")
    wildcard.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    assert source.result(60)["sent"] == count
    got = wildcard.result(60)
    assert (got["received"], got["gaps"], got["duplicates"]) == (count, 0, 0), got
    assert router.counters()[0]["receiver_pcre_patterns"] == 1
    assert "Possible nested set" not in router.log()
