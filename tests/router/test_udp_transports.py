"""LBT-RM and LBT-RU through the router, the same checks for both: a UDP transport in one domain
and LBT-TCP in the other, both ways at once; loss at a receiver repaired by the router's proxy
source; loss at the router's own proxy receiver repaired by the application's source.

Loss is made with the transport's LOSS_RATE variable in a receiver's environment (it drops that
share of the DATA datagrams it receives): what it misses it must NAK and get back.
"""
import json

import pytest

from tests.support.delivery import complete, send_and_receive, start_receiver, start_source
from tests.support.routers import endpoint_xml

pytestmark = pytest.mark.integration

# transport option, LOSS_RATE variable, the session string's prefix
TRANSPORTS = {"lbtrm": ("LBTRM_LOSS_RATE", "LBTRM"), "lbtru": ("LBTRU_LOSS_RATE", "LBTRU")}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_udp_transport_and_tcp_convert_both_ways_and_lost_datagrams_are_repaired(routers, tools, make_domain,
                                                                                    transport):
    loss_variable, prefix = TRANSPORTS[transport]
    lan1, lan2 = make_domain(f"source transport {transport}"), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path)
                           + endpoint_xml("LAN2", 2, lan2.config_path)).wait_ready()
    count = 50_000
    # East: a UDP-transport source in LAN1, the router's proxy receiver, a TCP proxy source in
    # LAN2. West: a TCP source in LAN2, a UDP-transport proxy source in LAN1, and a receiver there
    # that loses 5% of what it hears and asks the proxy source for it.
    east = start_receiver(tools, lan2, "udp.east", count)
    west = start_receiver(tools, lan1, "udp.west", count, 5, loss_variable)
    east_source = start_source(tools, lan1, "udp.east", count)
    west_source = start_source(tools, lan2, "udp.west", count)
    east.wait_for_stderr("Beginning of Transport Session", 30)
    west.wait_for_stderr("Beginning of Transport Session", 30)
    east_source.send_line(), west_source.send_line()
    assert east_source.result(240)["sent"] == west_source.result(240)["sent"] == count
    east_got, west_got = east.result(240), west.result(240)
    assert complete(east_got, count), json.dumps(east_got)
    assert complete(west_got, count), json.dumps(west_got)
    assert [s.split(":")[0] for s in west_got["um_sources"]] == [prefix], west_got["um_sources"]
    (west_transport,) = west_got["transports"].values()
    assert west_transport["naks_sent"] > 0 and west_transport["retransmissions_rcved"] > 0, west_transport
    assert west_transport["lost"] == 0, west_transport

    lan1_counters, lan2_counters = router.counters()[0], router.counters()[1]
    assert lan1_counters["transport_topic_fragments_forwarded"] >= count      # UDP transport in
    assert lan2_counters["transport_topic_fragments_sent"] >= count           # TCP out
    assert lan2_counters["transport_topic_fragments_forwarded"] >= count      # TCP in
    assert lan1_counters["transport_topic_fragments_sent"] >= count           # UDP transport out
    assert lan1_counters["proxy_sources_created"] == lan2_counters["proxy_sources_created"] == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_routers_proxy_receiver_repairs_its_own_loss(routers, tools, make_domain, transport):
    """The router's proxy receiver is a receiver like any: it NAKs what it loses."""
    loss_variable, _ = TRANSPORTS[transport]
    lan1, lan2 = make_domain(f"source transport {transport}"), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path),
                           env={loss_variable: "3"}).wait_ready()
    count = 20_000
    receiver = start_receiver(tools, lan2, "udp.lossy", count)
    send_and_receive(start_source(tools, lan1, "udp.lossy", count, size=200), receiver, count)
    router.wait_for_log(f"dropping 3.0% of received DATA datagrams on purpose ({loss_variable})")
