"""Route-info for the other routers on a shared domain: what the counters say is what happened.

`route_info_msgs_sent` is what reached the other router's connection; what was queued for it and
then lost with a connection that failed (a refused port, a reset) is `route_info_msgs_dropped`.
A router whose route-info port refuses while its CTXINFO keeps coming would otherwise show, for
as long as that lasts, route-info sent and none dropped, while it never got any."""
import socket

from router.monitor.counters import PortalCounters
from router.portals.domain_routes import CTXINFO_FLAGS, DomainRouteChannel
from router.routing.route_info import encode_route_info
from router.routing.topology import Adjacency, RouterAnnouncement
from router.um.loop import EventLoop
from router.um.wire.lbmr import GatewayContextInfo, TnwgAddressOption, TnwgCtxInstOption
from tests.support.processes import wait_for

OTHER_NODE = 0x2222


def _ctxinfo(port: int) -> GatewayContextInfo:
    return GatewayContextInfo(0, CTXINFO_FLAGS, 0, [TnwgAddressOption("127.0.0.1", port),
                                                    TnwgCtxInstOption(OTHER_NODE.to_bytes(8, "big"))])


def _route_info(sqn: int) -> bytes:
    return encode_route_info(RouterAnnouncement(0x1111, "r1", 1, sqn, (Adjacency.domain(3, 1),), 100))


def _refusing_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return port


def _channel(loop, counters) -> DomainRouteChannel:
    return loop.call_and_wait(lambda: DomainRouteChannel(
        "LAN3", loop, "127.0.0.1", 0x1111, 4000, lambda packet: None, lambda data: None, counters,
        lambda name, text: None))


def _send_three(channel, port):
    channel.heard(_ctxinfo(port), "127.0.0.1")
    for sqn in (1, 2, 3):
        channel.send(_route_info(sqn))


def test_route_info_lost_with_a_refused_connection_is_counted_dropped_not_sent():
    loop = EventLoop("route-info-outbound")
    loop.start_thread()
    counters = PortalCounters()
    channel = _channel(loop, counters)
    try:
        loop.call_and_wait(lambda: _send_three(channel, _refusing_port()))
        wait_for(lambda: loop.call_and_wait(lambda: channel.neighbors[OTHER_NODE].failures) >= 1, 10,
                 message="the connection refused")
        assert (counters.get("route_info_msgs_sent"), counters.get("route_info_msgs_dropped")) == (0, 3)
    finally:
        loop.call_and_wait(channel.close)
        loop.close()


def test_route_info_that_reaches_the_other_router_is_counted_sent():
    loop = EventLoop("route-info-outbound")
    loop.start_thread()
    counters = PortalCounters()
    channel = _channel(loop, counters)
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        loop.call_and_wait(lambda: _send_three(channel, listener.getsockname()[1]))
        accepted, _ = listener.accept()
        accepted.settimeout(10)
        expected = b"".join(_route_info(sqn) for sqn in (1, 2, 3))
        got = b""
        while len(got) < len(expected):
            got += accepted.recv(65536)
        assert got == expected
        wait_for(lambda: counters.get("route_info_msgs_sent") == 3, 10, message="three sent")
        assert counters.get("route_info_msgs_dropped") == 0
        accepted.close()
    finally:
        listener.close()
        loop.call_and_wait(channel.close)
        loop.close()
