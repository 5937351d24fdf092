"""A peer link with a UDP data path (router.portals.peer_udp), over real TCP and UDP on loopback:
the handshake's UDP ports, data and control in order on UDP, loss repaired by NAKs, a path that
fails taking the link down, both sides having to agree, and tshark decoding the UDP path."""
from __future__ import annotations

import socket

import pytest

from router.config.model import UdpLink
from router.portals.peer_link import LinkState
from router.um.wire.lbmc import (LBMC_TYPE_CONTROL, LBMC_TYPE_MESSAGE, GatewayName, LbmcMessage, decode_lbmc,
                                 encode_lbmc)
from router.um.wire.lbtru import LbtruData, encode_lbtru_ack
from tests.portals.test_peer_link import config
from tests.support.decoded_data import record_decoded_data
from tests.support.routers import free_port
from tests.support.tshark import LiveCapture, decode, expert_info

pytestmark = pytest.mark.integration


def udp(port: int | None = None, **overrides) -> UdpLink:
    settings = {"rate_limit_data": 1_000_000_000, "rate_limit_interval": 10, "connect_attempt_interval": 50,
                "connect_max_attempts": 10, **overrides}
    return UdpLink(port=port or free_port(socket.SOCK_DGRAM), **settings)


class Received:
    """What a side's link handed on: data runs as (tidx, frames, count), control messages."""

    def __init__(self):
        self.data: list[tuple[int, bytes, int]] = []

    def on_data(self, tidx: int, frames: bytes, count: int, longest: int) -> None:
        self.data.append((tidx, bytes(frames), count))     # a view of the link's buffer: copied

    def messages(self) -> list[LbmcMessage]:
        out = []
        for _, frames, _ in self.data:
            offset = 0
            while offset < len(frames):
                message, offset = decode_lbmc(frames, offset)
                out.append(message)
        return out


def udp_pair(harness, acceptor_udp: UdpLink | None, initiator_udp: UdpLink | None, **kwargs):
    received = {"PB": Received(), "PA": Received()}
    acceptor = harness.side(config("PB", udp=acceptor_udp, **kwargs), "router-B", 0xB0B,
                            on_data=received["PB"].on_data, handshake_timeout_ms=1000)
    acceptor.link.start()
    initiator = harness.side(config("PA", connect_to=acceptor.link.listening_port, udp=initiator_udp, **kwargs),
                             "router-A", 0xA1, on_data=received["PA"].on_data, handshake_timeout_ms=1000)
    initiator.link.start()
    return acceptor, initiator, received


def data_message(n: int, size: int = 100) -> LbmcMessage:
    return LbmcMessage(LBMC_TYPE_MESSAGE, [], bytes([n % 256]) * size, tidx=1 + n % 3, sqn=n)


