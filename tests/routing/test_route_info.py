"""Route-info messages: what goes in 0x56/0x57/0x58 and back out, domains vs routers, ttl."""
import pytest

from router.routing.route_info import (DOMAIN_FLAG, GATEWAY_VERSION, RouteInfoError, build_route_info,
                                       encode_route_info, is_route_info, parse_route_info, with_ttl)
from router.routing.topology import Adjacency, RouterAnnouncement, Topology, domain_identity_key
from router.portals.peer_handshake import build_handshake
from router.um.wire.lbmc import (LBMC_TYPE_CONTROL, GatewayName, LbmcMessage, RouteInfo, RouteInfoNeighbor,
                                 decode_lbmc)


def sample():
    adjacencies = (Adjacency.domain(7, 3, "E7", "239.1.1.1:12965"), Adjacency.domain(0xFFFF_FFFF, 1),
                   Adjacency.router(0x1234_5678_9ABC, 2, "P1"))
    return RouterAnnouncement(0x7FFF_0000_0000_0001, "router-A", 513, 65535, adjacencies, 100, 0xDEADBEEF)


def test_round_trip_through_the_wire_keeps_everything_that_travels():
    announcement = sample()
    message, end = decode_lbmc(encode_route_info(announcement, configuration_signature=42))
    assert message.msg_type == LBMC_TYPE_CONTROL and is_route_info(message)
    head = message.headers[0]
    assert (head.gateway_version, head.configuration_signature, head.node_id) == (GATEWAY_VERSION, 42,
                                                                                 announcement.node_id)
    assert (head.vers, head.sqn, head.ttl, head.topology) == (513, 65535, 100, 0xDEADBEEF)
    assert isinstance(message.headers[-1], GatewayName) and message.headers[-1].name == "router-A"
    parsed = parse_route_info(message)
    assert parsed == announcement                     # portal names and labels do not take part
    assert parsed.adjacencies[0].identity == domain_identity_key("239.1.1.1:12965")
    assert parsed.adjacencies[0].portal == ""


def test_domains_are_marked_by_bit_63_with_the_identity_key_above_the_domain_id():
    neighbors = [h for h in build_route_info(sample()).headers if isinstance(h, RouteInfoNeighbor)]
    domain, bare_domain, router = neighbors
    assert domain.node_id == DOMAIN_FLAG | (domain_identity_key("239.1.1.1:12965") << 32) | 7
    assert bare_domain.node_id == DOMAIN_FLAG | 0xFFFF_FFFF
    assert router.node_id == 0x1234_5678_9ABC
    assert [(n.ingress_cost, n.egress_cost) for n in neighbors] == [(0, 3), (0, 1), (0, 2)]


def test_with_ttl_changes_only_the_ttl():
    message = build_route_info(sample())
    forwarded = with_ttl(message, 7)
    assert parse_route_info(forwarded).ttl == 7
    assert parse_route_info(forwarded).adjacencies == sample().adjacencies
    assert message.headers[0].ttl == 100


def test_a_topology_announcement_survives_the_wire_and_updates_another_map():
    a = Topology(10, "A")
    a.set_local_adjacencies([Adjacency.domain(1, 4, "E1"), Adjacency.router(20, 2, "P")])
    b = Topology(20, "B")
    result = b.apply(parse_route_info(decode_lbmc(encode_route_info(a.next_announcement()))[0]), 0)
    assert result.changes_topology and b.get(10).adjacencies == a.local.adjacencies


def test_messages_that_are_not_route_info_are_refused_clearly():
    assert not is_route_info(build_handshake("A", 5))
    with pytest.raises(RouteInfoError, match="not a route-info message"):
        parse_route_info(build_handshake("A", 5))
    bad_version = LbmcMessage(LBMC_TYPE_CONTROL, [RouteInfo(9, 0, 5, 0, 0, 0, 1), GatewayName("A")])
    with pytest.raises(RouteInfoError, match="route-info version 9"):
        parse_route_info(bad_version)
    no_name = LbmcMessage(LBMC_TYPE_CONTROL, [RouteInfo(GATEWAY_VERSION, 0, 5, 0, 0, 0, 1)])
    with pytest.raises(RouteInfoError, match="0 GATEWAY_NAME"):
        parse_route_info(no_name)
    domain_origin = LbmcMessage(LBMC_TYPE_CONTROL, [RouteInfo(GATEWAY_VERSION, 0, DOMAIN_FLAG | 3, 0, 0, 0, 1),
                                                    GatewayName("A")])
    with pytest.raises(RouteInfoError, match="not a router node id"):
        parse_route_info(domain_origin)
    with pytest.raises(RouteInfoError, match="ttl 300"):
        build_route_info(RouterAnnouncement(5, "A", 0, 0, (), 300))
