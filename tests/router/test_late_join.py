"""Late join through the router: a domain whose configuration gives its sources `late_join` (the
router's proxy sources there too) lets a receiver that starts late get, from the proxy source,
what the proxy forwarded before it came, then the live messages, in order and once each."""
import pytest

from tests.support.routers import endpoint_xml

pytestmark = pytest.mark.integration


def test_a_late_receiver_gets_what_the_proxy_source_forwarded_before_it(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain("source late_join 1")
    routers.start(endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path)).wait_ready()
    first, later = 3000, 1000
    early = tools.umrcv("-c", lan2.config_path, "--json", "-C", first, "--timeout", 120, "lj.routed")
    # The source stays (--linger) after its first batch, so its proxy source in LAN2 stays too.
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", first, "-P", 10000, "-L", 60, "--start-on-stdin",
                         "lj.routed")
    early.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    got = early.result(120)
    assert (got["received"], got["gaps"], got["duplicates"], got["retransmitted"]) == (first, 0, 0, 0), got

    # A receiver that starts now gets the first messages again, from the proxy's retention.
    late = tools.umrcv("-c", lan2.config_path, "--json", "-C", first, "--timeout", 120, "lj.routed")
    got = late.result(120)
    assert (got["received"], got["retransmitted"], got["gaps"], got["duplicates"]) == (first, first, 0, 0), got
    per_source = next(iter(got["per_source"].values()))
    assert (per_source["first_seq"], per_source["last_seq"]) == (0, first - 1)

    # Live data after a late join goes on from there: a second source run on the same topic.
    more = tools.umrcv("-c", lan2.config_path, "--json", "-C", first + later, "--timeout", 120, "lj.routed")
    more.wait_for_stderr("Beginning of Transport Session", 30)
    second = tools.umsrc("-c", lan1.config_path, "--json", "-M", later, "-P", 10000, "lj.routed")
    assert second.result(120)["sent"] == later
    got = more.result(120)
    # The first source's messages are all retransmissions; of the second's, those its proxy source
    # forwarded before this receiver joined it are too (the second source sends as soon as the
    # router's proxy receiver joins it, which may be before this receiver joins the new proxy
    # source: some, none or all of them): every one arrives, once, in order.
    assert got["received"] == first + later and first <= got["retransmitted"] <= first + later, got
    assert (got["gaps"], got["duplicates"], got["out_of_order"]) == (0, 0, 0), got
