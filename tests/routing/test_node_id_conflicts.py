"""Two routers with one node id: each must be unique in the network (spec/dro.md §2.5).

Our own route-info comes back to us round every loop, and is only a duplicate. Another router's
route-info under our node id is not: the two routers shadow each other in every map, so it is a
forbidden topology, counted, logged once and listed by `routerctl topology` while it is heard.
A router between the two hears one node id under two names, which it reports the same way."""
from router.config.model import DaemonConfig, RouteInfo, RouteRecalculation
from router.routing.route_info import encode_route_info
from router.routing.service import RoutingService
from router.routing.topology import TWO_ROUTERS_WITH_ONE_NODE_ID, Adjacency, Topology

OUR_ID = 0x51


def _service(timeout=4000):
    events, sent_to = [], []
    daemon = DaemonConfig(route_info=RouteInfo(timeout=timeout), route_recalculation=RouteRecalculation(500, 10000))
    routing = RoutingService(OUR_ID, "dro-east", daemon, lambda portal, data: sent_to.append(portal),
                             lambda table: None, lambda event, text: events.append((event, text)))
    routing.set_route_portal("TO_HUB", True)
    return routing, events, sent_to


def _announcement(node_id: int, name: str, announcements: int = 1) -> bytes:
    other = Topology(node_id, name)
    other.set_local_adjacencies([Adjacency.domain(9, 1)])
    for _ in range(announcements - 1):
        other.next_announcement()
    return encode_route_info(other.next_announcement())


def _conflicts(routing, now) -> list[dict]:
    return [f for f in routing.describe(now=now)["forbidden"] if f["kind"] == TWO_ROUTERS_WITH_ONE_NODE_ID]


def _logged(events) -> list[str]:
    return [text for event, text in events if event == "forbidden-topology"]


def test_our_own_route_info_coming_back_is_a_duplicate_not_a_conflict():
    routing, events, _ = _service()
    own = encode_route_info(routing.topology.next_announcement())
    routing.on_route_info("TO_HUB", own, now=0)
    assert routing.counters["route_info_duplicates"] == 1
    assert routing.counters["route_info_node_id_conflicts"] == 0
    assert _conflicts(routing, 0) == [] and _logged(events) == []


def test_another_router_with_our_node_id_is_counted_logged_once_and_listed():
    routing, events, _ = _service()
    for now in range(0, 3000, 250):
        routing.on_route_info("TO_HUB", _announcement(OUR_ID, "dro-west", now // 250 + 1), now=now)
        routing.check(now=now)
    assert routing.counters["route_info_node_id_conflicts"] == 12
    assert routing.counters["route_info_duplicates"] == 0
    [listed] = _conflicts(routing, 3000)
    for word in ("dro-east", "dro-west", "0x51", "TO_HUB"):
        assert word in listed["message"], listed
    assert [text for text in _logged(events)] == [listed["message"]]
    assert routing.topology.get(OUR_ID).name == "dro-east", "our own record is never replaced"


def test_a_second_router_under_our_name_and_node_id_is_told_by_its_newer_sequence_numbers():
    routing, events, _ = _service()
    for _ in range(3):
        routing.topology.next_announcement()
    routing.on_route_info("TO_HUB", _announcement(OUR_ID, "dro-east", 3), now=0)
    assert routing.counters["route_info_node_id_conflicts"] == 0, "announcement 3 is one of ours"
    routing.on_route_info("TO_HUB", _announcement(OUR_ID, "dro-east", 9), now=1)
    assert routing.counters["route_info_node_id_conflicts"] == 1
    assert len(_conflicts(routing, 1)) == 1


def test_a_conflict_no_longer_heard_is_forgotten():
    routing, _, _ = _service(timeout=2000)
    routing.on_route_info("TO_HUB", _announcement(OUR_ID, "dro-west"), now=0)
    routing.check(now=1999)
    assert len(_conflicts(routing, 1999)) == 1
    routing.check(now=2000)
    assert _conflicts(routing, 2000) == []


def test_a_router_between_the_two_keeps_the_first_in_its_map_and_floods_the_other_on_once():
    routing, events, sent = _service()
    routing.set_route_portal("TO_WEST", True)
    routing.set_route_portal("TO_NORTH", True)
    routing.on_route_info("TO_WEST", _announcement(0x77, "dro-west", 1), now=0)
    north = _announcement(0x77, "dro-north", 5)
    routing.on_route_info("TO_NORTH", north, now=10)
    routing.on_route_info("TO_HUB", north, now=11)              # the same, the long way round
    routing.on_route_info("TO_WEST", _announcement(0x77, "dro-west", 2), now=20)
    assert routing.counters["route_info_node_id_conflicts"] == 2
    assert routing.topology.get(0x77).name == "dro-west", "the map does not flap between the two"
    assert sent == ["TO_HUB", "TO_NORTH", "TO_HUB", "TO_WEST", "TO_HUB", "TO_NORTH"], \
        "each announcement flooded on once, so the two routers hear of each other"
    [listed] = _conflicts(routing, 20)
    for word in ("dro-west", "dro-north", "0x77", "TO_HUB"):      # where it was heard last
        assert word in listed["message"], listed
    assert len(_logged(events)) == 1


def test_a_conflict_heard_again_after_it_was_forgotten_is_logged_again():
    routing, events, _ = _service(timeout=2000)
    routing.on_route_info("TO_HUB", _announcement(OUR_ID, "dro-west"), now=0)
    routing.check(now=2000)
    assert _conflicts(routing, 2000) == []
    routing.on_route_info("TO_HUB", _announcement(OUR_ID, "dro-west", 5), now=2500)
    assert len(_conflicts(routing, 2500)) == 1
    assert len(_logged(events)) == 2, "the operator hears of it each time it appears"
