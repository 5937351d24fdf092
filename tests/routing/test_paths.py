"""Lowest-cost paths over the seed 002 topologies, tie-breaking, reroutes, and the portal queries."""
from router.routing.paths import Routes

from tests.routing.net import Net, hop_names


def direct_link():
    return Net().router("A", 10).endpoint("A", 1, cost=3).endpoint("A", 2, cost=4)


def test_direct_link_pays_the_egress_endpoint_cost():
    routes = direct_link().routes("A")
    assert hop_names(routes.path(1, 2)) == ["D1", "A", "D2"]
    assert routes.path(1, 2).cost == 4          # leaving A into D2
    assert routes.path(2, 1).cost == 3          # leaving A into D1
    assert routes.for_router(10).next_hop_portal(2) == "A.E2"


def single_peer_link():
    return (Net().router("A", 10).router("B", 20).endpoint("A", 1, cost=1).endpoint("B", 2, cost=2)
            .peer("A", "B", cost_a=5, cost_b=7))


def test_single_peer_link_sums_each_egress_portal():
    routes = single_peer_link().routes("A")
    path = routes.path(1, 2)
    assert hop_names(path) == ["D1", "A", "B", "D2"]
    assert path.cost == 5 + 2                   # A's peer portal, then B's endpoint into D2
    assert [h.cost for h in path.routers] == [5, 2]
    assert routes.path(2, 1).cost == 7 + 1
    assert len(path.routers) == 2
    assert "cost 7, 2 routers" in path.describe()


def test_a_peer_link_known_from_one_side_only_carries_nothing():
    net = single_peer_link()
    topology = net.topology("A")
    # B has not reported the link yet (its announcement predates it): no path.
    from router.routing.topology import Adjacency, RouterAnnouncement
    topology.apply(RouterAnnouncement(20, "B", 2, 2, (Adjacency.domain(2, 2),), 100), 0)
    assert Routes(topology.snapshot()).path(1, 2) is None


def test_transit_domain():
    net = (Net().router("A", 10).router("B", 20).endpoint("A", 1).endpoint("A", 2, cost=3)
           .endpoint("B", 2).endpoint("B", 3, cost=4))
    routes = net.routes("B")
    path = routes.path(1, 3)
    assert hop_names(path) == ["D1", "A", "D2", "B", "D3"]
    assert path.cost == 3 + 4
    b = routes.for_router(20)
    assert b.ingress_portal(1, 3) == "B.E2" and b.egress_portal(1, 3) == "B.E3"
    assert b.interest_portals(3) == ["B.E2"]    # D3's interest goes into the transit domain
    assert b.next_hop_portal(1) == "B.E2"
    assert routes.path(1, 4) is None


def parallel_links(cost_via_a_c=11, cost_via_b_d=7):
    """The seed's figure: D1 -- A -- C -- D2 and D1 -- B -- D -- D2."""
    net = Net().router("A", 1).router("B", 2).router("C", 3).router("D", 4)
    net.endpoint("A", 1).endpoint("B", 1).endpoint("C", 2, cost=1).endpoint("D", 2, cost=1)
    net.endpoint("C", 3).endpoint("D", 4)
    net.peer("A", "C", cost_a=cost_via_a_c - 1).peer("B", "D", cost_a=cost_via_b_d - 1)
    return net


def test_parallel_links_take_the_cheaper_path_then_reroute_when_it_fails():
    net = parallel_links()
    path = net.routes("A").path(1, 2)
    assert hop_names(path) == ["D1", "B", "D", "D2"] and path.cost == 7
    net.remove_router("B")                      # B timed out
    path = net.routes("A").path(1, 2)
    assert hop_names(path) == ["D1", "A", "C", "D2"] and path.cost == 11


def test_parallel_links_reroute_when_the_cheaper_cost_rises_above_the_other():
    net = parallel_links()
    net.set_cost("B", "B->D", 10)               # B-D now totals 11: a tie, broken by node id (A < B)
    assert hop_names(net.routes("C").path(1, 2)) == ["D1", "A", "C", "D2"]
    net.set_cost("B", "B->D", 11)               # 12 > 11
    assert hop_names(net.routes("D").path(1, 2)) == ["D1", "A", "C", "D2"]
    net.set_cost("B", "B->D", 1)
    assert hop_names(net.routes("D").path(1, 2)) == ["D1", "B", "D", "D2"]


