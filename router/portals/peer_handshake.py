"""The peer-link handshake: who is on the other end (spec/dro.md §2.4, Gwd-7097-1).

Both sides send one CONTROL message as soon as TCP connects, and nothing else until they have
the companion's::

    TNWG_CAPABILITIES (0x44)   version = CAPABILITIES_VERSION; capabilities3 = PCRE | REGEX
    GATEWAY_NAME (0x58)        the router's <daemon><name>
    ROUTE_INFO (0x56)          node_id = the router's node id; ttl = 0, sqn = 0, vers = 0

    CTXINFO (0x40)             only with <udp>: flags ADDR, port = the UDP port, addr = its
                               interface, ctxinst = the UDP sending session's id (4 bytes) + 0

The node id rides in a ROUTE_INFO header because that is the header whose ``node_id`` field
the dissector names; ttl 0 and the leading capabilities header keep it from being mistaken
for a route-info announcement (router.routing.route_info.is_route_info() checks both).
A handshake is refused when it is not this shape, when the version differs, when the node id is
our own (a router linked to itself), or when one side has <udp> and the other not (both sides of a
link must, as the DRO says with Gwd-11254-104).
"""
from __future__ import annotations

from dataclasses import dataclass

from router.routing.route_info import GATEWAY_VERSION
from router.routing.topology import MAX_NODE_ID
from router.um.wire.lbmc import (CAPABILITIES3_PCRE, CAPABILITIES3_REGEX, LBMC_TYPE_CONTROL, GatewayName,
                                 LbmcMessage, RouteInfo, TnwgCapabilities)
from router.um.wire.lbmc_gateway import GwCtxInfo

CAPABILITIES_VERSION = 1
CAPABILITIES3 = CAPABILITIES3_PCRE | CAPABILITIES3_REGEX
CTXINFO_ADDR = 0x2000


class HandshakeError(ValueError):
    """The companion's handshake is missing, malformed or unacceptable; the text says which."""


@dataclass(frozen=True)
class PeerIdentity:
    name: str
    node_id: int
    version: int
    capabilities: tuple[int, int, int, int]
    udp: tuple[int, int] | None = None        # the companion's UDP (port, sending session id)


def build_handshake(name: str, node_id: int, udp: tuple[str, int, int] | None = None) -> LbmcMessage:
    """`udp`: (interface, port, session id) of this side's UDP path, if it has one."""
    headers = [
        TnwgCapabilities(version=CAPABILITIES_VERSION, capabilities3=CAPABILITIES3),
        GatewayName(name),
        RouteInfo(gateway_version=GATEWAY_VERSION, configuration_signature=0, node_id=node_id, topology=0,
                  vers=0, sqn=0, ttl=0),
    ]
    if udp is not None:
        interface, port, session_id = udp
        headers.append(GwCtxInfo(flags=CTXINFO_ADDR, hop_count=0, port=port, addr=interface, domain_id=0,
                                 ctxinst=session_id.to_bytes(4, "big") + bytes(4)))
    return LbmcMessage(LBMC_TYPE_CONTROL, headers)


def is_handshake(message: LbmcMessage) -> bool:
    return (message.msg_type == LBMC_TYPE_CONTROL and bool(message.headers)
            and isinstance(message.headers[0], TnwgCapabilities))


def parse_handshake(message: LbmcMessage, own_node_id: int, own_udp: bool = False) -> PeerIdentity:
    """The companion's identity; HandshakeError saying what is wrong otherwise. `own_udp`: this
    side has a UDP path, so the companion must have one too (and the other way round)."""
    if not is_handshake(message):
        raise HandshakeError("the first message was not a handshake (CONTROL starting with TNWG_CAPABILITIES)")
    headers = message.headers
    if (len(headers) not in (3, 4) or not isinstance(headers[1], GatewayName) or not isinstance(headers[2], RouteInfo)
            or (len(headers) == 4 and not isinstance(headers[3], GwCtxInfo))):
        shape = " -> ".join(type(h).__name__ for h in headers)
        raise HandshakeError(f"handshake headers are {shape}, expected TnwgCapabilities -> GatewayName -> RouteInfo "
                             f"(-> GwCtxInfo with <udp>)")
    capabilities, name, route = headers[:3]
    udp_info = headers[3] if len(headers) == 4 else None
    if own_udp and udp_info is None:
        raise HandshakeError("this peer portal has a <udp> data path and the companion's has none: configure "
                             "<udp> on both sides of the link or on neither")
    if udp_info is not None and not own_udp:
        raise HandshakeError("the companion's peer portal has a <udp> data path and this one has none: configure "
                             "<udp> on both sides of the link or on neither")
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
    udp = None
    if udp_info is not None:
        if not 0 < udp_info.port <= 65535:
            raise HandshakeError(f"companion's UDP port {udp_info.port} is not a port")
        udp = (udp_info.port, int.from_bytes(udp_info.ctxinst[:4], "big"))
    return PeerIdentity(name.name, route.node_id, capabilities.version,
                        (capabilities.capabilities1, capabilities.capabilities2, capabilities.capabilities3,
                         capabilities.capabilities4), udp)