def test_data_and_control_take_the_udp_path_in_order(harness):
    acceptor, initiator, received = udp_pair(harness, udp(), udp())
    harness.run_until(lambda: acceptor.link.is_up and initiator.link.is_up, 5, "the link with its UDP path")
    assert acceptor.link.udp_path is not None and initiator.link.udp_path is not None
    assert initiator.link.peer.udp == (acceptor.link.udp_path.port, acceptor.link.udp_path.session_id)
    harness.run_until(lambda: acceptor.link.udp_path.receiver.connected, 5, "the UDP path connected")
    decoded = record_decoded_data(acceptor.loop, acceptor.link.udp_path.receiver, LbtruData)
    tcp_before = initiator.counter("data_msgs_rcvd")
    count = 3000
    for n in range(count):
        assert initiator.link.send_data(data_message(n))
        if n == 1500:       # a control message in the middle stays between the data around it
            assert initiator.link.send_control(LbmcMessage(LBMC_TYPE_CONTROL, [GatewayName("in-between")]))
    initiator.link.flush()
    harness.run_until(lambda: sum(c for _, _, c in received["PB"].data) == count, 10, "every data message")
    harness.run_until(lambda: acceptor.messages, 5, "the control message")
    messages = received["PB"].messages()
    assert [m.sqn for m in messages] == list(range(count))
    assert all(m.payload == bytes([m.sqn % 256]) * 100 and m.tidx == 1 + m.sqn % 3 for m in messages)
    assert acceptor.messages[0].headers[0].name == "in-between"
    stats = initiator.link.udp_path.stats()
    assert stats["send"]["bytes_sent"] >= count * 100 and stats["send"]["clients_connected"] == 1
    assert acceptor.link.udp_path.stats()["receive"]["lost"] == 0
    # Connected and losing nothing, every DATA datagram was taken from its header, none decoded.
    assert acceptor.link.udp_path.stats()["receive"]["msgs_rcved"] > 10 and decoded == []
    assert initiator.counter("data_fragments_sent") == count
    assert acceptor.counter("data_msgs_rcvd") >= count and initiator.counter("data_msgs_rcvd") == tcp_before
    # ...and the other way round on the same path.
    for n in range(100):
        acceptor.link.send_data(data_message(n))
    acceptor.link.flush()
    harness.run_until(lambda: sum(c for _, _, c in received["PA"].data) == 100, 5, "data the other way")


def test_loss_on_the_udp_path_is_repaired(harness, monkeypatch):
    monkeypatch.setenv("LBTRU_LOSS_RATE", "10")
    acceptor, initiator, received = udp_pair(harness, udp(), udp(), max_queue=64 * 1024 * 1024)
    harness.run_until(lambda: acceptor.link.is_up and initiator.link.is_up, 5, "the link")
    count = 5000
    for n in range(count):
        initiator.link.send_data(data_message(n, 300))
    initiator.link.flush()
    harness.run_until(lambda: sum(c for _, _, c in received["PB"].data) == count, 30, "every message, repaired")
    assert [m.sqn for m in received["PB"].messages()] == list(range(count))
    receive = acceptor.link.udp_path.stats()["receive"]
    assert receive["dgrams_dropped_simulated"] > 0 and receive["naks_sent"] > 0, receive
    assert receive["retransmissions_rcved"] > 0 and receive["lost"] == 0, receive
    assert initiator.link.udp_path.stats()["send"]["rxs_sent"] > 0


def test_both_sides_must_have_a_udp_path(harness, caplog):
    with caplog.at_level("WARNING", logger="router.portals.peer_link"):
        acceptor, initiator, _ = udp_pair(harness, udp(), None, reconnect=5000)
        harness.run_until(lambda: acceptor.link.handshake_failures and initiator.link.handshake_failures, 5,
                          "both ends refusing the handshake")
    assert "this peer portal has a <udp> data path and the companion's has none" in caplog.text
    assert "the companion's peer portal has a <udp> data path and this one has none" in caplog.text
    assert not acceptor.ups and not initiator.ups


def test_a_udp_path_that_closes_takes_the_link_down_and_it_comes_back(harness):
    # The link's keepalive timeout is 5 s here, not this file's 0.6 s: on a loaded machine a
    # stall of the test's loop once let the keepalive time out before the 10 connection requests
    # (50 ms apart) ran out, and the link went down for that reason. Only the requests may here.
    acceptor, initiator, _ = udp_pair(harness, udp(), udp(), reconnect=100, timeout=5000)
    harness.run_until(lambda: acceptor.link.is_up and initiator.link.is_up, 5, "the link")
    # The acceptor's UDP path goes while its TCP stays: its RST makes the initiator connect
    # again, nobody answers, and after <connect max-attempts> the link goes down.
    acceptor.link.udp_path.sender.close_now()
    harness.run_until(lambda: initiator.downs, 5, "the initiator to drop the link")
    assert initiator.downs[0] == "no answer on the UDP path to 10 connection requests", initiator.downs
    harness.run_until(lambda: initiator.counter("link_connects") == 2 and acceptor.link.is_up and initiator.link.is_up,
                      10, "the link to come back with a new UDP path")


