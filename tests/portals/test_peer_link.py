"""The peer link over real TCP on loopback: handshake, keepalive RTT, silence and reconnect (also
across a SIGSTOPped process), malformed streams, refused second connections, bounded queues,
batching, and tshark decoding the captured link cleanly."""
from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from router.config.model import (Acceptor, Batching, GatewayKeepalive, Initiator, PeerConfig, SingleTcpLink)
from router.portals.peer_handshake import build_handshake
from router.portals.peer_link import LinkState, PeerLink
from router.routing.route_info import build_route_info, parse_route_info
from router.routing.topology import Adjacency, Topology
from router.um.loop import EventLoop
from router.um.wire.lbmc import LBMC_TYPE_CONTROL, LBMC_TYPE_MESSAGE, LbmcMessage, RouteInfo, encode_lbmc
from tests.support.processes import ROOT
from tests.support.routers import free_port
from tests.support.tshark import LiveCapture, assert_no_expert_info, decode

pytestmark = pytest.mark.integration


def config(name, *, connect_to=None, listen_port=0, interval=100, timeout=600, reconnect=200, **extra):
    link = SingleTcpLink(initiator=Initiator("127.0.0.1", connect_to, reconnect) if connect_to else None,
                         acceptor=None if connect_to else Acceptor(listen_port), nodelay=True,
                         send_buffer=extra.pop("send_buffer", 0), receive_buffer=extra.pop("receive_buffer", 0))
    return PeerConfig(name=name, link=link, gateway_keepalive=GatewayKeepalive(interval, timeout, True), **extra)


class Side:
    """One router's end: a PeerLink on its own loop, recording what it saw."""

    def __init__(self, harness, config_, own_name, node_id, **kwargs):
        self.loop = EventLoop(own_name)
        self.ups, self.downs, self.messages = [], [], []
        self.link = PeerLink(config_, self.loop, own_name, node_id, on_up=lambda *a: self.ups.append(a),
                             on_down=self.downs.append, on_message=self.messages.append, **kwargs)
        self.driven = True
        harness.sides.append(self)

    def counter(self, name):
        return self.link.counters.get(name)


