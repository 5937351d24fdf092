"""Route-info on its last allowed hop is applied and recalculated; in a transit domain only the
router on the chosen path offers a destination domain, so unicast messages never loop (pure logic)."""
from router.config.model import DaemonConfig, RouteInfo, RouteRecalculation
from router.ipc import bus_messages as bm
from router.portals.forwarding import ForwardingView
from router.portals.unicast_routing import reached_domains
from router.routing.route_info import encode_route_info
from router.routing.service import RoutingService, records_to_plain, snapshot_from_plain
from router.routing.topology import Adjacency, RouterAnnouncement
from tests.routing.net import Net


# -- route-info on its last allowed hop ----------------------------------------------------------

def test_route_info_on_its_last_hop_is_applied_and_recalculated_not_counted_as_a_duplicate():
    """A route-info message arriving with ttl 1 (max-hop-count routers away, or max-hop-count 1)
    is applied to the map but not flooded on. It must still trigger a recalculation: before the
    fix the service returned early and the new router (or its changed links) never made it into
    the routes until some unrelated change came along."""
    sent, published, events = [], [], []
    daemon = DaemonConfig(route_info=RouteInfo(max_hop_count=1), route_recalculation=RouteRecalculation(500, 10000))
    routing = RoutingService(1, "r1", daemon, lambda portal, data: sent.append((portal, data)),
                             published.append, lambda event, text: events.append((event, text)))
    routing.set_route_portal("P7", True)
    routing.set_adjacency("E1", Adjacency.domain(1, 1, "E1"), now=0)
    routing.set_adjacency("P7", Adjacency.router(7, 1, "P7"), now=0)
    routing.check(now=4000)                             # the start-up calculation (still alone)
    first = len(published)

    r7 = RouterAnnouncement(7, "r7", 1, 1, (Adjacency.router(1, 1), Adjacency.domain(9, 1)), ttl=1)
    routing.on_route_info("P7", encode_route_info(r7), now=5000)
    assert routing.topology.get(7) is not None, "applied to the map"
    assert routing.counters["route_info_duplicates"] == 0, "a last-hop announcement is not a duplicate"
    routing.check(now=5600)
    assert len(published) == first + 1, "a new router heard on its last hop must trigger a recalculation"
    _, local_id, records = published[-1]
    assert routing.path(1, 9) is not None
    assert snapshot_from_plain(local_id, records).record(7) is not None

    # A change in that router, again heard with ttl 1, must reroute too.
    r7_down = RouterAnnouncement(7, "r7", 2, 2, (Adjacency.router(1, 1),), ttl=1)
    routing.on_route_info("P7", encode_route_info(r7_down), now=6000)
    routing.check(now=6600)
    assert len(published) == first + 2
    assert routing.path(1, 9) is None, "a stale route to a domain that is gone"


# -- unicast immediate messages over a transit domain ---------------------------------------------

def _views(net: Net) -> dict[str, ForwardingView]:
    views = {}
    for name in net.ids:
        portals = sorted(a.portal for a in net.adjacencies[name])
        view = ForwardingView(portals[0], {p: i for i, p in enumerate(portals)})
        snapshot = net.topology(name).snapshot()
        assert view.load_routes(bm.RouteTable(1, net.ids[name], tuple(records_to_plain(snapshot))))
        views[name] = view
    return views


def _claimers(net: Net, views, domain: int, target: int) -> list[str]:
    """Routers that tell `domain`'s applications (REMOTE_DOMAIN_ROUTE) they reach `target`."""
    found = []
    for name, adjacencies in net.adjacencies.items():
        for a in adjacencies:
            if a.kind == "domain" and a.neighbor == domain and target in reached_domains(views[name], a.portal, domain):
                found.append(name)
    return found


def _deliveries(net: Net, views, router: str, target: int, seen=()) -> list[list[str]]:
    """Every way a message for `target` that `router` took goes on (a router sending into a transit
    domain may pick ANY router there that claims the target: it picks the lowest address, which
    has nothing to do with the routes). Returns the router sequences; a loop raises."""
    seen = (*seen, router)
    portal = views[router].next_hop(target)
    assert portal is not None, f"{router} took a message for D{target} it has no path for"
    adjacency = next(a for a in net.adjacencies[router] if a.portal == portal)
    if adjacency.kind == "router":
        nxt = next(n for n, i in net.ids.items() if i == adjacency.neighbor)
        assert nxt not in seen, f"unicast loop: {' -> '.join(seen + (nxt,))}"
        return _deliveries(net, views, nxt, target, seen)
    if adjacency.neighbor == target:
        return [list(seen)]
    others = [c for c in _claimers(net, views, adjacency.neighbor, target) if c != router]
    assert others, f"{router} sends into D{adjacency.neighbor} where nobody claims D{target}"
    paths = []
    for claimer in others:
        assert claimer not in seen, f"unicast loop: {' -> '.join(seen + (claimer,))} (via D{adjacency.neighbor})"
        paths += _deliveries(net, views, claimer, target, seen)
    return paths


def transit_with_a_detour() -> Net:
    """D1 -- A -- T(D2) -- C -- D3, and B on T whose own T portal is dear, so B's way to D3 is its
    peer link to A, which goes back into T."""
    net = Net().router("A", 10).router("B", 20).router("C", 30)
    net.endpoint("A", 1).endpoint("A", 2, cost=1)
    net.endpoint("B", 2, cost=10)
    net.endpoint("C", 2, cost=1).endpoint("C", 3, cost=1)
    return net.peer("A", "B")


def test_only_the_router_on_the_chosen_path_says_in_a_transit_domain_that_it_reaches_a_domain():
    """Before the fix B said in D2 that it reaches D3 (its next hop toward D3 is not its D2
    portal), so when B had the lowest address A's message for D3 went A -> D2 -> B -> A -> D2 -> B
    ... until MAX_HOPS. Only the router that the D2 -> D3 path leaves D2 by may claim D3."""
    net = transit_with_a_detour()
    views = _views(net)
    for claimer in _claimers(net, views, 1, 3):
        for path in _deliveries(net, views, claimer, 3):
            assert path == ["A", "C"]
    assert _claimers(net, views, 2, 3) == ["C"]
    assert _claimers(net, views, 1, 3) == ["A"]


def test_unicast_from_any_domain_takes_the_chosen_path_whoever_claims():
    """Every router that claims a domain in any domain gets a message there without a loop, and
    on the chosen (cheapest) path: random meshes with transit domains and ties."""
    import random
    rng = random.Random(7)
    for _ in range(300):
        net = Net()
        names = [f"R{i}" for i in range(rng.randint(2, 6))]
        domain_count = rng.randint(2, 5)
        for name in names:
            net.router(name, rng.randint(1, 2**63 - 1))
            for domain in rng.sample(range(1, domain_count + 1), rng.randint(1, min(3, domain_count))):
                net.endpoint(name, domain, cost=rng.choice([1, 1, 2, 10]))
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if rng.random() < 0.4:
                    net.peer(a, b, rng.choice([1, 2, 10]), rng.choice([1, 2, 10]))
        views = _views(net)
        routes = net.routes(names[0])
        for source in routes.domains:
            for target in routes.domains:
                if source == target:
                    continue
                claimers = _claimers(net, views, source, target)
                path = routes.path(source, target)
                if path is None:
                    assert claimers == []
                    continue
                assert claimers == [path.routers[0].name], "exactly the router the path leaves the domain by"
                for delivered in _deliveries(net, views, claimers[0], target):
                    assert delivered == [h.name for h in path.routers]
