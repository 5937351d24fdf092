"""ForwardingView: one path per destination, interest pulled only where paths enter (pure logic)."""
import tracemalloc

from router.ipc import bus_messages as bm
from router.portals.forwarding import ForwardingView
from router.portals.remote_interest import (MIN_PASS_INTERVAL, PATTERNS, TOPICS, CheckPace, InterestAnnouncer,
                                           RemoteInterest)
from router.routing.service import records_to_plain
from tests.routing.net import Net

T = bm.INTEREST_TOPIC


def view_of(net: Net, router: str, portal: str, version: int = 1) -> ForwardingView:
    portals = sorted(a.portal for a in net.adjacencies[router])
    view = ForwardingView(portal, {name: i for i, name in enumerate(portals)})
    snapshot = net.topology(router).snapshot()
    assert view.load_routes(bm.RouteTable(version, net.ids[router], tuple(records_to_plain(snapshot))))
    return view


def want(view: ForwardingView, portal: str, domain: int, topic: str = "t") -> None:
    view.table.apply(bm.Interest(portal, domain, T, topic, bm.OP_ADD))


def bit(view: ForwardingView, portal: str) -> int:
    return 1 << view.portal_indexes[portal]


def loop_of_three() -> Net:
    """A(D1), B(D2), C(D3) in a ring of peer links; A-C is expensive, so D1 -> D3 goes through B."""
    net = Net().router("A", 1).router("B", 2).router("C", 3)
    net.endpoint("A", 1).endpoint("B", 2).endpoint("C", 3)
    return net.peer("A", "B").peer("B", "C").peer("C", "A", cost_a=10, cost_b=10)


def test_a_lone_router_forwards_between_its_domains():
    net = Net().router("R", 1).endpoint("R", 1, portal="E1").endpoint("R", 2, portal="E2")
    ingress = view_of(net, "R", "E1")
    want(ingress, "E2", 2)
    assert ingress.mask_for("t", 1) == bit(ingress, "E2")
    assert ingress.pulled() == ({"t"}, set())
    assert ingress.mask_for("t", 2) == 0, "never back into the origin domain"
    assert ingress.mask_for("other", 1) == 0


def test_one_path_in_a_loop_no_second_copy():
    net = loop_of_three()
    # At A: D3's receivers are reached through B, not over the expensive direct link to C.
    a = view_of(net, "A", "A.E1")
    want(a, "A->B", 3)
    want(a, "A->C", 3)            # C also says it wants it (its own receivers): the path decides
    assert a.mask_for("t", 1) == bit(a, "A->B")
    # At C: a stream from D1 arriving over B is delivered to D3; one arriving from A is not on
    # the D1 -> D3 path at all, and C never sends D1's data back toward A.
    c = view_of(net, "C", "C->B")
    want(c, "C.E3", 3)
    want(c, "C->A", 1)
    assert c.mask_for("t", 1) == bit(c, "C.E3")
    # B pulls D3's interest in through its link to A only (the way D1's data comes in).
    b_from_a = view_of(net, "B", "B->A")
    want(b_from_a, "B->C", 3)
    assert b_from_a.emitted() == {(T, "t", 3)}
    b_endpoint = view_of(net, "B", "B.E2")
    want(b_endpoint, "B->C", 3)
    assert b_endpoint.emitted() == {(T, "t", 3)}, "D2's own sources also reach D3 through B"


def test_nothing_is_forwarded_before_the_first_route_table():
    view = ForwardingView("E1", {"E1": 0, "E2": 1})
    want(view, "E2", 2)
    assert view.mask_for("t", 1) == 0 and view.emitted() == set()


def test_an_older_route_table_is_ignored():
    net = Net().router("R", 1).endpoint("R", 1, portal="E1").endpoint("R", 2, portal="E2")
    view = view_of(net, "R", "E1", version=5)
    records = tuple(records_to_plain(net.topology("R").snapshot()))
    assert not view.load_routes(bm.RouteTable(4, net.ids["R"], records))


def test_announcer_backs_off_and_cancels_once():
    announcer = InterestAnnouncer(1.0, 8.0)
    item = (T, "t", 3)
    announcer.update({item}, 0.0)
    assert announcer.due(0.0) == ([item], [item], [])
    assert announcer.due(1.5) == ([], [], [])
    assert announcer.due(2.0) == ([item], [], [])          # 2 s after the first
    assert announcer.next_due(2.0) == 4.0                  # then 4 s, 8 s, 8 s...
    announcer.update(set(), 3.0)
    assert announcer.due(3.0) == ([], [], [item])
    assert announcer.due(10.0) == ([], [], [])


def test_remote_interest_expires_unless_refreshed():
    remote = RemoteInterest(CheckPace(10.0, check_interval=1.0), CheckPace(20.0, check_interval=1.0))
    topic, pattern = (T, "t", 3), (bm.INTEREST_PCRE, "^t", 3)
    assert remote.heard(topic, 0.0) and remote.heard(pattern, 0.0)
    assert not remote.heard(topic, 5.0)
    assert remote.check(TOPICS, 12.0) == ([], 1.0)
    assert remote.check(TOPICS, 15.0) == ([topic], 1.0)
    assert remote.check(PATTERNS, 15.0) == ([], 1.0)      # patterns have their own timeout
    assert remote.check(PATTERNS, 20.0) == ([pattern], 1.0)
    assert not remote.cancel(topic)


