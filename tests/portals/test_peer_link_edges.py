"""The peer link at its edges, over real sockets on loopback: a compressed backlog larger than
one frame, an <interface> network that loses its address, a UDP path on such a network, and what
the control message counters add up to."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from router.um.wire.lbmc import MESSAGE_HEADER, NHDR_DATA
from router.um.wire.lbmc_constants import LBMC_TYPE_MESSAGE
from tests.portals.test_peer_link import config
from tests.support.processes import ROOT

pytestmark = pytest.mark.integration


def compressed(peer_config):
    return dataclasses.replace(peer_config, link=dataclasses.replace(peer_config.link, compression="lz4"))


def piece(sqn: int, frames: int = 5, size: int = 60_000) -> bytes:
    """A run of `frames` messages of one stream (what a read hands the link as one piece),
    random payload: LZ4 cannot shrink it, so a slow companion makes the link queue."""
    return b"".join(MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, size, 3, sqn * frames + n)
                    + os.urandom(size - MESSAGE_HEADER.size) for n in range(frames))


def test_a_compressed_link_with_a_large_max_queue_survives_a_backlog(harness):
    """A backlog of more than 16 MB on an LZ4 link (a <max-queue> above 16 MB, a slow WAN) must
    drain to the companion, not come out as one LZ4 frame its reader refuses as corrupt."""
    acceptor = harness.side(compressed(config("PB", timeout=60_000)), "router-B", 0xB0B)
    received = []
    acceptor.link.on_data = lambda tidx, data, count, longest: received.append(len(data))
    acceptor.link.start()
    initiator = harness.side(compressed(config("PA", connect_to=acceptor.link.listening_port, timeout=60_000,
                                               max_queue=48_000_000)), "router-A", 0xA1)
    initiator.link.start()
    harness.run_until(lambda: acceptor.link.is_up and initiator.link.is_up, 5, "the link comes up")
    acceptor.driven = False                         # the companion is slow: the initiator queues
    pieces = [piece(n) for n in range(130)]
    for data in pieces:
        assert initiator.link.send_data(data, 5)
    assert initiator.link.queue.unwritten_bytes > 17_000_000
    acceptor.driven = True
    total = sum(map(len, pieces))
    harness.run_until(lambda: sum(received) == total or acceptor.downs, 60, "the backlog to drain")
    assert acceptor.downs == [] and initiator.downs == []
    assert sum(received) == total


# The initiator's <interface> as a network (10.99.0.0/24) whose address goes away and comes back,
# in a network namespace of its own (unshare -n): the host's interfaces are not touched.
_INTERFACE_CHILD = r'''
import subprocess, sys, time
from router.config.model import Acceptor, GatewayKeepalive, Initiator, PeerConfig, SingleTcpLink
from router.portals.peer_link import PeerLink
from router.um.loop import EventLoop

def ip(*args):
    subprocess.run(["ip", *args], check=True)

ip("link", "set", "lo", "up")
ip("addr", "flush", "dev", "lo")                   # 10.99.0.1 the only address (SIOCGIFADDR gives one)
ip("addr", "add", "10.99.0.1/24", "dev", "lo")
loop = EventLoop("child")
keepalive = GatewayKeepalive(100, 2000, True)
acceptor = PeerLink(PeerConfig(name="PB", link=SingleTcpLink(acceptor=Acceptor(0), nodelay=True),
                               gateway_keepalive=keepalive), loop, "router-B", 0xB0B)
acceptor.start()
port = acceptor.listening_port
initiator = PeerLink(PeerConfig(name="PA", link=SingleTcpLink(initiator=Initiator("10.99.0.1", port, 100),
                                                              interface="10.99.0.0/24", nodelay=True),
                                gateway_keepalive=keepalive), loop, "router-A", 0xA1)
initiator.start()

def run_until(condition, what, timeout=10):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            print(f"TIMEOUT {what}: initiator {initiator.state.value}, "
                  f"{initiator.connect_failures} connect failures", flush=True)
            sys.exit(1)
        loop.run_once(0.01)

run_until(lambda: initiator.is_up and acceptor.is_up, "the link comes up")
ip("addr", "del", "10.99.0.1/24", "dev", "lo")     # the interface loses its address
acceptor.stop()                                     # and the link goes down
run_until(lambda: initiator.connect_failures >= 2, "connect attempts failing while the address is gone")
ip("addr", "add", "10.99.0.1/24", "dev", "lo")     # it is back
acceptor = PeerLink(PeerConfig(name="PB", link=SingleTcpLink(acceptor=Acceptor(port), nodelay=True),
                               gateway_keepalive=keepalive), loop, "router-B", 0xB0B)
acceptor.start()
run_until(lambda: initiator.is_up and acceptor.is_up, "the link to come back")
print("RECONNECTED", flush=True)
'''


def test_an_initiator_whose_interface_network_lost_its_address_keeps_retrying_and_reconnects():
    """<interface> given as a network (10.29.3.0/24): while no local address is in it (a VPN or
    DHCP lease gone), each attempt fails and is retried, and the link comes back with the address;
    it must not stop retrying for good at the first attempt that cannot pick a local address."""
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    assert probe.returncode == 0, ("needs a network namespace of its own: unshare -n, from util-linux "
                                   f"(scripts/install-sysdeps.sh), run as root: {probe.stderr}")
    child = subprocess.run(["unshare", "-n", sys.executable, "-c", _INTERFACE_CHILD], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert "RECONNECTED" in child.stdout, child.stdout + child.stderr[-3000:]


def with_interface(peer_config, interface: str):
    return dataclasses.replace(peer_config, link=dataclasses.replace(peer_config.link, interface=interface))


def test_a_udp_peer_link_whose_interface_is_a_network_comes_up_and_carries_data(harness):
    """<interface> may be a CIDR network (spec/dro.md: "local IP or CIDR for the link"); the
    UDP path must bind, and announce, this host's address in it, as the TCP link does."""
    from tests.portals.test_peer_udp import udp
    arrived = []
    acceptor = harness.side(with_interface(config("PB", udp=udp()), "127.0.0.0/8"), "router-B", 0xB0B,
                            handshake_timeout_ms=1000, on_data=lambda tidx, data, count, longest: arrived.append(bytes(data)))
    acceptor.link.start()
    initiator = harness.side(with_interface(config("PA", connect_to=acceptor.link.listening_port, udp=udp()),
                                            "127.0.0.0/8"), "router-A", 0xA1, handshake_timeout_ms=1000)
    initiator.link.start()
    harness.run_until(lambda: (acceptor.link.is_up and initiator.link.is_up)
                      or initiator.link.handshake_failures, 5, "the link with its UDP path")
    assert initiator.link.handshake_failures == acceptor.link.handshake_failures == 0
    message = MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, 100, 3, 1) + bytes(88)
    assert initiator.link.send_data(message)
    initiator.link.flush()
    harness.run_until(lambda: arrived, 5, "data over the UDP path")
    assert arrived == [message]


