"""The unicast resolver daemon with real UDP clients on loopback: what it relays, to whom."""
import socket

import pytest

from router.um.lbmrd import ResolverDaemon
from router.um.loop import EventLoop
from router.um.wire.lbmr import (LBMR_HDR_TYPE_UCAST_RCV_ALIVE, LbmrPacket, TopicResolution, UnicastAlive,
                                 decode_lbmr, encode_lbmr)
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def daemon():
    loop = EventLoop("lbmrd-test")
    running = ResolverDaemon(loop, "127.0.0.1", 0)
    loop.start_thread()
    yield running
    loop.call_and_wait(running.close)
    loop.close()


@pytest.fixture
def clients():
    opened = []

    def client() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(0.2)
        opened.append(sock)
        return sock
    yield client
    for sock in opened:
        sock.close()


def _received(sock: socket.socket) -> list:
    packets = []
    try:
        while True:
            packets.append(decode_lbmr(sock.recv(65536)).body)
    except socket.timeout:
        return packets


def test_keepalives_keep_a_client_registered_and_are_not_relayed(daemon, clients):
    """Every context sends the daemon a keepalive every resolver_unicast_keepalive_interval
    (500 ms): relayed to every other client they would be N^2 datagrams for N contexts, for
    nothing. They keep the sender registered, and go no further."""
    keepalive = encode_lbmr(LbmrPacket(UnicastAlive(LBMR_HDR_TYPE_UCAST_RCV_ALIVE)))
    empty = encode_lbmr(LbmrPacket(TopicResolution([], [])))      # the other keepalive form
    query = encode_lbmr(LbmrPacket(TopicResolution(["lbmrd.topic"], [])))
    a, b = clients(), clients()
    b.sendto(keepalive, daemon.address)                 # b: a context that only listens
    wait_for(lambda: len(daemon.clients) == 1, 5, message="b registered by its keepalive")
    for _ in range(5):
        a.sendto(keepalive, daemon.address)
        a.sendto(empty, daemon.address)
    a.sendto(query, daemon.address)
    wait_for(lambda: daemon.counters["datagrams_received"] == 12, 5, message="the daemon read them all")
    got = _received(b)
    assert got == [TopicResolution(["lbmrd.topic"], [])], got
    assert len(daemon.clients) == 2 and daemon.counters["keepalives_received"] == 11
    assert daemon.counters["datagrams_relayed"] == 1
