"""The peer-link handshake: who is on the other end (spec/dro.md §2.4, Gwd-7097-1).

Both sides send one CONTROL message as soon as TCP connects, and nothing else until they have
the companion's::

    TNWG_CAPABILITIES (0x44)   version = CAPABILITIES_VERSION; capabilities3 = PCRE | REGEX
    GATEWAY_NAME (0x58)        the router's <daemon><name>
    ROUTE_INFO (0x56)          node_id = the router's node id; ttl = 0, sqn = 0, vers = 0

The node id rides in a ROUTE_INFO header because that is the header whose ``node_id`` field
the dissector names; ttl 0 and the leading capabilities header keep it from being mistaken
for a route-info announcement (router.routing.route_info.is_route_info() checks both).
A handshake is refused when it is not this shape, when the version differs, or when the node
id is our own (a router linked to itself).
"""
from __future__ import annotations

from dataclasses import dataclass

from router.routing.route_info import GATEWAY_VERSION
from router.routing.topology import MAX_NODE_ID
from router.um.wire.lbmc import (CAPABILITIES3_PCRE, CAPABILITIES3_REGEX, LBMC_TYPE_CONTROL, GatewayName,
                                 LbmcMessage, RouteInfo, TnwgCapabilities)

CAPABILITIES_VERSION = 1
CAPABILITIES3 = CAPABILITIES3_PCRE | CAPABILITIES3_REGEX


class HandshakeError(ValueError):
    """The companion's handshake is missing, malformed or unacceptable; the text says which."""


@dataclass(frozen=True)
class PeerIdentity:
    name: str
    node_id: int
    version: int
    capabilities: tuple[int, int, int, int]


def build_handshake(name: str, node_id: int) -> LbmcMessage:
    return LbmcMessage(LBMC_TYPE_CONTROL, [
        TnwgCapabilities(version=CAPABILITIES_VERSION, capabilities3=CAPABILITIES3),
        GatewayName(name),
        RouteInfo(gateway_version=GATEWAY_VERSION, configuration_signature=0, node_id=node_id, topology=0,
                  vers=0, sqn=0, ttl=0),
    ])


def is_handshake(message: LbmcMessage) -> bool:
    return (message.msg_type == LBMC_TYPE_CONTROL and bool(message.headers)
            and isinstance(message.headers[0], TnwgCapabilities))


def parse_handshake(message: LbmcMessage, own_node_id: int) -> PeerIdentity:
    """The companion's identity; HandshakeError saying what is wrong otherwise."""
    if not is_handshake(message):
        raise HandshakeError("the first message was not a handshake (CONTROL starting with TNWG_CAPABILITIES)")
    headers = message.headers
    if len(headers) != 3 or not isinstance(headers[1], GatewayName) or not isinstance(headers[2], RouteInfo):
        shape = " -> ".join(type(h).__name__ for h in headers)
        raise HandshakeError(f"handshake headers are {shape}, expected TnwgCapabilities -> GatewayName -> RouteInfo")
    capabilities, name, route = headers
    if capabilities.version != CAPABILITIES_VERSION:
        raise HandshakeError(f"companion speaks peer-link version {capabilities.version}, "
                             f"this router speaks {CAPABILITIES_VERSION}")
    if not name.name:
        raise HandshakeError("companion sent an empty gateway name")
    if not 0 < route.node_id <= MAX_NODE_ID:
        raise HandshakeError(f"companion node id {route.node_id:#x} is not a valid node id")
    if route.node_id == own_node_id:
        raise HandshakeError(f"companion has our own node id {own_node_id:#x}: this peer portal is linked to "
                             f"its own router")
    return PeerIdentity(name.name, route.node_id, capabilities.version,
                        (capabilities.capabilities1, capabilities.capabilities2, capabilities.capabilities3,
                         capabilities.capabilities4))
