"""Route-info between the routers that share a domain (a transit domain), as the DRO does it.

Routers on one domain cannot see each other's route-info over a peer link, so each endpoint
portal announces itself in its domain with an LBMR gateway CTXINFO message (ext 0x05 type 1;
flags TNWG_SRC|TNWG_RCV; options ADDRESS = this portal's route port and CTXINST = the router's
node id — two options, which the dissector walks correctly) every propagation interval. An
endpoint that hears another router's CTXINFO connects to that address over TCP and sends it the
route-info messages the supervisor floods (LBMC CONTROL, the same bytes a peer link carries, so
tshark decodes them with ``-d tcp.port==PORT,lbttcp``). Each direction has its own connection:
a router reads what it accepted and writes what it opened, which keeps the two sides symmetric.
A router not heard for the route-info timeout is forgotten and its connection closed; so is a
connection it opened to us on which nothing came for that long (a live router writes its own
route-info to us every propagation interval; a host that died or was cut off never closes its end,
and since we only read that connection we would never learn it is gone).

Nothing here raises into the loop: refused connections, resets and malformed streams are
counted and logged once per episode; the next announcement retries.
"""
from __future__ import annotations

import errno
import logging
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from router.routing.route_info import is_route_info
from router.um.accepting import accept_pending
from router.um.wire.lbmc import WireError, split_lbmc_stream
from router.um.wire.lbmr import (GatewayContextInfo, LbmrPacket, TnwgAddressOption, TnwgCtxInstOption)
from router.um.wire.lbmr_constants import TNWG_CTXINFO_FLAG_TNWG_RCV, TNWG_CTXINFO_FLAG_TNWG_SRC

log = logging.getLogger(__name__)

MAX_BACKLOG = 1 << 20          # bytes waiting for a slow or stopped router before we stop queuing
CTXINFO_FLAGS = TNWG_CTXINFO_FLAG_TNWG_SRC | TNWG_CTXINFO_FLAG_TNWG_RCV


@dataclass
class _Neighbor:
    node_id: int
    address: tuple[str, int]
    last_heard: float
    sock: socket.socket | None = None
    connected: bool = False
    backlog: bytearray = field(default_factory=bytearray)
    # The size of each message in the backlog, and how much of the first one is written: a
    # message counts as sent once all of it is, as dropped if its connection fails before.
    queued: deque = field(default_factory=deque)
    head_written: int = 0
    failures: int = 0
    dropping: bool = False          # its backlog is full: route-info for it is dropped (said once)


def node_id_of(ctxinfo: GatewayContextInfo) -> int | None:
    for option in ctxinfo.options:
        if isinstance(option, TnwgCtxInstOption) and len(option.instance) == 8:
            return int.from_bytes(option.instance, "big")
    return None


def address_of(ctxinfo: GatewayContextInfo) -> tuple[str, int] | None:
    for option in ctxinfo.options:
        if isinstance(option, TnwgAddressOption):
            return option.ip, option.port
    return None


