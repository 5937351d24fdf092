"""An initiator whose companion is a DNS name (spec/dro.md: `<address>` is an IP or a DNS name,
resolved again at each failed attempt). The lookups run against a name server the test runs, in a
network and mount namespace of its own (unshare -m -n, with its own /etc/resolv.conf), so the test
decides when, and what, DNS answers; the host's DNS and interfaces are not touched."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.processes import ROOT

pytestmark = pytest.mark.integration

_CHILD = r'''
import socket, struct, subprocess, sys, tempfile, threading, time
from router.config.model import Acceptor, GatewayKeepalive, Initiator, PeerConfig, SingleTcpLink
from router.portals.peer_link import PeerLink
from router.um.loop import EventLoop

subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
with tempfile.NamedTemporaryFile("w", suffix="-resolv.conf") as conf:
    conf.write("nameserver 127.0.0.1\noptions timeout:20 attempts:1\n")
    conf.flush()
    subprocess.run(["mount", "--bind", conf.name, "/etc/resolv.conf"], check=True)


class NameServer:
    """Answers A queries: companion.umrouter.test is 127.0.0.1 (once released), anything else does
    not exist. Until released it holds the companion's queries, as a name server that is down or
    far away does."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 53))
        self.released = threading.Event()
        self.held = []
        self.late = threading.Event()           # a held query answered by the fallback timer
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            query, client = self.sock.recvfrom(512)
            end = 12
            labels = []
            while query[end]:
                labels.append(query[end + 1:end + 1 + query[end]].decode())
                end += 1 + query[end]
            name, question = ".".join(labels), query[12:end + 5]
            if name != "companion.umrouter.test":
                self.answer(query, question, client, None)
            elif self.released.is_set():
                self.answer(query, question, client, "127.0.0.1")
            else:
                self.held.append((query, question, client))
                # A link that blocked on this lookup gets its answer after 15 s (and the test fails).
                threading.Timer(15, self.answer_late, (query, question, client)).start()

    def answer_late(self, query, question, client):
        self.late.set()
        self.answer(query, question, client, "127.0.0.1")

    def release(self):
        self.released.set()
        for query, question, client in self.held:
            self.answer(query, question, client, "127.0.0.1")

    def answer(self, query, question, client, address):
        flags = 0x8180 if address else 0x8183              # an answer / no such name
        reply = struct.pack("!HHHHHH", struct.unpack_from("!H", query)[0], flags, 1, 1 if address else 0, 0, 0)
        reply += question
        if address:
            reply += struct.pack("!HHHIH", 0xC00C, 1, 1, 60, 4) + socket.inet_aton(address)
        self.sock.sendto(reply, client)


dns = NameServer()
loop = EventLoop("child")
ticks = []
loop.call_every(0.01, lambda: ticks.append(1))
events = []
keepalive = GatewayKeepalive(100, 2000, True)
acceptor = PeerLink(PeerConfig(name="PB", link=SingleTcpLink(acceptor=Acceptor(0), nodelay=True),
                               gateway_keepalive=keepalive), loop, "router-B", 0xB0B)
acceptor.start()


def initiator(name, address):
    link = PeerLink(PeerConfig(name=name, link=SingleTcpLink(initiator=Initiator(address, acceptor.listening_port, 100),
                                                             nodelay=True), gateway_keepalive=keepalive),
                    loop, "router-A", 0xA1, log_event=lambda kind, text: events.append((name, kind, text)))
    link.start()
    return link


def run_until(condition, what, timeout=10):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            print(f"TIMEOUT {what}: {events}", flush=True)
            sys.exit(1)
        loop.run_once(0.05)


named = initiator("PA", "companion.umrouter.test")
if dns.late.is_set():
    print("BLOCKED: starting the link waited for the name server's answer", flush=True)
    sys.exit(1)
run_until(lambda: dns.held, "the lookup to reach the name server")
before = len(ticks)
run_until(lambda: len(ticks) >= before + 10, "the loop to keep running while DNS has not answered")
assert not named.is_up
print("LOOP RAN WHILE RESOLVING", flush=True)
dns.release()
run_until(lambda: named.is_up and acceptor.is_up, "the link to come up once the name resolves")
print("UP", named.peer_address, flush=True)

missing = initiator("PC", "missing.umrouter.test")
run_until(lambda: missing.connect_failures >= 2, "attempts at a name that does not exist to fail and be retried")
failed = [text for name, kind, text in events if name == "PC" and kind == "peer-connect-failed"]
print("RETRIED", failed[0], flush=True)
'''


def test_an_initiator_resolves_its_companions_name_without_stalling_its_worker():
    """A lookup can take the resolver's whole timeout when DNS is down or slow, which is when links
    drop and reconnect; made on the worker's loop it stalled every portal of the worker (and its
    heartbeats, so the supervisor killed it as hung, again at every attempt). The link must come up
    once the name resolves, and a name that does not resolve must fail the attempt, logged, and be
    tried again."""
    probe = subprocess.run(["unshare", "-m", "-n", "true"], capture_output=True, text=True)
    assert probe.returncode == 0, ("needs network and mount namespaces of its own: unshare -m -n, from "
                                   f"util-linux (scripts/install-sysdeps.sh), run as root: {probe.stderr}")
    child = subprocess.run(["unshare", "-m", "-n", sys.executable, "-c", _CHILD], cwd=ROOT,
                           capture_output=True, text=True, timeout=90)
    out = child.stdout + child.stderr[-3000:]
    assert "LOOP RAN WHILE RESOLVING" in child.stdout, out
    assert "UP ('127.0.0.1'," in child.stdout, out
    assert "RETRIED" in child.stdout and "cannot resolve missing.umrouter.test" in child.stdout, out