def test_a_udp_path_that_goes_silent_takes_the_link_down(harness):
    quiet = {"session_activity_timeout": 600, "session_max_interval": 100}
    acceptor, initiator, _ = udp_pair(harness, udp(**quiet), udp(**quiet), interval=100, timeout=10_000)
    harness.run_until(lambda: acceptor.link.is_up and initiator.link.is_up and initiator.link.udp_path.receiver
                      and initiator.link.udp_path.receiver.connected, 5, "the link and its UDP path connected")
    acceptor.driven = False           # its process hangs: no session messages (its TCP holds 10 s)
    harness.run_until(lambda: initiator.downs, 5, "the initiator to drop the link")
    assert initiator.downs[0] == "nothing heard on the UDP path for 0.6 s", initiator.downs


def test_a_udp_port_in_use_fails_the_handshake_with_the_reason(harness, caplog):
    squatter = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    squatter.bind(("0.0.0.0", 0))
    try:
        with caplog.at_level("WARNING", logger="router.portals.peer_link"):
            acceptor, initiator, _ = udp_pair(harness, udp(squatter.getsockname()[1]), udp(), reconnect=5000)
            harness.run_until(lambda: acceptor.link.handshake_failures, 5, "the acceptor's handshake to fail")
        assert f"cannot open the UDP path on port {squatter.getsockname()[1]}" in caplog.text
        assert acceptor.link.state is LinkState.LISTENING
    finally:
        squatter.close()


def test_the_udp_path_decodes_as_lbtru_carrying_lbmc(harness, tmp_path):
    acceptor_udp, initiator_udp = udp(), udp()
    pcap = tmp_path / "udp-path.pcapng"
    ports = sorted((acceptor_udp.port, initiator_udp.port))
    with LiveCapture(capture_filter=f"udp port {ports[0]} or udp port {ports[1]}", path=pcap) as capture:
        acceptor, initiator, received = udp_pair(harness, acceptor_udp, initiator_udp)
        harness.run_until(lambda: acceptor.link.is_up and initiator.link.is_up, 5, "the link")
        for n in range(200):
            initiator.link.send_data(data_message(n))
        initiator.link.flush()
        harness.run_until(lambda: sum(c for _, _, c in received["PB"].data) == 200, 5, "the data")
    # The initiator sends from its port to the acceptor's: tshark's LBT-RU preferences name the
    # sending (source) port range and the receiving one.
    prefs = [f"lbtru.source_port_low:{initiator_udp.port}", f"lbtru.source_port_high:{initiator_udp.port}",
             f"lbtru.receiver_port_low:{acceptor_udp.port}", f"lbtru.receiver_port_high:{acceptor_udp.port}"]
    rows = decode(pcap, [], prefs, fields=["lbtru.hdr.type", "lbmc.sqn", "udp.srcport"],
                  display_filter=f"lbtru and udp.srcport == {initiator_udp.port} and {capture.not_canary}")
    sqns = sorted(int(sqn) for row in rows for sqn in row.get("lbmc.sqn", []))
    assert sqns == list(range(200))
    warnings = expert_info(pcap, [], prefs, min_severity="warn")
    assert all(row.startswith("Warn/Sequence/LBT-RU: NAK") for row in warnings), warnings


