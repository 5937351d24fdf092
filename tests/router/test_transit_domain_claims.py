"""Unicast immediate messages across a transit domain with routers on loopback: only the router on
the chosen path offers the destination, and nothing loops."""
import pytest

from router.um.context import Context

from tests.support.peer_links import converged, routerctl, start
from tests.router.test_unicast_immediate import Inbox
from tests.support.processes import wait_for
from tests.support.routers import endpoint_xml, free_port, peer_xml

pytestmark = pytest.mark.integration


def test_in_a_transit_domain_only_the_router_on_the_path_offers_a_domain_and_messages_do_not_loop(
        routers, make_domain, tmp_path):
    """D1 -- A -- D2 (transit) -- C -- D3, and B on D2 whose D2 portal is dear (cost 10) but with a
    peer link to A: B's way to D3 is back over A and into D2 again. Before the fix B said in D2
    that it reaches D1 and D3; A, sending a message for D3 into D2, hands it to the lowest address
    that says so (B: the others' request ports in D2 are above its), B sends it to A, A into D2 to
    B again... 255 times, dropped."""
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    # B's request port in D2 is the lowest there: C and A take theirs from the top of the range.
    upper = tmp_path / "d2-upper.cfg"
    upper.write_text(lan2.config_path.read_text().replace(
        f"context request_tcp_port_low {lan2.request_low}\n", f"context request_tcp_port_low {lan2.request_low + 2}\n"))
    assert upper.read_text() != lan2.config_path.read_text()
    port = free_port()
    b = start(routers, endpoint_xml("E2", 2, lan2.config_path, cost=10) + peer_xml("TO_A", listen=port), "rrb")
    b.wait_ready()
    c = start(routers, endpoint_xml("E2", 2, upper) + endpoint_xml("E3", 3, lan3.config_path), "rrc")
    c.wait_ready()
    a = start(routers, endpoint_xml("E1", 1, lan1.config_path) + endpoint_xml("E2", 2, upper)
              + peer_xml("TO_B", connect=port), "rra")
    a.wait_ready()
    wait_for(lambda: converged([a, b, c], 3), 30, message="the three routers converged")
    sender, far, middle = Context(**lan1.overrides()), Context(**lan3.overrides()), Context(**lan2.overrides())
    try:
        far_got = Inbox(far, "t")
        far_ip, far_port = far.request_address()
        c_address = routerctl(c, "topics")["portals"]["E2"]["unicast_address"]
        wait_for(lambda: f"{c_address} reaches [3]" in routerctl(a, "topics")["portals"]["E2"]
                 ["unicast_routers_on_domain"] and sender.resolver.domain_routes.router_for(3) is not None, 20,
                 message="A hears in D2 that C reaches D3, D1 hears A does")
        for n in range(5):
            sender.send_unicast_immediate(f"TCP:3:{far_ip}:{far_port}", "t", b"far %d" % n)
        wait_for(lambda: len(far_got.on_topic) == 5, 10, message="D3 got every message")
        assert b.counters()[0]["unicast_data_msgs_rcvd"] == 0, "nothing went round through B"
        assert routerctl(b, "topics")["portals"]["E2"]["unicast_domains"] == [], "B is on no chosen path out of D2"
        # D2's contexts learn who reaches D3 from the routers' periodic domain routes: wait for one.
        wait_for(lambda: middle.resolver.domain_routes.router_for(3) is not None, 20,
                 message="D2 hears which router reaches D3")
        ip, port_ = middle.resolver.domain_routes.router_for(3)
        assert f"{ip}:{port_}" == c_address, "in D2 only C says it reaches D3"
    finally:
        for context in (sender, far, middle):
            context.close()