class DomainRouteChannel:
    def __init__(self, portal: str, loop, interface: str, node_id: int, timeout_ms: int,
                 send_lbmr: Callable[[LbmrPacket], None], on_route_info: Callable[[bytes], None],
                 counters, log_event: Callable[[str, str], None]):
        self.portal, self.loop, self.node_id = portal, loop, node_id
        self.timeout = timeout_ms / 1000
        self.send_lbmr, self.on_route_info = send_lbmr, on_route_info
        self.counters, self.log_event = counters, log_event
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((interface, 0))
        self.listener.listen(16)
        self.listener.setblocking(False)
        self.address = self.listener.getsockname()
        loop.add_reader(self.listener, self._accept)
        self.neighbors: dict[int, _Neighbor] = {}
        self.inbound: dict[socket.socket, bytearray] = {}
        self.inbound_heard: dict[socket.socket, float] = {}     # when each last brought bytes

    # -- discovery -----------------------------------------------------------------------------
    def announce(self) -> None:
        """Our CTXINFO: where other routers on this domain send us route-info."""
        self.send_lbmr(LbmrPacket(GatewayContextInfo(0, CTXINFO_FLAGS, 0, [
            TnwgAddressOption(self.address[0], self.address[1]),
            TnwgCtxInstOption(self.node_id.to_bytes(8, "big"))])))
        self._expire()

    def heard(self, ctxinfo: GatewayContextInfo, sender_ip: str) -> None:
        """Another router's CTXINFO (ours come back too; they are ignored by node id)."""
        node_id, address = node_id_of(ctxinfo), address_of(ctxinfo)
        if node_id is None or address is None or node_id == self.node_id \
                or not ctxinfo.flags1 & TNWG_CTXINFO_FLAG_TNWG_RCV:
            return
        if address[0] in ("0.0.0.0", ""):
            address = (sender_ip, address[1])
        neighbor = self.neighbors.get(node_id)
        if neighbor is not None and neighbor.address != address:
            self._forget(neighbor, "it moved")
            neighbor = None
        if neighbor is None:
            neighbor = self.neighbors[node_id] = _Neighbor(node_id, address, time.monotonic())
        neighbor.last_heard = time.monotonic()
        if neighbor.sock is None:
            self._connect(neighbor)

    def _expire(self) -> None:
        now = time.monotonic()
        for neighbor in [n for n in self.neighbors.values() if now - n.last_heard > self.timeout]:
            self._forget(neighbor, f"not heard for {now - neighbor.last_heard:.1f} s")
        for sock, heard in list(self.inbound_heard.items()):
            if now - heard > self.timeout:
                log.info("portal %s: route-info connection from %s closed: nothing came for %.1f s", self.portal,
                         _peer_text(sock), now - heard)
                self._drop_inbound(sock)

    def _forget(self, neighbor: _Neighbor, why: str) -> None:
        self._close(neighbor)
        self._drop_backlog(neighbor)
        self.neighbors.pop(neighbor.node_id, None)
        log.info("portal %s: router node %#x at %s:%d gone from the domain (%s)", self.portal,
                 neighbor.node_id, *neighbor.address, why)

    # -- sending -------------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        """A route-info message for every other router on the domain."""
        for neighbor in list(self.neighbors.values()):
            if neighbor.sock is None:
                self._connect(neighbor)
            if neighbor.sock is None:
                continue
            if len(neighbor.backlog) + len(data) > MAX_BACKLOG:
                self.counters.add("route_info_msgs_dropped")
                if not neighbor.dropping:
                    neighbor.dropping = True
                    self.log_event("drops-would-block",
                                   f"route-info for router node {neighbor.node_id:#x} at {neighbor.address[0]}:"
                                   f"{neighbor.address[1]} dropped: {len(neighbor.backlog)} bytes wait for it to "
                                   "read (a stopped router; it times this one out if it stays so)")
                continue
            neighbor.backlog += data
            neighbor.queued.append(len(data))
            if neighbor.connected:
                self._flush(neighbor)

    def _connect(self, neighbor: _Neighbor) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        result = sock.connect_ex(neighbor.address)
        if result not in (0, errno.EINPROGRESS):
            sock.close()
            self._failed(neighbor, errno.errorcode.get(result, str(result)))
            return
        neighbor.sock, neighbor.connected = sock, False
        self.loop.add_writer(sock, lambda n=neighbor: self._writable(n))

    def _writable(self, neighbor: _Neighbor) -> None:
        sock = neighbor.sock
        if sock is None:
            return
        if not neighbor.connected:
            error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                self._close(neighbor)
                self._failed(neighbor, errno.errorcode.get(error, str(error)))
                return
            neighbor.connected, neighbor.failures = True, 0
        self._flush(neighbor)

    def _flush(self, neighbor: _Neighbor) -> None:
        sock = neighbor.sock
        try:
            sent = sock.send(neighbor.backlog) if neighbor.backlog else 0
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as err:
            self._close(neighbor)
            self._failed(neighbor, str(err))
            return
        del neighbor.backlog[:sent]
        self._count_written(neighbor, sent)
        if not neighbor.backlog:
            neighbor.dropping = False
            self.loop.remove_writer(sock)
        else:
            self.loop.add_writer(sock, lambda n=neighbor: self._writable(n))

    def _count_written(self, neighbor: _Neighbor, sent: int) -> None:
        neighbor.head_written += sent
        while neighbor.queued and neighbor.head_written >= neighbor.queued[0]:
            neighbor.head_written -= neighbor.queued.popleft()
            self.counters.add("route_info_msgs_sent")

    def _drop_backlog(self, neighbor: _Neighbor) -> None:
        """What waited for a connection that is gone will not reach that router: dropped."""
        if neighbor.queued:
            self.counters.add("route_info_msgs_dropped", len(neighbor.queued))
        neighbor.backlog.clear()
        neighbor.queued.clear()
        neighbor.head_written = 0

    def _failed(self, neighbor: _Neighbor, reason: str) -> None:
        neighbor.failures += 1
        self._drop_backlog(neighbor)
        neighbor.dropping = False
        if neighbor.failures == 1:          # once per episode: the next announcement retries
            self.log_event("domain-route-connect-failed",
                           f"route-info connection to router node {neighbor.node_id:#x} at "
                           f"{neighbor.address[0]}:{neighbor.address[1]} failed: {reason}")

    def _close(self, neighbor: _Neighbor) -> None:
        if neighbor.sock is not None:
            self.loop.remove_writer(neighbor.sock)
            neighbor.sock.close()
        neighbor.sock, neighbor.connected = None, False

    # -- receiving -------------------------------------------------------------------------------
    def _accept(self) -> None:
        for sock, _ in accept_pending(self.listener, f"portal {self.portal} route-info", self.loop,
                                      self._accept):
            self.inbound[sock] = bytearray()
            self.inbound_heard[sock] = time.monotonic()
            self.loop.add_reader(sock, lambda s=sock: self._readable(s))

    def _readable(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(262144)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop_inbound(sock)
            return
        self.inbound_heard[sock] = time.monotonic()
        buffer = self.inbound[sock]
        buffer += data
        try:
            messages, used = split_lbmc_stream(buffer)
        except WireError as err:
            self.counters.add("link_malformed")
            self.log_event("malformed-input", f"route-info connection on portal {self.portal}: {err}; closed")
            self._drop_inbound(sock)
            return
        offset = 0
        for message in messages:
            size = (buffer[offset + 2] << 8) | buffer[offset + 3]
            if is_route_info(message):
                self.counters.add("route_info_msgs_rcvd")
                self.on_route_info(bytes(buffer[offset:offset + size]))
            offset += size
        del buffer[:used]

    def _drop_inbound(self, sock: socket.socket) -> None:
        self.loop.remove_reader(sock)
        self.inbound.pop(sock, None)
        self.inbound_heard.pop(sock, None)
        sock.close()

    def close(self) -> None:
        self.loop.remove_reader(self.listener)
        self.listener.close()
        for neighbor in list(self.neighbors.values()):
            self._close(neighbor)
        self.neighbors.clear()
        for sock in list(self.inbound):
            self._drop_inbound(sock)


def _peer_text(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return "a router"
    return f"{host}:{port}"