def test_remote_interest_checks_at_most_max_topics_a_pass_spread_over_the_check_interval():
    remote = RemoteInterest(CheckPace(10.0, check_interval=90.0, per_pass=100), CheckPace(10.0))
    topics = [(T, f"t{n}", 3) for n in range(250)]
    for item in topics:
        remote.heard(item, 0.0)
    gone, wait = remote.check(TOPICS, 11.0)        # 250 items, 100 a pass: 3 passes in 90 s
    assert gone == topics[:100] and wait == 30.0
    remote.heard(topics[150], 11.0)                # refreshed before its turn: stays
    remote.heard((T, "late", 3), 11.0)             # heard mid-round: checked in the next round
    gone, _ = remote.check(TOPICS, 12.0)
    assert gone == topics[100:150] + topics[151:200]
    gone, wait = remote.check(TOPICS, 13.0)
    assert gone == topics[200:] and wait == 30.0
    gone, wait = remote.check(TOPICS, 14.0)        # the next round: what is left
    assert gone == [] and wait == 90.0
    assert set(remote.heard_at) == {topics[150], (T, "late", 3)}


def test_remote_interest_passes_are_at_least_50_ms_apart():
    remote = RemoteInterest(CheckPace(10.0, check_interval=1.0, per_pass=1), CheckPace(10.0))
    for n in range(100):
        remote.heard((T, f"t{n}", 3), 0.0)
    gone, wait = remote.check(TOPICS, 1.0)          # 1 s / 100 passes = 10 ms: held to 50 ms
    assert gone == [] and wait == MIN_PASS_INTERVAL


class _Ring:
    """Records the stream records a StreamTable writes (what the datapath would put in the ring)."""

    def __init__(self):
        self.records = []

    def advert(self, mask, advert):
        self.records.append(("advert", mask, advert.stream_id))

    def eos(self, mask, stream_id):
        self.records.append(("eos", mask, stream_id))

    def frames(self, mask, stream_id, frames, count, longest, client=None, record_type=None):
        self.records.append(("frames", mask, len(frames)))


def test_streams_follow_routes_and_a_looping_source_is_dropped_at_255_hops():
    from router.monitor.counters import PortalCounters
    from router.portals.streams import StreamTable
    net = Net().router("R", 1).endpoint("R", 1, portal="E1").endpoint("R", 2, portal="E2")
    view = view_of(net, "R", "E1")
    ring, counters, events = _Ring(), PortalCounters(), []
    table = StreamTable("E1", view, ring, counters, lambda name, text: events.append(name))
    assert table.begin("t", bytes(32), 0, 255, 1, "src", 1) is None
    assert counters.get("streams_dropped_hop_count") == 1 and events == ["hop-count-exceeded"]
    stream = table.begin("t", bytes(32), 0, 3, 1, "src", 1)
    assert stream.mask == 0 and ring.records == []            # nobody wants it yet
    want(view, "E2", 2)
    table.remask()
    assert ring.records == [("advert", bit(view, "E2"), stream.stream_id)]
    table.forward(stream, b"\0" * 76, 1, 76)
    view.table.apply(bm.Interest("E2", 2, T, "t", bm.OP_CANCEL))
    table.remask()
    assert ring.records[1][0] == "frames" and ring.records[2] == ("eos", bit(view, "E2"), stream.stream_id)


def test_a_source_heard_in_two_domains_is_forwarded_from_the_one_on_its_path():
    """A bridges D1-D2, C bridges D1-D4, B joins D2, D4 and D3. D1's source has copies in D2 and
    D4 (their own receivers want it), and B's portals on both pull the topic for D3 (each is where
    some domain's path to D3 enters B). Only the copy that came the way of the D1 -> D3 path goes
    on to D3: the other would reach D3's proxy source as a second copy of every message."""
    net = Net().router("A", 1).router("B", 2).router("C", 3)
    net.endpoint("A", 1).endpoint("A", 2).endpoint("C", 1).endpoint("C", 4)
    net.endpoint("B", 2).endpoint("B", 4).endpoint("B", 3)
    masks = {}
    for portal in ("B.E2", "B.E4"):
        view = view_of(net, "B", portal)
        want(view, "B.E3", 3)
        assert view.pulled() == ({"t"}, set()), portal
        masks[portal] = view.mask_for("t", 1)
    entry = net.routes("B").for_router(net.ids["B"]).ingress_portal(1, 3)
    assert entry in masks
    assert masks[entry] == bit(view, "B.E3")
    assert [portal for portal, mask in masks.items() if mask] == [entry], masks


def test_unicast_messages_for_domains_no_path_reaches_leave_nothing_behind():
    """The domain of a unicast immediate message is the sender's to write: every distinct one no
    path reaches was remembered (with a path tree computed for it) until the next route change,
    which a stable network may never see: about 0.5 KB each, without end."""
    view = view_of(loop_of_three(), "A", "A.E1")
    assert view.next_hop(3) == "A->B"
    for domain in range(1000, 1200):              # what any first use allocates for good
        view.next_hop(domain)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for domain in range(2000, 12000):
            assert view.next_hop(domain) is None
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 256 * 1024, f"{grown} bytes kept for 10000 domains no path reaches"
    assert view.next_hop(3) == "A->B" and view.next_hop(2) == "A->B"
