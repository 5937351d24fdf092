"""What a worker keeps from its route table stays bounded by the map, whatever the traffic says.

A worker answers its portals' questions from the route table (router.portals.forwarding) and
remembers each answer until the next route change, which a stable network may not see for weeks.
The origin domain of a stream is the source's advertisement to write: any u32, one no path
reaches included."""
import tracemalloc

from router.ipc import bus_messages as bm
from router.portals.forwarding import ForwardingView
from router.routing.service import records_to_plain
from tests.routing.net import Net


def _view_at_a(portal: str) -> ForwardingView:
    """A(D1) - B(D2) - C(D3) in a line of peer links, seen by A's portal ``portal``."""
    net = Net().router("A", 1).router("B", 2).router("C", 3)
    net.endpoint("A", 1).endpoint("B", 2).endpoint("C", 3).peer("A", "B").peer("B", "C")
    portals = sorted(a.portal for a in net.adjacencies["A"])
    view = ForwardingView(portal, {name: i for i, name in enumerate(portals)})
    snapshot = net.topology("A").snapshot()
    assert view.load_routes(bm.RouteTable(1, net.ids["A"], tuple(records_to_plain(snapshot))))
    view.table.apply(bm.Interest("A->B", 3, bm.INTEREST_TOPIC, "t", bm.OP_ADD))
    return view


def test_streams_from_domains_no_path_reaches_leave_nothing_behind():
    view = _view_at_a("A.E1")
    assert view.mask_for("t", 1) == 1 << view.portal_indexes["A->B"]
    for origin in range(1000, 1200):              # what any first use allocates for good
        view.mask_for("t", origin)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for origin in range(2000, 12000):
            assert view.mask_for("t", origin) == 0
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 256 * 1024, f"{grown} bytes kept for 10000 origin domains no path reaches"
    assert view.mask_for("t", 1) == 1 << view.portal_indexes["A->B"]


def test_interest_for_domains_no_path_reaches_leaves_nothing_behind_once_it_is_gone():
    view = _view_at_a("A->B")

    def interest_for(domain: int, op: int) -> None:
        view.table.apply(bm.Interest("A.E1", domain, bm.INTEREST_TOPIC, f"t{domain}", op))

    for domain in range(1000, 1200):              # what any first use allocates for good
        interest_for(domain, bm.OP_ADD)
        view.emitted()
        interest_for(domain, bm.OP_CANCEL)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for domain in range(2000, 7000):
            interest_for(domain, bm.OP_ADD)
            assert view.emitted() == set()
            interest_for(domain, bm.OP_CANCEL)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 256 * 1024, f"{grown} bytes kept for 5000 destination domains no path reaches"
    interest_for(1, bm.OP_ADD)
    assert view.emitted() == {(bm.INTEREST_TOPIC, "t1", 1)}
