"""The dual-TCP peer link (router.portals.peer_dual_link) under a peer portal, over real loopback
TCP: each router listens and connects to its companion, and the two connections come up in
whatever order the network gives. A TCP relay in front of one router's listen port can hold one
direction back, so a particular order is made to happen every time."""
from __future__ import annotations

import selectors
import socket
import threading
import time

import pytest

from router.config.model import Acceptor, GatewayKeepalive, Initiator, PeerConfig, SingleTcpLink
from router.ipc import bus_messages as bm
from router.monitor.counters import PortalCounters
from router.portals.peer import PeerPortal
from router.routing.service import records_to_plain
from router.um.loop import EventLoop
from tests.portals.test_peer_link import config as single_config
from tests.routing.net import Net
from tests.support.routers import free_port

pytestmark = pytest.mark.integration

T = bm.INTEREST_TOPIC


class Relay:
    """A TCP relay on loopback to `target`: what the client sends goes on at once; what the target
    answers is held while `holding` and goes on when released."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self._vanishing = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.holding = threading.Event()
        self.holding.set()
        self.held_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._sockets: list[socket.socket] = [self.listener]
        self._thread.start()

    def release(self) -> None:
        self.holding.clear()

    def vanish(self) -> None:
        """The connections carried so far end as a lost path ends them: each client sees its
        connection close, while the target hears nothing more on its end (no FIN, no RST)."""
        self._vanishing.set()
        deadline = time.monotonic() + 5
        while self._vanishing.is_set():
            if time.monotonic() > deadline:
                raise AssertionError("the relay did not drop its connections")
            time.sleep(0.001)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for sock in self._sockets:
            sock.close()

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self.listener, selectors.EVENT_READ, None)
        pairs: dict[socket.socket, tuple[socket.socket, bool]] = {}     # from -> (to, answers from the target)
        held = bytearray()
        client = None
        while not self._stop.is_set():
            if self._vanishing.is_set():
                for source, (_, answer) in pairs.items():
                    if source.fileno() in selector.get_map():
                        selector.unregister(source)
                    if not answer:
                        source.close()      # the client's end closes; the target's stays open, unread
                pairs.clear()
                held.clear()
                client = None
                self._vanishing.clear()
            for key, _ in selector.select(0.01):
                if key.fileobj is self.listener:
                    client, _ = self.listener.accept()
                    upstream = socket.create_connection(("127.0.0.1", self.target_port))
                    self._sockets += [client, upstream]
                    pairs[client], pairs[upstream] = (upstream, False), (client, True)
                    selector.register(client, selectors.EVENT_READ, None)
                    selector.register(upstream, selectors.EVENT_READ, None)
                    continue
                source = key.fileobj
                destination, answer = pairs[source]
                try:
                    data = source.recv(65536)
                    if not data:
                        selector.unregister(source)
                        destination.shutdown(socket.SHUT_WR)
                    elif answer:
                        held += data
                        if self.holding.is_set():
                            self.held_bytes = len(held)
                        else:       # what was held goes first: the handshake is held until released
                            destination.sendall(bytes(held))
                            held.clear()
                    else:
                        destination.sendall(data)
                except OSError:         # an end closed: the relay has nothing more to carry
                    if source.fileno() in selector.get_map():       # (not if the shutdown above failed)
                        selector.unregister(source)
            if held and client is not None and not self.holding.is_set():
                try:
                    client.sendall(bytes(held))
                except OSError:
                    pass
                held.clear()
        selector.close()


class Bus:
    def __init__(self):
        self.sent = []

    def send(self, message) -> None:
        self.sent.append(message)

    def interest(self) -> list[tuple[str, int]]:
        return [(m.symbol, m.op) for m in self.sent if isinstance(m, bm.Interest)]


class Datapath:
    backlog = None

    def attach(self, index: int) -> None:
        pass

    def detach(self, index: int) -> None:
        pass


def dual_config(name: str, listen_port: int, companion_port: int,
                keepalive: GatewayKeepalive | None = None) -> PeerConfig:
    link = SingleTcpLink(initiator=Initiator("127.0.0.1", companion_port, 200), acceptor=Acceptor(listen_port),
                         nodelay=True, dual=True)
    return PeerConfig(name=name, link=link, gateway_keepalive=keepalive or GatewayKeepalive(200, 5000, True))


class Router:
    """One router's dual peer portal on an event loop of its own, with the bus it speaks on."""

    def __init__(self, net: Net, router: str, portal: str, listen_port: int, companion_port: int,
                 keepalive: GatewayKeepalive | None = None):
        self.loop = EventLoop(router)
        self.stopped = False
        self.bus = Bus()
        adjacent = sorted(a.portal for a in net.adjacencies[router])
        self.events: list[tuple[str, str]] = []
        self.portal = PeerPortal(dual_config(portal, listen_port, companion_port, keepalive), adjacent.index(portal),
                                 {p: i for i, p in enumerate(adjacent)}, self.loop, net.ids[router], router,
                                 Datapath(), PortalCounters(), lambda name, text: self.events.append((name, text)))
        self.portal.bus = self.bus
        snapshot = net.topology(router).snapshot()
        self.portal.on_bus(bm.RouteTable(1, net.ids[router], tuple(records_to_plain(snapshot))))


