"""The topology map: updates by sequence number, flooding limits, timeouts, signature, versions."""
import pytest

from router.routing.topology import (Adjacency, RouterAnnouncement, Topology, UpdateOutcome, domain_identity_key,
                                     new_node_id, sqn_newer)


def announce(node_id=20, sqn=1, version=1, adjacencies=(Adjacency.domain(2, 1),), ttl=100, name="B"):
    return RouterAnnouncement(node_id, name, version, sqn, tuple(adjacencies), ttl)


def test_new_then_refreshed_then_updated_router():
    topology = Topology(10, "A")
    assert topology.apply(announce(sqn=1), 0).outcome is UpdateOutcome.NEW_ROUTER
    result = topology.apply(announce(sqn=2), 100)
    assert result.outcome is UpdateOutcome.REFRESHED and not result.changes_topology
    result = topology.apply(announce(sqn=3, version=2, adjacencies=(Adjacency.domain(2, 5),)), 200)
    assert result.outcome is UpdateOutcome.NODE_UPDATED and result.changes_topology
    assert topology.get(20).adjacencies[0].cost == 5


def test_older_and_duplicate_announcements_are_ignored_and_not_flooded():
    topology = Topology(10, "A")
    topology.apply(announce(sqn=5), 0)
    duplicate = topology.apply(announce(sqn=5, adjacencies=()), 10)
    stale = topology.apply(announce(sqn=4, adjacencies=()), 10)
    assert (duplicate.outcome, duplicate.forward_ttl) == (UpdateOutcome.DUPLICATE, None)
    assert (stale.outcome, stale.forward_ttl) == (UpdateOutcome.STALE, None)
    assert topology.get(20).adjacencies == (Adjacency.domain(2, 1),)


def test_sequence_numbers_wrap():
    assert sqn_newer(0, 65535) and sqn_newer(3, 65530) and not sqn_newer(65530, 3)
    topology = Topology(10, "A")
    topology.apply(announce(sqn=65535), 0)
    assert topology.apply(announce(sqn=0), 1).outcome is UpdateOutcome.REFRESHED


def test_flooding_stops_after_max_hop_count_routers():
    topology = Topology(10, "A", max_hop_count=3)
    assert topology.apply(announce(sqn=1, ttl=3), 0).forward_ttl == 2
    assert topology.apply(announce(sqn=2, ttl=1), 0).forward_ttl is None
    assert topology.apply(announce(sqn=3, ttl=200), 0).forward_ttl == 2       # clamped to our limit
    own = topology.next_announcement()
    assert own.ttl == 3
    assert topology.apply(own, 0).outcome is UpdateOutcome.OWN


def test_routers_time_out_but_we_do_not():
    topology = Topology(10, "A", timeout_ms=4000)
    topology.apply(announce(node_id=20, sqn=1), 1000)
    topology.apply(announce(node_id=30, sqn=1, name="C"), 3000)
    assert topology.expire(4999) == []
    assert [r.node_id for r in topology.expire(5000)] == [20]
    assert [r.node_id for r in topology.routers()] == [10, 30]
    assert [r.node_id for r in topology.expire(100000)] == [30]
    assert [r.node_id for r in topology.routers()] == [10]
    assert topology.apply(announce(node_id=20, sqn=1), 100001).outcome is UpdateOutcome.NEW_ROUTER


def test_local_version_changes_only_when_adjacencies_change():
    topology = Topology(10, "A")
    assert topology.set_local_adjacencies([Adjacency.domain(1, 1, "E1")])
    version = topology.local.version
    assert not topology.set_local_adjacencies([Adjacency.domain(1, 1, "E1")])
    assert topology.local.version == version
    assert topology.set_local_adjacencies([Adjacency.domain(1, 2, "E1")])      # cost change
    assert topology.local.version == version + 1
    first, second = topology.next_announcement(), topology.next_announcement()
    assert second.sqn == first.sqn + 1 and first.version == version + 1
    assert first.adjacencies[0].portal == "E1"


def test_signature_is_equal_on_routers_that_see_the_same_map():
    a = Topology(10, "A")
    b = Topology(20, "B")
    a_adj = [Adjacency.domain(1, 1, "E1", "239.1.1.1:12965"), Adjacency.router(20, 3, "P")]
    b_adj = [Adjacency.router(10, 2, "Q"), Adjacency.domain(2, 1, "E2")]
    a.set_local_adjacencies(a_adj)
    b.set_local_adjacencies(b_adj)
    a.apply(b.next_announcement(), 0)
    b.apply(a.next_announcement(), 0)
    a.next_announcement()                                   # sequence numbers do not count
    assert a.signature() == b.signature() and a.signature32() == b.signature32()
    assert 0 <= a.signature32() < 2**32
    b.set_local_adjacencies([Adjacency.router(10, 9, "Q"), Adjacency.domain(2, 1, "E2")])
    assert a.signature() != b.signature()


def test_node_ids_and_identity_keys():
    assert all(0 < new_node_id() < 2**63 for _ in range(100))
    assert domain_identity_key("239.1.1.1:12965") == domain_identity_key("239.1.1.1:12965")
    assert 0 < domain_identity_key("x") < 2**31
    with pytest.raises(ValueError, match="bit 63"):
        Topology(2**63, "A")
    with pytest.raises(ValueError, match="max-hop-count"):
        Topology(1, "A", max_hop_count=256)
