"""Route-info messages: one router's adjacencies, flooded to every other router (wire.md §3 b).

One LBMC CONTROL message per announcement, headers in this order::

    ROUTE_INFO (0x56)            origin node_id, vers = version, sqn, ttl, topology = signature32
    ROUTE_INFO_NEIGHBOR (0x57)   one per adjacency (possibly none)
    GATEWAY_NAME (0x58)          the origin's name

Field use (our choices; the dissector gives layouts only):

- ``ROUTE_INFO.gateway_version`` = :data:`GATEWAY_VERSION`, the version of this exchange;
  ``configuration_signature`` is the caller's (0 if unused); ``topology`` carries the origin's
  32-bit topology signature so any router can show which neighbours have converged with it.
- ``ROUTE_INFO.ttl`` = how many more routers the message may traverse: the origin sets
  ``max-hop-count``; each receiver uses it and floods it on with ttl - 1 only if that is > 0.
- ``ROUTE_INFO_NEIGHBOR.node_id`` distinguishes the two kinds of adjacency by bit 63:

      bit 63 = 0   an adjacent router; bits 0..62 = its node id (node ids are 63-bit)
      bit 63 = 1   an adjacent domain; bits 32..62 = the domain's 31-bit identity key
                   (0 = not known), bits 0..31 = the domain id

  ``egress_cost`` is the portal's cost (paid leaving the router by it, see paths.py);
  ``ingress_cost`` is 0: entering a router costs nothing in our convention.
"""
from __future__ import annotations

from dataclasses import replace

from router.routing.topology import DOMAIN, MAX_NODE_ID, ROUTER, Adjacency, RouterAnnouncement
from router.um.wire.lbmc import (LBMC_TYPE_CONTROL, GatewayName, LbmcMessage, RouteInfo, RouteInfoNeighbor,
                                 TnwgCapabilities, encode_lbmc)

GATEWAY_VERSION = 1
DOMAIN_FLAG = 1 << 63
IDENTITY_SHIFT = 32
_IDENTITY_MASK = 0x7FFF_FFFF
_U32 = 0xFFFF_FFFF


class RouteInfoError(ValueError):
    """A route-info message that does not say what this module writes."""


def encode_neighbor(adjacency: Adjacency) -> RouteInfoNeighbor:
    if adjacency.kind == DOMAIN:
        if not 0 <= adjacency.neighbor <= _U32 or not 0 <= adjacency.identity <= _IDENTITY_MASK:
            raise RouteInfoError(f"domain id {adjacency.neighbor} / identity {adjacency.identity} out of range")
        node_id = DOMAIN_FLAG | (adjacency.identity << IDENTITY_SHIFT) | adjacency.neighbor
    else:
        if not 0 < adjacency.neighbor <= MAX_NODE_ID:
            raise RouteInfoError(f"router node id {adjacency.neighbor:#x} must be in 1..2**63-1")
        node_id = adjacency.neighbor
    return RouteInfoNeighbor(node_id=node_id, ingress_cost=0, egress_cost=adjacency.cost)


def decode_neighbor(header: RouteInfoNeighbor) -> Adjacency:
    if header.node_id & DOMAIN_FLAG:
        identity = (header.node_id >> IDENTITY_SHIFT) & _IDENTITY_MASK
        return Adjacency(DOMAIN, header.node_id & _U32, header.egress_cost, identity)
    if header.node_id == 0:
        raise RouteInfoError("route-info neighbor with router node id 0")
    return Adjacency(ROUTER, header.node_id, header.egress_cost)


def build_route_info(announcement: RouterAnnouncement, configuration_signature: int = 0) -> LbmcMessage:
    """The CONTROL message announcing ``announcement`` (see the module docstring for the layout)."""
    if not 0 <= announcement.ttl <= 0xFF:
        raise RouteInfoError(f"route-info ttl {announcement.ttl} does not fit a u8")
    head = RouteInfo(gateway_version=GATEWAY_VERSION, configuration_signature=configuration_signature & _U32,
                     node_id=announcement.node_id, topology=announcement.topology_signature & _U32,
                     vers=announcement.version & 0xFFFF, sqn=announcement.sqn & 0xFFFF, ttl=announcement.ttl)
    neighbors = [encode_neighbor(a) for a in announcement.adjacencies]
    return LbmcMessage(LBMC_TYPE_CONTROL, [head, *neighbors, GatewayName(announcement.name)])


def encode_route_info(announcement: RouterAnnouncement, configuration_signature: int = 0) -> bytes:
    return encode_lbmc(build_route_info(announcement, configuration_signature))


def is_route_info(message: LbmcMessage) -> bool:
    """A route-info message starts with ROUTE_INFO; the peer handshake starts with capabilities."""
    return (message.msg_type == LBMC_TYPE_CONTROL and bool(message.headers)
            and isinstance(message.headers[0], RouteInfo)
            and not any(isinstance(h, TnwgCapabilities) for h in message.headers))


def parse_route_info(message: LbmcMessage) -> RouterAnnouncement:
    """The announcement in a route-info message; RouteInfoError if it is not one of ours."""
    if not is_route_info(message):
        raise RouteInfoError("not a route-info message (CONTROL starting with ROUTE_INFO)")
    head: RouteInfo = message.headers[0]
    if head.gateway_version != GATEWAY_VERSION:
        raise RouteInfoError(f"route-info version {head.gateway_version} (this router speaks {GATEWAY_VERSION})")
    if not 0 < head.node_id <= MAX_NODE_ID:
        raise RouteInfoError(f"route-info origin node id {head.node_id:#x} is not a router node id")
    adjacencies, names = [], []
    for header in message.headers[1:]:
        if isinstance(header, RouteInfoNeighbor):
            adjacencies.append(decode_neighbor(header))
        elif isinstance(header, GatewayName):
            names.append(header.name)
        else:
            raise RouteInfoError(f"unexpected {type(header).__name__} header in a route-info message")
    if len(names) != 1:
        raise RouteInfoError(f"route-info message with {len(names)} GATEWAY_NAME headers (expected 1)")
    return RouterAnnouncement(head.node_id, names[0], head.vers, head.sqn, tuple(adjacencies), head.ttl,
                              head.topology)


def with_ttl(message: LbmcMessage, ttl: int) -> LbmcMessage:
    """The same route-info message with a new ttl, for flooding it on (nothing else changes)."""
    if not is_route_info(message):
        raise RouteInfoError("with_ttl() needs a route-info message")
    headers = list(message.headers)
    headers[0] = replace(headers[0], ttl=ttl)
    return LbmcMessage(message.msg_type, headers)
