"""Where a hotlink endpoint forwards (router.portals.forwarding, pure logic): two routers X and Y both
bridge D1 and D2; X's way costs 2, Y's 5, so the one chosen path D1 -> D2 crosses X, and Y's own
cheapest way to D2 is back through D1 and X."""
from router.ipc import bus_messages as bm
from router.portals.forwarding import ForwardingView
from router.routing.service import records_to_plain
from tests.routing.net import Net

T = bm.INTEREST_TOPIC


def parallel(hotlink: int = 0) -> Net:
    """The two routers; their D1 endpoints with `hotlink`."""
    net = Net().router("X", 1).router("Y", 2)
    net.endpoint("X", 1, portal="X.D1", hotlink=hotlink).endpoint("X", 2, cost=2, portal="X.D2")
    return net.endpoint("Y", 1, portal="Y.D1", hotlink=hotlink).endpoint("Y", 2, cost=5, portal="Y.D2")


def loaded_view(net: Net, router: str, portal: str) -> ForwardingView:
    """`router`'s portal `portal` with its route table."""
    portals = sorted(a.portal for a in net.adjacencies[router])
    view = ForwardingView(portal, {name: i for i, name in enumerate(portals)})
    records = tuple(records_to_plain(net.topology(router).snapshot()))
    assert view.load_routes(bm.RouteTable(1, net.ids[router], records))
    return view


def view_of(net: Net, router: str, portal: str) -> ForwardingView:
    view = loaded_view(net, router, portal)
    view.table.apply(bm.Interest(f"{router}.D2", 2, T, "t", bm.OP_ADD))     # D2's receivers want t
    return view


def test_the_costlier_router_forwards_its_hotlink_domains_sources_too():
    net = parallel(hotlink=1)
    for router in ("X", "Y"):
        view = view_of(net, router, f"{router}.D1")
        assert view.emitted() == {(T, "t", 2)}, f"{router} pulls t from D1"
        assert view.mask_for("t", 1) == 1 << view.portal_indexes[f"{router}.D2"], f"{router} sends it into D2"


def test_without_a_hotlink_index_only_the_chosen_path_forwards():
    net = parallel()
    y = view_of(net, "Y", "Y.D1")
    assert y.emitted() == set() and y.mask_for("t", 1) == 0
    x = view_of(net, "X", "X.D1")
    assert x.mask_for("t", 1) == 1 << x.portal_indexes["X.D2"]


def test_a_hotlink_endpoint_changes_nothing_for_streams_from_elsewhere():
    """A stream that came into D1 from another domain (origin 3) is not the hotlink domain's own:
    only the chosen path carries it."""
    net = parallel(hotlink=1).endpoint("Y", 3, portal="Y.D3")
    y = view_of(net, "Y", "Y.D1")
    assert y.mask_for("t", 3) == 0


def over_peer_links(hotlink: int = 1) -> Net:
    """D1 - A == C - D2 and D1 - B == D - D2 (== a peer link): the endpoints on both datacenters
    have `hotlink`; the chosen path D1 -> D2 crosses A and C (B's and D's endpoints cost more)."""
    net = Net().router("A", 1).router("B", 2).router("C", 3).router("D", 4)
    net.endpoint("A", 1, portal="A.D1", hotlink=hotlink).endpoint("C", 2, portal="C.D2", hotlink=hotlink)
    net.endpoint("B", 1, cost=5, portal="B.D1", hotlink=hotlink).endpoint("D", 2, cost=5, portal="D.D2",
                                                                          hotlink=hotlink)
    return net.peer("A", "C").peer("B", "D")


def test_over_peer_links_the_router_off_the_chosen_path_delivers_its_copy_into_the_hotlink_domain():
    net = over_peer_links()
    d = loaded_view(net, "D", "D->B")
    d.table.apply(bm.Interest("D.D2", 2, T, "t", bm.OP_ADD))       # D2's receivers, heard by D
    assert d.emitted() == {(T, "t", 2)}, "D pulls D2's interest in over its link toward D1"
    assert d.mask_for("t", 1) == 1 << d.portal_indexes["D.D2"], "and sends what comes over it into D2"
    b = view_of_link_interest(net, "B", "B.D1", "B->D")
    assert b.emitted() == {(T, "t", 2)} and b.mask_for("t", 1) == 1 << b.portal_indexes["B->D"]


def test_over_peer_links_without_hotlink_indexes_only_the_chosen_path_carries():
    net = over_peer_links(hotlink=0)
    d = loaded_view(net, "D", "D->B")
    d.table.apply(bm.Interest("D.D2", 2, T, "t", bm.OP_ADD))
    assert d.mask_for("t", 1) == 0, "D1's stream does not come this way"
    b = view_of_link_interest(net, "B", "B.D1", "B->D")
    assert b.emitted() == set() and b.mask_for("t", 1) == 0, "B pulls nothing from D1"
    c = loaded_view(net, "C", "C->A")
    c.table.apply(bm.Interest("C.D2", 2, T, "t", bm.OP_ADD))
    assert c.emitted() == {(T, "t", 2)} and c.mask_for("t", 1) == 1 << c.portal_indexes["C.D2"]


def view_of_link_interest(net: Net, router: str, portal: str, link: str) -> ForwardingView:
    """`router`'s endpoint `portal` on D1, with D2's interest come over `link`."""
    view = loaded_view(net, router, portal)
    view.table.apply(bm.Interest(link, 2, T, "t", bm.OP_ADD))
    return view
