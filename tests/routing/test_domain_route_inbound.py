"""Route-info connections from routers on a shared domain: one that has gone silent is closed.

A router on the domain writes its route-info to us at least every propagation interval over the
connection it opened. When its host dies or the network between us breaks, no FIN or RST ever
comes (we only read that connection, so we never learn it is dead): unless it is closed once
nothing came for the route-info timeout, each such episode leaves a socket open for good."""
import socket

from router.monitor.counters import PortalCounters
from router.portals.domain_routes import DomainRouteChannel
from router.routing.route_info import encode_route_info
from router.routing.topology import Adjacency, RouterAnnouncement
from router.um.loop import EventLoop
from tests.support.processes import wait_for

TIMEOUT_MS = 300


def _route_info(node_id: int, sqn: int) -> bytes:
    return encode_route_info(RouterAnnouncement(node_id, f"r{node_id}", 1, sqn, (Adjacency.domain(3, 1),), 100))


def _closed_by_the_other_end(sock: socket.socket) -> bool:
    try:
        return sock.recv(4096) == b""
    except BlockingIOError:
        return False


def test_a_connection_silent_for_the_route_info_timeout_is_closed_and_a_live_one_kept():
    loop = EventLoop("route-info-inbound")
    loop.start_thread()
    received: list[bytes] = []
    channel = loop.call_and_wait(lambda: DomainRouteChannel(
        "LAN3", loop, "127.0.0.1", 0x1111, TIMEOUT_MS, lambda packet: None, received.append, PortalCounters(),
        lambda name, text: None))
    silent = socket.create_connection(channel.address)
    live = socket.create_connection(channel.address)
    try:
        silent.sendall(_route_info(0x2222, 1))       # then its host goes away without a word
        silent.setblocking(False)
        live.setblocking(False)
        wait_for(lambda: loop.call_and_wait(lambda: len(channel.inbound)) == 2 and len(received) == 1, 10,
                 message="both connections accepted and the first route-info read")
        sqn = 0

        def silent_one_closed() -> bool:
            nonlocal sqn
            sqn += 1
            live.sendall(_route_info(0x3333, sqn))    # the live router goes on announcing
            loop.call_and_wait(channel.announce)      # every propagation interval
            return _closed_by_the_other_end(silent)
        wait_for(silent_one_closed, 10, interval=0.05, message="the silent connection closed")
        assert loop.call_and_wait(lambda: len(channel.inbound)) == 1, "the live connection is kept"
        assert not _closed_by_the_other_end(live)
        wait_for(lambda: len(received) == 1 + sqn, 10, message="everything the live router sent is read")
    finally:
        silent.close()
        live.close()
        loop.call_and_wait(channel.close)
        loop.close()