def test_two_parallel_direct_routers_costs_2_and_5():
    net = Net().router("R1", 50).router("R2", 40)
    net.endpoint("R1", 1).endpoint("R1", 2, cost=2).endpoint("R2", 1).endpoint("R2", 2, cost=5)
    assert hop_names(net.routes("R2").path(1, 2)) == ["D1", "R1", "D2"]
    # Each router answers for its own portals (portal names are local knowledge).
    assert net.routes("R1").for_router(50).should_forward(1, 2, "R1.E2")
    assert not net.routes("R2").for_router(40).should_forward(1, 2, "R2.E2")
    assert net.routes("R2").for_router(40).egress_portal(1, 2) is None
    net.set_cost("R1", "R1.E2", 6)
    assert hop_names(net.routes("R1").path(1, 2)) == ["D1", "R2", "D2"]


def loop_of_three():
    net = Net().router("A", 1).router("B", 2).router("C", 3)
    for name, domain in (("A", 1), ("B", 2), ("C", 3)):
        net.endpoint(name, domain)
    return net.peer("A", "B").peer("B", "C").peer("C", "A")


def test_loop_of_three_goes_direct_and_around_when_cut():
    net = loop_of_three()
    assert hop_names(net.routes("A").path(1, 2)) == ["D1", "A", "B", "D2"]
    net.cut("A", "B")
    assert hop_names(net.routes("B").path(1, 2)) == ["D1", "A", "C", "B", "D2"]


def mesh_of_four():
    net = Net()
    names = ["A", "B", "C", "D"]
    for i, name in enumerate(names):
        net.router(name, 100 + i).endpoint(name, i + 1)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            net.peer(a, b)
    return net


def test_mesh_of_four_every_router_agrees_on_every_path_and_the_signature():
    net = mesh_of_four()
    views = {name: net.routes(name) for name in net.ids}
    signatures = {net.topology(name).signature() for name in net.ids}
    assert len(signatures) == 1
    for source in range(1, 5):
        for destination in range(1, 5):
            if source != destination:
                described = {tuple(hop_names(v.path(source, destination))) for v in views.values()}
                assert len(described) == 1
                assert len(next(iter(described))) == 4     # direct peer link: D, R, R, D
    net.cut("A", "B")
    path = net.routes("C").path(1, 2)
    assert path.cost == 3 and hop_names(path) == ["D1", "A", "C", "B", "D2"]   # C (102) < D (103)


def test_star_with_central_domain():
    net = Net()
    for i, name in enumerate(["A", "B", "C"]):
        net.router(name, i + 1).endpoint(name, 100).endpoint(name, i + 1)
    routes = net.routes("A")
    assert hop_names(routes.path(1, 3)) == ["D1", "A", "D100", "C", "D3"]
    assert routes.for_router(1).interest_portals(3) == ["A.E1"]
    assert net.routes("C").for_router(3).interest_portals(3) == ["C.E100"]
    assert routes.for_router(3).next_hop(3).neighbor == 3      # another router: adjacency, no portal name


def test_star_with_central_router():
    net = Net().router("H", 9)
    for i, name in enumerate(["A", "B", "C"]):
        net.router(name, i + 1).endpoint(name, i + 1).peer("H", name)
    routes = net.routes("H")
    assert hop_names(routes.path(1, 3)) == ["D1", "A", "H", "C", "D3"]
    hub = routes.for_router(9)
    assert hub.next_hop_portal(3) == "H->C"
    assert hub.interest_portals(3) == ["H->A", "H->B"]
    assert hub.should_forward(1, 3, "H->C") and not hub.should_forward(1, 3, "H->B")
    assert hub.ingress_portal(1, 3) == "H->A"
    single = Net().router("S", 1)
    for domain in (1, 2, 3, 4):
        single.endpoint("S", domain)
    assert len(single.routes("S").all_paths()) == 12


def test_ties_are_broken_by_node_id_whatever_the_insertion_order():
    def build(order):
        net = Net()
        for name, node_id in order:
            net.router(name, node_id).endpoint(name, 1).endpoint(name, 2)
        return net
    ids = [("X", 0x7000), ("Y", 0x0300), ("Z", 0x5000)]
    for order in (ids, ids[::-1], ids[1:] + ids[:1]):
        for seed in (None, 1, 2, 3):
            net = build(order)
            assert hop_names(net.routes(order[0][0], seed).path(1, 2)) == ["D1", "Y", "D2"]


def test_path_from_a_domain_to_itself_and_unknown_domains():
    routes = direct_link().routes("A")
    assert routes.path(1, 1).cost == 0
    assert routes.path(1, 99) is None and routes.path(99, 1) is None
    view = routes.for_router(10)
    assert view.next_hop_portal(99) is None and view.interest_portals(99) == []
    assert routes.for_router(12345).next_hop_portal(2) is None