@pytest.fixture
def cleanup():
    closing = []
    yield closing
    for close in reversed(closing):
        close()


def run_until(routers, condition, what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        for router in routers:
            router.loop.run_once(0.002)


def stop(router: Router) -> None:
    if not router.stopped:
        router.stopped = True
        router.portal.link.stop()
        router.loop.close()


def test_interest_heard_before_our_own_half_is_up_is_kept(cleanup):
    """The companion's whole link is up first (its handshake on our outbound connection is slow to
    reach us): the interest it sends then arrives on our inbound connection before our link is up,
    and the companion never sends it again, so it must not be withdrawn when ours comes up."""
    net = Net().router("A", 1).router("B", 2).endpoint("A", 1).endpoint("B", 2).peer("A", "B")
    port_a, port_b = free_port(), free_port()
    relay = Relay(port_b)                   # A's outbound connection to B goes through it
    cleanup.append(relay.close)
    b = Router(net, "B", "B->A", port_b, port_a)
    cleanup.append(lambda: stop(b))
    b.portal.on_bus(bm.Interest("B.E2", 2, T, "wanted.topic", bm.OP_ADD))     # D2 has a receiver
    a = Router(net, "A", "A->B", port_a, relay.port)
    cleanup.append(lambda: stop(a))

    run_until([a, b], lambda: b.portal.link.is_up and ("wanted.topic", bm.OP_ADD) in a.bus.interest(),
              "B's link is up and A has heard B's interest")
    assert not a.portal.link.is_up and relay.held_bytes, "A's own connection is still waiting for B's handshake"
    relay.release()
    run_until([a, b], lambda: a.portal.link.is_up, "A's link comes up")

    assert ("wanted.topic", bm.OP_CANCEL) not in a.bus.interest(), "the interest B sent is withdrawn"
    assert a.portal.heard_interest == {(T, "wanted.topic", 2)}


def test_interest_of_the_companions_previous_connection_goes_when_the_link_comes_back(cleanup):
    """A companion restarted without a receiver it had: what it said before is withdrawn when the
    link is back, what it says now is kept."""
    net = Net().router("A", 1).router("B", 2).endpoint("A", 1).endpoint("B", 2).peer("A", "B")
    port_a, port_b = free_port(), free_port()
    b = Router(net, "B", "B->A", port_b, port_a)
    cleanup.append(lambda: stop(b))
    b.portal.on_bus(bm.Interest("B.E2", 2, T, "old.topic", bm.OP_ADD))
    a = Router(net, "A", "A->B", port_a, port_b)
    cleanup.append(lambda: stop(a))
    run_until([a, b], lambda: a.portal.heard_interest == {(T, "old.topic", 2)}, "A hears B's interest")
    stop(b)
    run_until([a], lambda: not a.portal.link.is_up, "A sees the link go down")

    restarted = Router(net, "B", "B->A", port_b, port_a)
    cleanup.append(lambda: stop(restarted))
    restarted.portal.on_bus(bm.Interest("B.E2", 2, T, "new.topic", bm.OP_ADD))
    run_until([a, restarted], lambda: a.portal.link.is_up and a.portal.heard_interest == {(T, "new.topic", 2)},
              "the link is back with only the new interest")
    assert a.bus.interest() == [("old.topic", bm.OP_ADD), ("new.topic", bm.OP_ADD), ("old.topic", bm.OP_CANCEL)] \
        or a.bus.interest() == [("old.topic", bm.OP_ADD), ("old.topic", bm.OP_CANCEL), ("new.topic", bm.OP_ADD)]


def test_the_link_says_its_state_and_companion_when_asked(cleanup):
    """What the monitor and routerctl show of a dual link (a dual link has no UDP path)."""
    net = Net().router("A", 1).router("B", 2).endpoint("A", 1).endpoint("B", 2).peer("A", "B")
    port_a, port_b = free_port(), free_port()
    a = Router(net, "A", "A->B", port_a, port_b)
    cleanup.append(lambda: stop(a))
    assert a.portal.query("topics")["link"] == {"state": a.portal.link.state.value, "peer": "", "peer_node_id": 0,
                                                "udp": None}
    b = Router(net, "B", "B->A", port_b, port_a)
    cleanup.append(lambda: stop(b))
    run_until([a, b], lambda: a.portal.link.is_up and b.portal.link.is_up, "the link comes up")
    assert a.portal.query("topics")["link"] == {"state": "up", "peer": "B", "peer_node_id": 2, "udp": None}


def test_halves_reaching_two_different_routers_are_not_one_link(harness, cleanup):
    """A's companion address leads to router C while router B connects to A's listen port: the
    two connections are not one link to one companion, and the link does not come up."""
    net = Net().router("A", 1).router("B", 2).endpoint("A", 1).peer("A", "B")
    port_a, port_c = free_port(), free_port()
    c = harness.side(single_config("C->A", listen_port=port_c), "C", 3)
    c.link.start()
    a = Router(net, "A", "A->B", port_a, port_c)
    cleanup.append(lambda: stop(a))
    b = harness.side(single_config("B->A", connect_to=port_a), "B", 2)
    b.link.start()
    dual = a.portal.link
    run_until([a, b, c], lambda: a.portal.counters.get("link_handshakes_rejected"),
              "each connection has its handshake, and A sees they reach two routers")

    assert not [m for m in a.bus.sent if isinstance(m, bm.PeerState)], "A took B and C for one companion"
    assert a.portal.peer_name == "" and not a.portal.query("topics")["link"]["peer"]
    assert dual.outbound.is_up and not dual.inbound.is_up, "the companion address's connection stays, B's accepted one goes"
    [(_, text), *_] = [e for e in a.events if e[0] == "peer-handshake-failed"]
    assert "C" in text and "B" in text


def test_a_stray_router_holding_the_listen_port_gives_way_to_the_companion(harness, cleanup):
    """Router S connected to A's listen port first; B, A's companion, then finds the port taken (one
    connection at a time) while A's own connection reaches B. A closes S's connection, so B's next
    attempt takes the port and the link comes up; before, S's connection, alive with keepalives, kept
    the link down for as long as S ran."""
    net = Net().router("A", 1).router("B", 2).endpoint("A", 1).peer("A", "B")
    port_a, port_b = free_port(), free_port()
    a = Router(net, "A", "A->B", port_a, port_b)
    cleanup.append(lambda: stop(a))
    stray = harness.side(single_config("S->A", connect_to=port_a, reconnect=600_000), "S", 9)
    stray.link.start()
    run_until([a, stray], lambda: a.portal.link.inbound.is_up and stray.link.is_up, "S holds A's listen port")
    b = Router(net, "B", "B->A", port_b, port_a)
    cleanup.append(lambda: stop(b))

    run_until([a, b, stray], lambda: a.portal.link.is_up and b.portal.link.is_up, "the link between A and B")
    assert (a.portal.peer_name, b.portal.peer_name) == ("B", "A")
    assert a.portal.counters.get("link_handshakes_rejected") >= 1
    assert stray.downs, "S's connection was closed"


def test_a_connection_lost_on_one_side_only_does_not_keep_the_link_down(cleanup):
    """A's connection to B is lost on A's side while B hears nothing (a path that vanished: no FIN
    reaches B). A's link goes down, and A closes the connection B opened too, so B sees its link go
    down and takes A's next connection. Before, A kept B's connection and B its dead one, which held
    B's listen port: A's every new attempt was refused until B's keepalive timeout (a minute here,
    for ever with keepalives off), while B, its link up, sent into a link A held down."""
    net = Net().router("A", 1).router("B", 2).endpoint("A", 1).endpoint("B", 2).peer("A", "B")
    port_a, port_b = free_port(), free_port()
    relay = Relay(port_b)                   # A's outbound connection to B goes through it
    relay.release()
    cleanup.append(relay.close)
    keepalive = GatewayKeepalive(200, 60_000, True)
    b = Router(net, "B", "B->A", port_b, port_a, keepalive)
    cleanup.append(lambda: stop(b))
    a = Router(net, "A", "A->B", port_a, relay.port, keepalive)
    cleanup.append(lambda: stop(a))
    run_until([a, b], lambda: a.portal.link.is_up and b.portal.link.is_up, "the link comes up")

    relay.vanish()
    run_until([a, b], lambda: not a.portal.link.is_up, "A sees its connection to B close")
    run_until([a, b], lambda: a.portal.link.is_up and b.portal.link.is_up, "the link is back")
    assert [m.up for m in b.bus.sent if isinstance(m, bm.PeerState)] == [1, 0, 1], "B saw the link go down"
    assert [m.up for m in a.bus.sent if isinstance(m, bm.PeerState)] == [1, 0, 1]
