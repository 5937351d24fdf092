"""Route-info flooding with a max-hop-count: every router within max-hop-count routers of the
origin hears it, whichever copy reaches a router first.

Copies of one announcement reach a router over several paths; the first to arrive is applied and
the others are duplicates. When the first came the long way round it has little ttl left, and a
later copy over the short path still may travel further: that copy must be flooded on, or the
routers behind this one never hear the origin although it is within max-hop-count of them."""
from router.config.model import DaemonConfig, RouteInfo, RouteRecalculation
from router.routing.route_info import encode_route_info, parse_route_info
from router.routing.service import RoutingService
from router.routing.topology import Adjacency, RouterAnnouncement, Topology, UpdateOutcome
from router.um.wire.lbmc import decode_lbmc


def _announcement(ttl, sqn=1):
    return RouterAnnouncement(7, "origin", 1, sqn, (Adjacency.router(1, 1), Adjacency.domain(9, 1)), ttl)


def test_a_later_copy_with_more_ttl_left_is_flooded_on_with_it():
    sent = []
    daemon = DaemonConfig(route_info=RouteInfo(max_hop_count=3), route_recalculation=RouteRecalculation(500, 10000))
    routing = RoutingService(1, "r1", daemon, lambda portal, data: sent.append((portal, data)),
                             lambda table: None, lambda event, text: None)
    for portal in ("LONG_WAY", "SHORT_WAY", "ONWARD"):
        routing.set_route_portal(portal, True)
    # Over the long way (two routers already crossed): applied here, its last allowed hop.
    routing.on_route_info("LONG_WAY", encode_route_info(_announcement(ttl=1)), now=0)
    assert routing.topology.get(7) is not None and sent == []
    # The same announcement straight from the origin: the routers behind us are within reach.
    routing.on_route_info("SHORT_WAY", encode_route_info(_announcement(ttl=3)), now=5)
    onward = [parse_route_info(decode_lbmc(data)[0]) for portal, data in sent if portal == "ONWARD"]
    assert [a.ttl for a in onward] == [2], "flooded on with the ttl the short way leaves"
    assert {portal for portal, _ in sent} == {"ONWARD", "LONG_WAY"}
    # Another copy with no more ttl than the best one seen goes nowhere: a flood still ends.
    sent.clear()
    for portal, ttl in (("LONG_WAY", 3), ("ONWARD", 2), ("SHORT_WAY", 1)):
        routing.on_route_info(portal, encode_route_info(_announcement(ttl=ttl)), now=6)
    assert sent == []
    assert routing.counters["route_info_duplicates"] == 4


def test_the_map_says_which_duplicates_still_travel():
    topology = Topology(1, "r1", max_hop_count=5)
    assert topology.apply(_announcement(ttl=2), 0).forward_ttl == 1
    better = topology.apply(_announcement(ttl=5), 1)
    assert (better.outcome, better.forward_ttl) == (UpdateOutcome.DUPLICATE, 4)
    again = topology.apply(_announcement(ttl=4), 2)
    assert (again.outcome, again.forward_ttl) == (UpdateOutcome.DUPLICATE, None)
    newer = topology.apply(_announcement(ttl=1, sqn=2), 3)
    assert (newer.outcome, newer.forward_ttl) == (UpdateOutcome.REFRESHED, None)
    assert topology.apply(_announcement(ttl=3, sqn=2), 4).forward_ttl == 2, "the best ttl is per announcement"
