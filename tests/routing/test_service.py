"""RoutingService: the supervisor's routing state, driven by hand (no processes, no clock)."""
from router.config.model import DaemonConfig, RouteInfo, RouteRecalculation
from router.routing.route_info import encode_route_info, parse_route_info
from router.routing.service import RoutingService, snapshot_from_plain
from router.routing.topology import Adjacency, Topology
from router.um.wire.lbmc import decode_lbmc


def service(node_id=1, name="r1", backoff=500, timeout=4000):
    sent, published, events = [], [], []
    daemon = DaemonConfig(route_info=RouteInfo(timeout=timeout), route_recalculation=RouteRecalculation(backoff, 10000))
    routing = RoutingService(node_id, name, daemon, lambda portal, data: sent.append((portal, data)),
                             published.append, lambda event, text: events.append((event, text)))
    return routing, sent, published, events


def announcement_of(data: bytes):
    return parse_route_info(decode_lbmc(data)[0])


def test_first_calculation_waits_to_hear_the_others_and_later_ones_wait_for_the_backoff():
    routing, sent, published, _ = service()
    routing.set_route_portal("E1", True)
    routing.set_adjacency("E1", Adjacency.domain(1, 1, "E1"), now=0)
    routing.check(now=3999)
    assert published == [], "the routers already there have the route-info timeout to be heard"
    routing.check(now=4000)
    assert len(published) == 1, "a router still alone then routes at once"
    routing.set_adjacency("E2", Adjacency.domain(2, 1, "E2"), now=4010)
    routing.check(now=4100)
    assert len(published) == 1
    routing.check(now=4510)
    assert len(published) == 2
    version, local_id, records = published[-1]
    snapshot = snapshot_from_plain(local_id, records)
    assert [a.neighbor for a in snapshot.record(1).adjacencies] == [1, 2]
    assert {a.portal for a in snapshot.record(1).adjacencies} == {"E1", "E2"}, "portal names reach the workers"


def test_route_info_is_applied_and_flooded_on_with_one_less_ttl_but_never_twice():
    routing, sent, published, _ = service()
    for portal in ("P1", "P2", "E1"):
        routing.set_route_portal(portal, True)
    other = Topology(7, "r7")
    other.set_local_adjacencies([Adjacency.router(1, 1), Adjacency.domain(9, 1)])
    data = encode_route_info(other.next_announcement())
    sent.clear()
    routing.on_route_info("P1", data, now=0)
    assert sorted(portal for portal, _ in sent) == ["E1", "P2"], "flooded everywhere but where it came from"
    assert announcement_of(sent[0][1]).ttl == 99
    sent.clear()
    routing.on_route_info("P2", data, now=1)
    assert sent == [] and routing.counters["route_info_duplicates"] == 1
    assert routing.topology.get(7).name == "r7"


def test_silent_routers_time_out_and_malformed_route_info_is_counted():
    routing, sent, published, events = service(timeout=1000, backoff=0)
    routing.set_route_portal("P1", True)
    other = Topology(7, "r7")
    routing.on_route_info("P1", encode_route_info(other.next_announcement()), now=0)
    routing.on_route_info("P1", b"\x08\xff\x00\x04", now=0)
    assert routing.counters["route_info_malformed"] == 1
    routing.check(now=1500)
    assert routing.topology.get(7) is None
    assert any("DRO TIMED OUT" in text for _, text in events)


def test_forbidden_topologies_are_logged_once_and_described():
    routing, sent, published, events = service()
    routing.set_adjacency("P1", Adjacency.router(7, 1, "P1"), now=0)
    routing.set_adjacency("P2", Adjacency.router(7, 2, "P2"), now=0)
    routing.check(now=4000)
    routing.check(now=4010)
    logged = [text for event, text in events if event == "forbidden-topology"]
    assert len(logged) == 1 and "P1" in logged[0] and "P2" in logged[0]
    described = routing.describe(now=20)
    assert described["forbidden"][0]["kind"] == "two-peer-links"
    assert described["routers"][0]["local"] and described["signature"].startswith("0x")


def test_own_announcements_go_out_on_every_route_portal_with_a_new_sqn():
    routing, sent, _, _ = service()
    routing.set_route_portal("E1", True)
    routing.set_adjacency("E1", Adjacency.domain(1, 3, "E1", "239.1.1.1:1000"), now=0)
    sent.clear()
    routing.propagate()
    routing.propagate()
    first, second = (announcement_of(data) for _, data in sent)
    assert second.sqn == first.sqn + 1 and first.adjacencies[0].cost == 3 and first.adjacencies[0].identity