def test_control_messages_sent_are_never_more_than_those_generated(harness):
    """Control messages "generated" (gateway_cntl_msgs) and "sent" (gateway_cntl_msgs_sent):
    the handshake and the keepalive responses a link sends are generated too."""
    acceptor, initiator = harness.pair({"interval": 50}, {"interval": 50})
    harness.run_until(lambda: min(s.counter("rtt_samples") for s in (acceptor, initiator)) >= 3, 5, "keepalives")
    for side in (acceptor, initiator):
        assert 0 < side.counter("gateway_cntl_msgs_sent") <= side.counter("gateway_cntl_msgs")


def test_a_compressed_frame_slower_to_arrive_than_the_keepalive_timeout_keeps_the_link(harness):
    """On a slow WAN one LZ4 frame (up to a megabyte of the link's queue) can take longer to arrive
    than <gateway-keepalive timeout>: nothing whole comes meanwhile, yet bytes do, so the companion
    is alive. The link must not be dropped (and its queue with it, again at every backlog)."""
    import socket
    import time

    import lz4.block

    from router.portals.peer_handshake import build_handshake
    from router.um.wire.lbmc import encode_lbmc

    def frame(data: bytes) -> bytes:
        block = lz4.block.compress(data, store_size=True)
        return len(block).to_bytes(4, "big") + block

    arrived = []
    acceptor = harness.side(compressed(config("PB", interval=100, timeout=1000)), "router-B", 0xB0B,
                            on_data=lambda tidx, data, count, longest: arrived.append(count))
    acceptor.link.start()
    with socket.create_connection(("127.0.0.1", acceptor.link.listening_port)) as companion:
        companion.sendall(frame(encode_lbmc(build_handshake("router-A", 0xA1))))
        harness.run_until(lambda: acceptor.link.is_up, 5, "the handshake")
        backlog = frame(piece(0, frames=5))                   # 300 kB that LZ4 cannot shrink
        pieces = [backlog[n:n + len(backlog) // 30 + 1] for n in range(0, len(backlog), len(backlog) // 30 + 1)]
        last = time.monotonic()

        def trickle() -> bool:
            """The next piece every 100 ms: the frame takes three seconds to arrive."""
            nonlocal last
            if pieces and time.monotonic() - last >= 0.1:
                companion.sendall(pieces.pop(0))
                last = time.monotonic()
            return (not pieces and sum(arrived) == 5) or bool(acceptor.downs)
        harness.run_until(trickle, 15, "the frame")
        assert acceptor.downs == [] and sum(arrived) == 5