def test_a_message_too_large_for_a_datagram_is_dropped_counted_and_said(harness, caplog):
    acceptor, initiator, received = udp_pair(harness, udp(), udp())
    harness.run_until(lambda: acceptor.link.is_up and initiator.link.is_up, 5, "the link")
    with caplog.at_level("WARNING"):
        # 12 + 65500 bytes: an LBMC message a TCP source may send, larger than 65507 - 20.
        assert not initiator.link.send_data(data_message(0, 65500))
        assert initiator.link.send_data(data_message(1, 100))
        # Pieces whose longest message the caller tells (a ring record's): all fit, or walked.
        assert initiator.link.send_data(encode_lbmc(data_message(2, 100)) + encode_lbmc(data_message(3, 100)), 2,
                                        longest=112)
        assert not initiator.link.send_data(encode_lbmc(data_message(4, 100)) + encode_lbmc(data_message(5, 65500)),
                                            2, longest=65512)
        initiator.link.flush()
        harness.run_until(lambda: len(received["PB"].messages()) == 4, 5, "the messages that fit")
    assert [m.sqn for m in received["PB"].messages()] == [1, 2, 3, 4]
    assert initiator.counter("transport_topic_fragments_dropped_size_error") == 2
    assert initiator.counter("transport_topic_fragment_bytes_dropped_size_error") == 2 * 65512
    assert "1 message(s) larger than a UDP datagram dropped (1 so far)" in caplog.text


def test_a_malformed_message_on_the_udp_path_drops_the_link_cleanly(harness, caplog):
    """A datagram whose LBMC is broken takes the link down (counted, said) and nothing else: the
    socket closed under the read that found it is not read again."""
    acceptor, initiator, _ = udp_pair(harness, udp(), udp(), reconnect=100)
    harness.run_until(lambda: acceptor.link.is_up and initiator.link.is_up and initiator.link.udp_path.receiver
                      and initiator.link.udp_path.receiver.connected, 5, "the link and its UDP path")
    with caplog.at_level("WARNING"):
        initiator.link.udp_path.send_now(b"\x0f\x00\x00\x10" + b"x" * 12)    # unknown LBMC type, 16 bytes
        harness.run_until(lambda: acceptor.downs, 5, "the acceptor to drop the link")
    assert acceptor.downs[0].startswith("malformed UDP datagram"), acceptor.downs
    assert acceptor.counter("link_malformed") == 1
    assert "receive failed" not in caplog.text
    harness.run_until(lambda: acceptor.link.is_up and initiator.link.is_up, 10, "the link back")


def test_a_full_udp_queue_refuses_data_counted_exactly_but_never_a_control_message(harness, caplog):
    """At the peer rate, data beyond <max-queue> is refused (whole messages, each counted once,
    said once per episode); control messages are queued whatever the queue holds, each after the
    data taken before it."""
    acceptor, initiator, received = udp_pair(harness, udp(), udp(rate_limit_data=8_000_000), max_queue=20_000)
    harness.run_until(lambda: acceptor.link.is_up and initiator.link.is_up and acceptor.link.udp_path.receiver
                      and acceptor.link.udp_path.receiver.connected, 5, "the link and its UDP path")
    arrived = lambda: sum(c for _, _, c in received["PB"].data)
    controls: list[tuple[str, int]] = []            # (name, data messages arrived before it)
    acceptor.link.on_message = lambda message: controls.append((message.headers[0].name, arrived()))
    path = initiator.link.udp_path
    taken = refused = 0
    taken_by_round = []
    for round_ in range(3):
        for n in range(200):
            if initiator.link.send_data(data_message(taken, 1000)):
                taken += 1
            else:
                refused += 1
        taken_by_round.append(taken)
        for n in range(100):                         # 100 of 20 bytes: more than the room data left
            assert initiator.link.send_control(LbmcMessage(LBMC_TYPE_CONTROL, [GatewayName(f"c{round_}.{n:02}")]))
        assert path.queued_bytes() > 20_000, "the control messages went beyond <max-queue>"
        with caplog.at_level("INFO"):
            harness.run_until(lambda: caplog.text.count("no longer dropping") == round_ + 1, 10, "the queue to drain")
    harness.run_until(lambda: len(controls) == 300, 10, "every control message")
    harness.run_until(lambda: arrived() == taken, 10, "every data message taken")
    assert [name for name, _ in controls] == [f"c{r}.{n:02}" for r in range(3) for n in range(100)]
    # Each round's control messages came after its data: none overtook it, none was held back.
    assert [controls[r * 100][1] for r in range(3)] == taken_by_round
    assert [m.sqn for m in received["PB"].messages()] == list(range(taken))
    assert 0 < taken_by_round[0] < taken_by_round[1] < taken_by_round[2] < 600
    assert initiator.counter("data_fragments_dropped_would_block") == refused == 600 - taken
    assert initiator.counter("data_fragment_bytes_dropped_would_block") == refused * 1012
    assert initiator.counter("data_fragments_sent") == taken
    assert path.sender.counters["dropped_would_block_frames"] == 0          # refused whole, never dropped later
    assert caplog.text.count("UDP path queue full (20000 bytes at the peer rate limit)") == 3
    assert caplog.text.count("UMR-3001-9: portal PA: UDP path queue drained, no longer dropping") == 3