class Harness:
    def __init__(self):
        self.sides: list[Side] = []

    def side(self, *args, **kwargs) -> Side:
        return Side(self, *args, **kwargs)

    def pair(self, acceptor_kwargs=None, initiator_kwargs=None, start=True):
        acceptor = self.side(config("PB", **(acceptor_kwargs or {})), "router-B", 0xB0B)
        acceptor.link.start()
        initiator = self.side(config("PA", connect_to=acceptor.link.listening_port, **(initiator_kwargs or {})),
                              "router-A", 0xA1)
        if start:
            initiator.link.start()
            self.run_until(lambda: acceptor.link.is_up and initiator.link.is_up, 5, "the link comes up")
        return acceptor, initiator

    def run_until(self, condition, timeout, what="condition"):
        """Drive every side still being driven until ``condition()`` or fail at the deadline."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            driven = [s for s in self.sides if s.driven]
            for side in driven:
                side.loop.run_once(0.002)
            if not driven:
                time.sleep(0.002)

    def close(self):
        for side in self.sides:
            side.link.stop()
            side.loop.close()


def test_handshake_exchanges_names_and_node_ids_then_messages_flow(harness):
    acceptor, initiator = harness.pair()
    assert initiator.ups == [("router-B", 0xB0B)] and acceptor.ups == [("router-A", 0xA1)]
    assert initiator.link.peer.node_id == 0xB0B and acceptor.link.peer.name == "router-A"
    assert initiator.counter("link_connects") == acceptor.counter("link_connects") == 1
    topology = Topology(0xB0B, "router-B")
    topology.set_local_adjacencies([Adjacency.domain(2, 3, "LAN2"), Adjacency.router(0xA1, 1, "PB")])
    assert acceptor.link.send_control(build_route_info(topology.next_announcement()))
    harness.run_until(lambda: initiator.messages, 5, "the route-info")
    announcement = parse_route_info(initiator.messages[0])
    assert announcement.node_id == 0xB0B and announcement.adjacencies == topology.local.adjacencies
    assert initiator.counter("gateway_cntl_msgs_rcvd") >= 2           # handshake + route-info


def test_a_router_linked_to_itself_is_refused(harness):
    acceptor = harness.side(config("PB"), "router-A", 0xA1, handshake_timeout_ms=500)
    acceptor.link.start()
    initiator = harness.side(config("PA", connect_to=acceptor.link.listening_port, reconnect=5000), "router-A", 0xA1)
    initiator.link.start()
    harness.run_until(lambda: initiator.link.state is LinkState.WAITING and acceptor.link.state is LinkState.LISTENING
                      and initiator.link.peer_address, 5, "both ends refuse the handshake")
    assert initiator.ups == [] and acceptor.ups == []


def test_keepalives_measure_rtt_on_both_sides(harness):
    acceptor, initiator = harness.pair({"interval": 50}, {"interval": 50})
    harness.run_until(lambda: min(s.counter("rtt_samples") for s in (acceptor, initiator)) >= 3, 5, "RTT samples")
    for side in (acceptor, initiator):
        assert 0 < side.counter("rtt_min") <= side.counter("rtt_mean") <= side.counter("rtt_max") < 1_000_000
        assert abs(side.counter("last_ka_time") - time.time()) < 10
    assert initiator.link.is_up and initiator.counter("link_disconnects") == 0


def test_a_silent_companion_is_dropped_and_the_initiator_reconnects_when_it_returns(harness):
    acceptor, initiator = harness.pair({"timeout": 5000}, {"interval": 100, "timeout": 500, "reconnect": 200})
    acceptor.driven = False                         # its process hangs: nothing answers any more
    started = time.monotonic()
    harness.run_until(lambda: initiator.downs, 5, "the initiator to declare the link dead")
    assert time.monotonic() - started >= 0.45
    assert "nothing received for" in initiator.downs[0] and "timeout 500 ms" in initiator.downs[0]
    assert initiator.counter("link_disconnects") == 1
    acceptor.driven = True
    harness.run_until(lambda: initiator.counter("link_connects") == 2 and acceptor.link.is_up, 10, "the reconnect")
    assert initiator.link.is_up and acceptor.downs


def test_connect_failures_are_counted_and_retried_until_the_acceptor_appears(harness, caplog):
    port = free_port()          # not an ephemeral port: the retrying initiator could connect to itself
    initiator = harness.side(config("PA", connect_to=port, reconnect=100), "router-A", 0xA1)
    with caplog.at_level("WARNING", logger="router.portals.peer_link"):
        initiator.link.start()
        harness.run_until(lambda: initiator.link.connect_failures >= 3, 5, "three failed attempts")
    assert f"connect to 127.0.0.1:{port} failed (attempt 2)" in caplog.text
    assert "UMR-1201-3" in caplog.text and "retrying in 100 ms" in caplog.text
    acceptor = harness.side(config("PB", listen_port=port), "router-B", 0xB0B)
    acceptor.link.start()
    harness.run_until(lambda: initiator.link.is_up and acceptor.link.is_up, 5, "the link once the acceptor listens")
    assert initiator.link.connect_failures == 0


def test_a_malformed_stream_is_counted_and_survived(harness):
    acceptor = harness.side(config("PB"), "router-B", 0xB0B)
    acceptor.link.start()
    port = acceptor.link.listening_port
    with socket.create_connection(("127.0.0.1", port)) as raw:
        raw.sendall(b"\x0f\x00\x00\x10garbage-garbage!")          # unknown LBMC message type
        harness.run_until(lambda: acceptor.counter("link_malformed") == 1, 5, "the malformed stream counted")
    harness.run_until(lambda: acceptor.link.state is LinkState.LISTENING, 5, "the acceptor to listen again")
    # Malformed after the handshake: the link goes down with a reason, the acceptor carries on.
    with socket.create_connection(("127.0.0.1", port)) as raw:
        raw.sendall(encode_lbmc(build_handshake("router-X", 0x42)))
        harness.run_until(lambda: acceptor.link.is_up, 5, "the handshake")
        raw.sendall(b"\x00\x05\x00\x02")                          # msglen 2 < the 12-byte header
        harness.run_until(lambda: acceptor.downs, 5, "the link to drop")
    assert acceptor.downs[0].startswith("malformed stream: LBMC: msglen 2")
    assert acceptor.counter("link_malformed") == 2
    initiator = harness.side(config("PA", connect_to=port), "router-A", 0xA1)
    initiator.link.start()
    harness.run_until(lambda: initiator.link.is_up and acceptor.link.is_up, 5, "a good companion afterwards")


def test_a_second_concurrent_connection_is_refused(harness, caplog):
    acceptor, initiator = harness.pair()
    with caplog.at_level("WARNING", logger="router.portals.peer_link"):
        with socket.create_connection(("127.0.0.1", acceptor.link.listening_port)) as intruder:
            intruder.settimeout(0)
            closed = []

            def poll_closed():
                try:
                    closed.append(intruder.recv(100) == b"")
                except BlockingIOError:
                    pass
                return closed
            harness.run_until(poll_closed, 5, "the second connection to be closed")
    assert closed == [True] and acceptor.link.refused_connections == 1
    assert "refused a second connection" in caplog.text and "router-A (node id 161) is already connected" in caplog.text
    assert acceptor.link.is_up and initiator.link.is_up


def test_a_companion_whose_host_restarted_unseen_is_let_back_in(harness):
    """The companion's host restarted: its connection vanished without a FIN, and with keepalives
    off nothing goes on it to find out. Its new connection is refused (one companion at a time),
    and the acceptor tries the old one: the restarted host answers that with a reset, the old
    connection goes, and the companion's next attempt brings the link up. Before, every attempt
    was refused for as long as the acceptor ran."""
    acceptor = harness.side(config("PB", interval=0), "router-B", 0xB0B)
    acceptor.link.start()
    port = acceptor.link.listening_port
    vanished = socket.create_connection(("127.0.0.1", port))
    try:
        vanished.sendall(encode_lbmc(build_handshake("router-A", 0xA1)))
        harness.run_until(lambda: acceptor.link.is_up, 5, "the companion's first connection")
        handshake = len(encode_lbmc(build_handshake("router-B", 0xB0B)))
        vanished.settimeout(5)
        assert len(vanished.recv(handshake, socket.MSG_WAITALL)) == handshake   # read before the host went
        vanished.setblocking(False)

        def restarted_host_resets_what_comes() -> bool:
            """What reaches a connection its host no longer knows is answered with a reset."""
            if vanished.fileno() >= 0:
                try:
                    vanished.recv(65536)
                except BlockingIOError:
                    return False
                vanished.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                vanished.close()
            return True

        initiator = harness.side(config("PA", connect_to=port, interval=0, reconnect=100), "router-A", 0xA1)
        initiator.link.start()
        harness.run_until(lambda: acceptor.link.refused_connections, 5, "the new connection refused")
        harness.run_until(lambda: (restarted_host_resets_what_comes() and initiator.link.is_up
                                   and acceptor.link.is_up), 10, "the link with the restarted companion")
        assert acceptor.downs and acceptor.counter("link_connects") == 2
    finally:
        vanished.close()


def data_message(n: int, size: int) -> LbmcMessage:
    return LbmcMessage(LBMC_TYPE_MESSAGE, [], bytes([n % 256]) * size, tidx=1, sqn=n)


def test_the_bounded_queue_drops_would_block_then_not_operational(harness):
    acceptor, initiator = harness.pair(
        {"timeout": 20000, "receive_buffer": 4096},
        {"timeout": 20000, "max_queue": 200_000, "send_buffer": 16384, "batching": Batching(1, 3)})
    acceptor.driven = False                         # the companion stops reading
    sent = sum(initiator.link.send_data(data_message(n, 10_000)) for n in range(300))
    assert sent < 300
    counters = initiator.link.counters
    assert counters.get("data_fragments_dropped_would_block") == 300 - sent
    assert counters.get("data_fragment_bytes_dropped_would_block") == (300 - sent) * 10_012
    assert 0 < counters.get("data_bytes_enqueued") <= 200_000
    assert counters.get("data_bytes_enqueued_max") <= 200_000
    initiator.link.stop()
    assert counters.get("data_fragments_dropped_not_operational") > 0     # what was still queued
    before = counters.get("data_fragments_dropped_not_operational")
    assert not initiator.link.send_data(data_message(1, 100))
    assert counters.get("data_fragments_dropped_not_operational") == before + 1
    assert counters.get("data_bytes_enqueued") == 0


def test_would_block_drops_are_said_once_per_episode_which_ends_when_the_queue_drains(harness, caplog):
    acceptor, initiator = harness.pair(
        {"timeout": 20000, "receive_buffer": 4096},
        {"timeout": 20000, "max_queue": 200_000, "send_buffer": 16384, "batching": Batching(1, 3)})
    with caplog.at_level("INFO"):
        for episode in range(2):
            acceptor.driven = False                     # the companion stops reading
            refused = sum(not initiator.link.send_data(data_message(n, 10_000)) for n in range(300))
            assert refused > 1
            acceptor.driven = True
            harness.run_until(lambda: caplog.text.count("no longer dropping") == episode + 1, 10, "the queue to drain")
    assert caplog.text.count("peer link queue full (200000 bytes): dropping data until it drains") == 2
    assert caplog.text.count("UMR-3001-9: portal PA: peer link queue drained, no longer dropping") == 2


def test_batching_holds_small_data_until_the_interval_and_control_flushes_it(harness):
    acceptor, initiator = harness.pair({}, {"batching": Batching(min_length=8192, batch_interval=100)})
    batches = initiator.counter("batches")
    for n in range(3):
        assert initiator.link.send_data(data_message(n, 100))
    assert initiator.counter("batches") == batches                    # held for the interval
    harness.run_until(lambda: len(acceptor.messages) == 3, 5, "the batch")
    assert [m.sqn for m in acceptor.messages] == [0, 1, 2]
    assert initiator.counter("batches") == batches + 1
    initiator.link.send_data(data_message(3, 100))
    initiator.link.send_control(LbmcMessage(LBMC_TYPE_CONTROL, [RouteInfo(1, 0, 0xA1, 0, 0, 7, 0)]))
    assert initiator.counter("batches") == batches + 2                # flushed by the control message
    harness.run_until(lambda: len(acceptor.messages) == 5, 5, "data then control")
    assert acceptor.messages[3].sqn == 3 and acceptor.messages[4].msg_type == LBMC_TYPE_CONTROL
    assert acceptor.counter("data_msgs_rcvd") == 4
    assert initiator.counter("data_fragments_sent") == 4


class ChildAcceptor:
    """tests/portals/peer_link_child.py in its own process; always killed at the end."""

    def __init__(self, interval, timeout):
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.portals.peer_link_child", "router-C", "3003",
                                      str(interval), str(timeout)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self._reader.start()

    def port(self, timeout=10) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if line.startswith("PORT "):
                    return int(line.split()[1])
            time.sleep(0.01)
        raise AssertionError(f"the child acceptor did not start: {self.lines}")

    def close(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(10)


def test_sigstopped_far_router_is_detected_and_the_link_comes_back_after_sigcont(harness):
    child = ChildAcceptor(interval=100, timeout=5000)
    try:
        initiator = harness.side(config("PA", connect_to=child.port(), interval=100, timeout=600, reconnect=200),
                                 "router-A", 0xA1, handshake_timeout_ms=400)
        initiator.link.start()
        harness.run_until(lambda: initiator.link.is_up, 10, "the link to the child")
        os.kill(child.proc.pid, signal.SIGSTOP)
        harness.run_until(lambda: initiator.downs, 5, "keepalive to detect the stopped router")
        assert "nothing received" in initiator.downs[0]
        # While it is stopped, its kernel still completes TCP connects: the handshake times out.
        harness.run_until(lambda: initiator.link.handshake_failures >= 2, 10, "reconnects that get no handshake")
        assert not initiator.link.is_up
        os.kill(child.proc.pid, signal.SIGCONT)
        harness.run_until(lambda: initiator.link.is_up and initiator.counter("link_connects") == 2, 15,
                          "the link to come back")
        assert initiator.ups[-1] == ("router-C", 3003)
        assert child.proc.poll() is None
    finally:
        child.close()


def test_tshark_decodes_the_captured_link_cleanly(harness, tmp_path):
    acceptor = harness.side(config("PB", interval=50), "router-B", 0xB0B)
    acceptor.link.start()
    port = acceptor.link.listening_port
    pcap = tmp_path / "peer.pcapng"
    topology = Topology(0xB0B, "router-B")
    topology.set_local_adjacencies([Adjacency.domain(7, 3, "LAN7", "239.1.1.1:12965"), Adjacency.router(0xA1, 2)])
    announcement = topology.next_announcement()
    with LiveCapture(capture_filter=f"tcp port {port}", path=pcap):
        initiator = harness.side(config("PA", connect_to=port, interval=50), "router-A", 0xA1)
        initiator.link.start()
        harness.run_until(lambda: min(s.counter("rtt_samples") for s in (acceptor, initiator)) >= 2, 5, "keepalives")
        acceptor.link.send_control(build_route_info(announcement))
        harness.run_until(lambda: initiator.messages, 5, "the route-info")
        initiator.link.stop()
        harness.run_until(lambda: acceptor.link.state is LinkState.LISTENING, 5, "the close")
    decode_as = [f"tcp.port=={port},lbttcp"]
    assert_no_expert_info(pcap, decode_as, min_severity="warn")
    frames = decode(pcap, decode_as, fields=[
        "lbmc.tnwg_capabilities.flags.version", "lbmc.gateway_name.gateway_name", "lbmc.route_info.node_id",
        "lbmc.route_info.ttl", "lbmc.route_info.sqn", "lbmc.route_info_neighbor.node_id",
        "lbmc.route_info_neighbor.egress_cost", "lbmc.tnwg_ka.flags.q_flag", "lbmc.tnwg_ka.flags.r_flag",
        "lbmc.tnwg_ka.index"])
    values = lambda field: [v for f in frames for v in f.get(field, [])]
    assert values("lbmc.tnwg_capabilities.flags.version") == ["1", "1"]
    assert sorted(set(values("lbmc.gateway_name.gateway_name"))) == ["router-A", "router-B"]
    node_ids = [int(v, 0) for v in values("lbmc.route_info.node_id")]
    assert sorted(node_ids) == sorted([0xA1, 0xB0B, 0xB0B])            # two handshakes, one route-info
    neighbors = [int(v, 0) for v in values("lbmc.route_info_neighbor.node_id")]
    assert neighbors == [(1 << 63) | (announcement.adjacencies[0].identity << 32) | 7, 0xA1]
    assert values("lbmc.route_info_neighbor.egress_cost") == ["3", "2"]
    assert "100" in values("lbmc.route_info.ttl")
    queries = [v for v in values("lbmc.tnwg_ka.flags.q_flag") if v in ("1", "True")]
    responses = [v for v in values("lbmc.tnwg_ka.flags.r_flag") if v in ("1", "True")]
    assert len(queries) >= 4 and len(responses) >= 4


def test_data_reaches_the_owner_in_runs_per_topic_index_in_order(harness):
    """Runs of equal messages (found with one numpy check) and odd ones (walked) alike."""
    from router.um.wire.lbmc import MESSAGE_HEADER, NHDR_DATA
    from router.um.wire.lbmc_constants import LBMC_TYPE_MESSAGE

    def message(tidx, sqn, length=64):
        return MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, length, tidx, sqn) + bytes([sqn & 0xFF]) * (length - 12)

    arrived: dict[int, list] = {}
    acceptor = harness.side(config("PB"), "router-B", 0xB0B,
                            on_data=lambda tidx, frames, count, longest: arrived.setdefault(tidx, []).append(
                                (bytes(frames), count)))
    acceptor.link.start()
    initiator = harness.side(config("PA", connect_to=acceptor.link.listening_port), "router-A", 0xA1)
    initiator.link.start()
    harness.run_until(lambda: acceptor.link.is_up and initiator.link.is_up, 5, "the link comes up")
    sent = ([message(5, n) for n in range(300)] + [message(6, 300), message(5, 301, 80)] +
            [message(5, n) for n in range(302, 400)])
    for data in sent:
        assert initiator.link.send_data(data)
    initiator.link.flush()
    harness.run_until(lambda: sum(c for runs in arrived.values() for _, c in runs) == len(sent), 5, "every message")
    for tidx in (5, 6):
        mine = [m for m in sent if int.from_bytes(m[4:8], "big") == tidx]
        assert b"".join(f for f, _ in arrived[tidx]) == b"".join(mine)
        assert sum(c for _, c in arrived[tidx]) == len(mine)


def test_a_long_turn_of_our_own_is_not_taken_for_a_silent_companion(harness):
    """The companion kept sending while one handler of ours ran past the keepalive timeout (a big
    batch, a starved CPU): its messages wait in our socket, and the tick after that handler must
    read them rather than drop the link for silence."""
    # Timeouts far above a loaded machine's scheduling delays: both ends run in this one process.
    acceptor, initiator = harness.pair({"interval": 50, "timeout": 10000}, {"interval": 50, "timeout": 1000})
    stall_r, stall_w = socket.socketpair()

    def long_turn():
        stall_r.recv(1)
        until = time.monotonic() + 2.0                 # twice the timeout; the companion runs on
        while time.monotonic() < until:
            acceptor.loop.run_once(0.005)

    try:
        initiator.loop.add_reader(stall_r, long_turn)
        received = initiator.counter("gateway_cntl_msgs_rcvd")
        stall_w.send(b"x")
        harness.run_until(lambda: initiator.counter("gateway_cntl_msgs_rcvd") > received, 5, "the long turn")
        harness.run_until(lambda: initiator.counter("rtt_samples") >= 3, 5, "more keepalives")
        assert initiator.downs == [] and initiator.link.is_up and initiator.counter("link_disconnects") == 0
    finally:
        initiator.loop.remove_reader(stall_r)
        stall_r.close()
        stall_w.close()
