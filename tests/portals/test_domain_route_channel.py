"""Route-info between routers on a shared domain: a router that stops reading costs the others a
bounded backlog, and what cannot wait is counted and said once, not silently lost."""
import socket

from router.monitor.counters import PortalCounters
from router.portals import domain_routes
from router.portals.domain_routes import DomainRouteChannel
from router.um.loop import EventLoop
from router.um.wire.lbmr import GatewayContextInfo, TnwgAddressOption, TnwgCtxInstOption
from tests.support.processes import wait_for

NEIGHBOR = 0x2222


def test_route_info_for_a_router_that_does_not_read_is_dropped_counted_and_said_once(monkeypatch):
    monkeypatch.setattr(domain_routes, "MAX_BACKLOG", 64 * 1024)
    stuck = socket.socket(socket.AF_INET, socket.SOCK_STREAM)      # accepts, never reads
    stuck.bind(("127.0.0.1", 0))
    stuck.listen(1)
    loop = EventLoop("route-info")
    loop.start_thread()
    counters, events = PortalCounters(), []
    channel = loop.call_and_wait(lambda: DomainRouteChannel(
        "LAN9", loop, "127.0.0.1", 0x1111, 60_000, lambda packet: None, lambda data: None, counters,
        lambda name, text: events.append((name, text))))
    accepted = None
    try:
        ctxinfo = GatewayContextInfo(0, domain_routes.CTXINFO_FLAGS, 0, [
            TnwgAddressOption(*stuck.getsockname()), TnwgCtxInstOption(NEIGHBOR.to_bytes(8, "big"))])
        loop.call_and_wait(channel.heard, ctxinfo, "127.0.0.1")
        accepted, _ = stuck.accept()
        message = bytes(8192)
        # The kernel's buffers fill first, then the backlog up to its bound; the rest is dropped.
        for _ in range(2000):
            loop.call_and_wait(channel.send, message)
            if counters.get("route_info_msgs_dropped") >= 10:
                break
        assert counters.get("route_info_msgs_dropped") >= 10
        assert counters.get("data_fragments_dropped_would_block") == 0, "route-info is not data"
        drops = [text for name, text in events if name == "drops-would-block"]
        assert len(drops) == 1 and f"router node {NEIGHBOR:#x}" in drops[0], events
        # The router reads again: its backlog drains, and a later drop episode is said again.
        accepted.setblocking(False)

        def drained() -> bool:
            try:
                while accepted.recv(1 << 20):
                    pass
            except BlockingIOError:
                pass
            return not loop.call_and_wait(lambda: bytes(channel.neighbors[NEIGHBOR].backlog))
        wait_for(drained, 10, message="the backlog drains once the router reads")
        assert not loop.call_and_wait(lambda: channel.neighbors[NEIGHBOR].dropping)
    finally:
        if accepted is not None:
            accepted.close()
        stuck.close()
        loop.call_and_wait(channel.close)
        loop.close()