def test_send_data_is_true_only_when_all_of_a_piece_went_and_counts_each_message(harness):
    """A piece of several messages (a read, a late-join answer behind its address) may go in part
    on the UDP path: send_data says whether all of it went (what a late-join answer is counted
    sent by), and the link counts each message, sent or dropped, either way."""
    acceptor, initiator, received = udp_pair(harness, udp(), udp(rate_limit_data=8_000_000), max_queue=20_000)
    harness.run_until(lambda: acceptor.link.is_up and initiator.link.is_up and acceptor.link.udp_path.receiver
                      and acceptor.link.udp_path.receiver.connected, 5, "the link and its UDP path")
    link = initiator.link
    # Its first message fits a datagram, its second does not (65,512 bytes): one goes, one is dropped.
    assert not link.send_data(encode_lbmc(data_message(0, 100)) + encode_lbmc(data_message(1, 65500)), 2)
    assert initiator.counter("data_fragments_sent") == 1
    assert initiator.counter("transport_topic_fragments_dropped_size_error") == 1
    # Pieces of 10 messages until the queue is full: one is taken in part, the rest refused whole.
    outcomes = []
    for n in range(20):
        before = initiator.counter("data_fragments_sent")
        piece = b"".join(encode_lbmc(data_message(10 * n + k, 1000)) for k in range(10))
        outcomes.append((link.send_data(piece, 10), initiator.counter("data_fragments_sent") - before))
    assert all(went == (sent == 10) for went, sent in outcomes), outcomes
    assert any(0 < sent < 10 for _, sent in outcomes), outcomes
    sent = initiator.counter("data_fragments_sent")
    assert initiator.counter("data_fragments_forwarded") == 2 + 200
    assert sent - 1 + initiator.counter("data_fragments_dropped_would_block") == 200
    harness.run_until(lambda: sum(c for _, _, c in received["PB"].data) == sent, 10, "what was sent")


def test_malformed_and_stray_datagrams_on_the_udp_path_are_counted_and_the_link_kept(harness):
    """Datagrams the path's socket drops (not LBT-RU, from someone other than the companion)
    count in the portal's link_malformed, as the link's other bad input does."""
    acceptor, initiator, received = udp_pair(harness, udp(), udp())
    harness.run_until(lambda: acceptor.link.is_up and initiator.link.is_up and acceptor.link.udp_path.receiver
                      and acceptor.link.udp_path.receiver.connected, 5, "the link and its UDP path")
    stray = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        stray.bind(("127.0.0.2", 0))
        port = acceptor.link.udp_path.port
        stray.sendto(b"\xff" * 40, ("127.0.0.1", port))                                   # not LBT-RU
        stray.sendto(encode_lbtru_ack(acceptor.link.udp_path.session_id, 7, 0), ("127.0.0.1", port))
        harness.run_until(lambda: acceptor.counter("link_malformed") == 2, 5, "both datagrams counted")
    finally:
        stray.close()
    assert initiator.link.send_data(data_message(1))
    initiator.link.flush()
    harness.run_until(lambda: received["PB"].data, 5, "data after the bad datagrams")
    assert acceptor.link.is_up and acceptor.counter("link_disconnects") == 0
