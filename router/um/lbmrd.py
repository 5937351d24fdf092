"""A unicast topic resolution daemon (after UM's lbmrd): where multicast is not allowed, contexts
configured with `resolver_unicast_daemon` send LBMR here and it relays each datagram to every
other live client. Clients are forgotten when they stay silent (contexts send keepalives).
Keepalives register their sender and go no further: relayed, N contexts' keepalives would be N^2
datagrams every keepalive interval, telling the other contexts nothing."""
from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import time

from router.um.loop import EventLoop
from router.um.wire.errors import WireError
from router.um.wire.lbmr import TopicResolution, UnicastAlive, decode_lbmr

log = logging.getLogger(__name__)


class ResolverDaemon:
    def __init__(self, loop: EventLoop, interface: str = "127.0.0.1", port: int = 15380,
                 client_timeout: float = 5.0):
        self.loop = loop
        self.client_timeout = client_timeout
        self.clients: dict[tuple, float] = {}
        self.counters = {"datagrams_received": 0, "datagrams_relayed": 0, "malformed": 0, "clients_expired": 0,
                         "keepalives_received": 0}
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((interface, port))
        self.sock.setblocking(False)
        self.address = self.sock.getsockname()
        loop.add_reader(self.sock.fileno(), self._readable)
        self._sweep = loop.call_every(max(client_timeout / 4, 0.05), self._expire)

    def _readable(self) -> None:
        for _ in range(256):
            try:
                data, client = self.sock.recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                return
            self.counters["datagrams_received"] += 1
            try:
                packet = decode_lbmr(data)     # relay only what parses: garbage stays here, counted
            except WireError as err:
                self.counters["malformed"] += 1
                log.debug("malformed datagram from %s: %s", client, err)
                continue
            if client not in self.clients:
                log.info("client %s:%d joined", *client)
            self.clients[client] = time.monotonic()
            if _is_keepalive(packet.body):
                self.counters["keepalives_received"] += 1
                continue
            for other in self.clients:
                if other != client:
                    try:
                        self.sock.sendto(data, other)
                        self.counters["datagrams_relayed"] += 1
                    except OSError:
                        pass

    def _expire(self) -> None:
        cutoff = time.monotonic() - self.client_timeout
        for client, seen in list(self.clients.items()):
            if seen < cutoff:
                del self.clients[client]
                self.counters["clients_expired"] += 1
                log.info("client %s:%d expired", *client)

    def close(self) -> None:
        self._sweep.cancel()
        self.loop.remove_reader(self.sock.fileno())
        self.sock.close()


def _is_keepalive(body) -> bool:
    """A client's keepalive: an alive record, or a topic resolution packet with nothing in it."""
    return isinstance(body, UnicastAlive) or (isinstance(body, TopicResolution) and not body.tqrs and not body.tirs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="umlbmrd", description=__doc__)
    parser.add_argument("-i", "--interface", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=15380)
    parser.add_argument("-t", "--client-timeout", type=float, default=5.0, metavar="S")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    loop = EventLoop("umlbmrd")
    daemon = ResolverDaemon(loop, args.interface, args.port, args.client_timeout)
    signal.signal(signal.SIGTERM, lambda *_: loop.stop())
    signal.signal(signal.SIGINT, lambda *_: loop.stop())
    try:
        loop.run_forever()
    finally:
        daemon.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