def test_a_starting_router_waits_no_longer_than_the_timeout_for_routers_that_never_hear_it():
    """Routers our announcements do not reach never announce our map: after the route-info
    timeout from hearing them, we route without them knowing us (a normal recalculation)."""
    routing, _, published, events = service(backoff=500, timeout=4000)
    routing.set_route_portal("E1", True)
    routing.set_adjacency("E1", Adjacency.domain(1, 1, "E1"), now=0)
    routing.set_adjacency("E2", Adjacency.domain(2, 1, "E2"), now=0)
    routing.check(now=900)
    other = Topology(7, "r7")
    other.set_local_adjacencies([Adjacency.domain(1, 1), Adjacency.domain(2, 1)])
    routing.on_route_info("E1", encode_route_info(other.next_announcement()), now=1000)
    routing.check(now=1000)
    for now in range(1250, 5000, 250):
        routing.on_route_info("E1", encode_route_info(other.next_announcement()), now=now)
        routing.check(now=now)
    assert published == []
    routing.check(now=5000)
    assert len(published) == 1 and routing.path(1, 2) is not None
    assert not any("FORCED RECALC" in text for _, text in events), "a normal recalculation, not a forced one"


def test_a_router_back_next_to_its_twin_takes_over_only_after_the_twin_lets_go():
    """Y bridges D1-D2 and forwards; Z starts on the same two domains at a lower cost. Z hears Y
    before Y hears Z (Y answers Z's CTXINFO first). Z's first routes must come no sooner than Y's
    recalculation, or both forward for the difference: every message twice. Both run their
    timers (propagation 200 ms, check 100 ms) in one simulated clock."""
    def node(node_id, name):
        daemon = DaemonConfig(route_info=RouteInfo(propagation_interval=200, check_interval=100, timeout=2000),
                              route_recalculation=RouteRecalculation(300, 5000))
        outbox, published = [], []
        routing = RoutingService(node_id, name, daemon, lambda portal, data: outbox.append(data),
                                 published.append, lambda event, text: None)
        routing.set_route_portal("E1", True)
        routing.set_route_portal("E2", True)
        return routing, outbox, published

    y, y_out, y_published = node(0x20, "y")
    y.set_adjacency("E1", Adjacency.domain(1, 1, "E1"), now=0)
    y.set_adjacency("E2", Adjacency.domain(2, 5, "E2"), now=0)
    z = z_out = z_published = None
    z_start, y_hears_z_from = 10_000, 10_450
    y_recalculated_at = z_routed_at = None
    for now in range(0, 16_000, 50):
        if now == z_start:
            z, z_out, z_published = node(0x10, "z")
            z.set_adjacency("E1", Adjacency.domain(1, 1, "E1"), now=now)
            z.set_adjacency("E2", Adjacency.domain(2, 2, "E2"), now=now)
        if now % 200 == 0:
            y.propagate()
            if z is not None:
                z.propagate()
        if z is not None:
            for data in y_out:
                z.on_route_info("E1", data, now=now)
            if now >= y_hears_z_from:
                for data in z_out:
                    y.on_route_info("E1", data, now=now)
            z_out.clear()
        y_out.clear()
        if now % 100 == 0:
            before = len(y_published)
            y.check(now=now)
            if z is not None:
                z.check(now=now)
            if z is not None and len(y_published) > before and y_recalculated_at is None and now > z_start:
                y_recalculated_at = now
        if z_published and z_routed_at is None:
            z_routed_at = now
    assert y_recalculated_at is not None and z_routed_at is not None, (y_recalculated_at, z_routed_at)
    assert y.path(1, 2)["routers"] == 1 and "z" in y.path(1, 2)["text"], "Y's routes go by Z"
    assert z_routed_at >= y_recalculated_at, (z_routed_at, y_recalculated_at)


def test_a_hotlink_index_changed_alone_reaches_the_workers_at_once():
    """What stays local (an endpoint's hotlink index) changes no route and nothing between routers,
    but the workers decide by it: a new table goes to them without a recalculation."""
    routing, sent, published, _ = service()
    routing.set_route_portal("E1", True)
    routing.set_adjacency("E1", Adjacency.domain(1, 1, "E1"), now=0)
    routing.check(now=4000)
    assert len(published) == 1
    sent.clear()
    routing.set_adjacency("E1", Adjacency.domain(1, 1, "E1", hotlink=3), now=4010)
    assert len(published) == 2 and published[-1][0] > published[0][0]
    version, local_id, records = published[-1]
    assert [a.hotlink for a in snapshot_from_plain(local_id, records).record(1).adjacencies] == [3]
    assert sent == [], "nothing for the other routers: their map did not change"


def test_before_the_first_calculation_a_local_change_publishes_nothing():
    routing, _, published, _ = service()
    routing.set_adjacency("E1", Adjacency.domain(1, 1, "E1"), now=0)
    routing.set_adjacency("E1", Adjacency.domain(1, 1, "E1", hotlink=3), now=10)
    assert published == []
