"""Forbidden topologies (spec/dro.md §2.5) are detected and say clearly what is wrong."""
from router.config.portal_um import same_domain
from router.routing.topology import (DOMAIN_ID_CONFLICT_REPORT_INTERVAL_MS, TWO_DOMAIN_IDS_FOR_ONE_DOMAIN,
                                     TWO_ENDPOINTS_ON_ONE_DOMAIN, TWO_PEER_LINKS, Adjacency, RouterAnnouncement,
                                     Topology)
from router.um.config import UMConfig
from router.um.lbmr_channel import domain_identity

from tests.routing.net import Net


def test_a_supported_topology_has_no_findings():
    net = Net().router("A", 1).router("B", 2).endpoint("A", 1, identity="lan1").endpoint("B", 1, identity="lan1")
    net.endpoint("A", 2).endpoint("B", 3).peer("A", "B")
    assert net.topology("A").forbidden() == []


def test_two_peer_links_between_the_same_two_routers():
    net = Net().router("A", 0x1A).router("B", 0x2B).endpoint("A", 1).endpoint("B", 2)
    net.peer("A", "B", 1, 1).peer("A", "B", 5, 5)
    findings = net.topology("A").forbidden()
    assert {f.kind for f in findings} == {TWO_PEER_LINKS}
    mine = next(f for f in findings if "A->B" in f.message)
    assert "routers A (node 0x1a) and B (node 0x2b) are joined by 2 peer links" in mine.message
    assert "portals A->B, A->B#" in mine.message and mine.routers == (0x1A, 0x2B)
    # Traffic still flows, on the cheaper link.
    assert net.routes("A").path(1, 2).cost == 1 + 1


def test_two_endpoints_of_one_router_on_one_domain():
    net = Net().router("A", 7).endpoint("A", 4, portal="LAN4a").endpoint("A", 4, portal="LAN4b").endpoint("A", 5)
    findings = net.topology("A").forbidden()
    assert [f.kind for f in findings] == [TWO_ENDPOINTS_ON_ONE_DOMAIN]
    assert findings[0].message == (
        "forbidden topology: router A (node 0x7) has 2 endpoint portals on domain 4 (portals LAN4a, LAN4b); "
        "a router may have only one endpoint portal per domain")


def test_every_doubled_domain_of_one_router_is_reported():
    """An operator fixes what the list shows: a second doubled domain must be on it too."""
    net = Net().router("A", 7).endpoint("A", 4, portal="LAN4a").endpoint("A", 4, portal="LAN4b")
    net.endpoint("A", 5, portal="LAN5a").endpoint("A", 5, portal="LAN5b")
    net.router("B", 8).endpoint("B", 6).endpoint("B", 6).peer("A", "B")
    messages = [f.message for f in net.topology("A").forbidden()]
    assert len(messages) == 3, messages
    assert "2 endpoint portals on domain 4 (portals LAN4a, LAN4b)" in messages[0]
    assert "2 endpoint portals on domain 5 (portals LAN5a, LAN5b)" in messages[1]
    assert "router B (node 0x8) has 2 endpoint portals on domain 6" in messages[2]


def test_one_router_reaching_one_domain_under_two_ids():
    net = Net().router("A", 7).endpoint("A", 4, identity="239.1.1.1:12965").endpoint("A", 5,
                                                                                      identity="239.1.1.1:12965")
    findings = net.topology("A").forbidden()
    assert [f.kind for f in findings] == [TWO_ENDPOINTS_ON_ONE_DOMAIN]
    assert "one domain (239.1.1.1:12965) under domain ids 4, 5" in findings[0].message


def test_two_domain_ids_for_one_domain_across_routers():
    net = Net().router("A", 1).router("B", 2)
    net.endpoint("A", 11, identity="239.1.1.1:12965").endpoint("B", 12, identity="239.1.1.1:12965")
    net.endpoint("A", 20).endpoint("B", 30)
    findings = net.topology("A").forbidden()
    assert [f.kind for f in findings] == [TWO_DOMAIN_IDS_FOR_ONE_DOMAIN]
    message = findings[0].message
    assert "one domain (239.1.1.1:12965) has 2 domain ids: 11 (by A (node 0x1)); 12 (by B (node 0x2))" in message
    # A third router only sees the identity key (labels do not travel), and still detects it.
    net.router("C", 3).endpoint("C", 40)
    assert "identity key 0x" in net.topology("C").forbidden()[0].message


def test_domain_id_conflict_heard_in_a_domain_expires():
    topology = Topology(1, "A", timeout_ms=4000)
    topology.note_domain_id_conflict(5, 9, "portal LAN1 heard a router at 10.0.0.7 announce LOCAL_DOMAIN 9", 0)
    topology.note_domain_id_conflict(5, 5, "same id is fine", 0)
    findings = topology.forbidden()
    assert [f.kind for f in findings] == [TWO_DOMAIN_IDS_FOR_ONE_DOMAIN]
    assert "two domain ids, 5 and 9 (portal LAN1 heard" in findings[0].message
    # Portals report a conflict they keep hearing every DOMAIN_ID_CONFLICT_REPORT_INTERVAL_MS.
    topology.expire(4000 + DOMAIN_ID_CONFLICT_REPORT_INTERVAL_MS - 1)
    assert len(topology.forbidden()) == 1
    topology.expire(4000 + DOMAIN_ID_CONFLICT_REPORT_INTERVAL_MS)
    assert topology.forbidden() == []


def _lan(interface: str) -> UMConfig:
    """A domain's UM options: the default resolver group, used on `interface`."""
    config = UMConfig()
    config.set("context", "resolver_multicast_interface", interface)
    return config


def test_one_resolver_group_on_two_separate_networks_is_two_domains_not_a_forbidden_topology():
    """A router joining two LANs that both keep the default resolver group, each over its own
    interface, has two domains: the configuration check accepts it, and the map must not report
    it as two endpoints on one domain."""
    lan1, lan2 = _lan("10.1.0.0/16"), _lan("10.2.0.0/16")
    assert not same_domain(lan1, lan2)
    topology = Topology(1, "A")
    topology.set_local_adjacencies([Adjacency.domain(1, 1, "LAN1", domain_identity(lan1)),
                                    Adjacency.domain(2, 1, "LAN2", domain_identity(lan2))])
    assert topology.forbidden() == []
    # The group on one network reported by another router under another id is one domain, two ids.
    topology.apply(RouterAnnouncement(2, "B", 1, 1, (Adjacency.domain(7, 1, identity=domain_identity(lan1)),), 100), 0)
    assert [f.kind for f in topology.forbidden()] == [TWO_DOMAIN_IDS_FOR_ONE_DOMAIN]
