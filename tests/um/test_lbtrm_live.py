"""LBT-RM between real contexts on loopback multicast: order, fragments, loss repaired by NAKs,
sessions that end, proxies' rate limits, and the datagrams as tshark decodes them.

Loss is made by the receiving side (LBTRM_LOSS_RATE, read when a context opens its first
LBT-RM group socket): what it drops it must NAK and get back from the source's window.
"""
from __future__ import annotations

import socket
import time

import pytest

from router.um.context import Context
from router.um.lbtrm_source import LbtrmSourceSession
from router.um.loop import EventLoop
from router.um.wire.lbmc import LBMC_TYPE_MESSAGE, MESSAGE_HEADER, NHDR_DATA
from router.um.wire.lbtrm import NCF_IGNORED, NCF_RX_DELAY, NCF_SHED, LbtrmData, LbtrmNcf, decode_lbtrm, encode_lbtrm_nak
from tests.support.domains import new_domain
from tests.support.processes import wait_for
from tests.support.tshark import LiveCapture, decode, expert_info

pytestmark = pytest.mark.integration


def _contexts(tmp_path, **source_options):
    domain = new_domain(tmp_path)
    options = domain.overrides()
    return domain, Context(**options), Context(transport="lbtrm", **options, **source_options)


def _collect(receiver_context, topic):
    got, events = [], []
    receiver_context.receiver(topic, on_batch=lambda ms: got.extend((m.sequence_number, m.data) for m in ms),
                              on_event=lambda e: events.append(e.kind))
    return got, events


def _send_when_joined(source, receiver_context, payloads):
    wait_for(lambda: receiver_context.clients, 10, message="the receiver joins the LBT-RM session")
    for payload in payloads:
        source.send(payload)
    source.flush()


def test_messages_and_fragments_arrive_in_order_through_loss(tmp_path, monkeypatch):
    monkeypatch.setenv("LBTRM_LOSS_RATE", "10")
    domain, receiving, sending = _contexts(tmp_path)
    with receiving, sending:
        got, _ = _collect(receiving, "rm.loss")
        source = sending.source("rm.loss")
        # Small messages batched into datagrams, and messages larger than a datagram (8192 bytes)
        # in FRAG fragments: every one must come back whole, in order.
        payloads = [bytes([i % 251]) * (20_000 if i % 50 == 7 else 100 + i % 300) for i in range(3000)]
        _send_when_joined(source, receiving, payloads)
        wait_for(lambda: len(got) == len(payloads), 60, message="every message, repaired")
        stream = next(iter(receiving.clients.values()))
        counters, session = stream.counters, source.session.counters
        # A NAK repeated just before the repair came may still be on its way to the source.
        wait_for(lambda: session["naks_rcved"] >= counters["naks_sent"] - session["naks_shed"], 10,
                 message="every NAK sent heard or shed")
    assert [data for _, data in got] == payloads
    assert [sqn for sqn, _ in got] == sorted(sqn for sqn, _ in got)
    assert counters["naks_sent"] > 0 and counters["retransmissions_rcved"] > 0, counters
    assert counters["lost"] == 0 and counters["malformed"] == 0, counters
    assert counters["reassembled"] == sum(1 for p in payloads if len(p) > 8192)
    assert session["rxs_sent"] > 0 and session["naks_rcved"] >= counters["naks_sent"] - session["naks_shed"]


def test_a_source_that_goes_silent_ends_after_the_activity_timeout(tmp_path):
    domain = new_domain(tmp_path)
    options = domain.overrides()
    with Context(transport_lbtrm_activity_timeout=800, **options) as receiving:
        got, events = _collect(receiving, "rm.gone")
        sending = Context(transport="lbtrm", **options)
        source = sending.source("rm.gone")
        _send_when_joined(source, receiving, [b"one", b"two"])
        wait_for(lambda: len(got) == 2, 10, message="the two messages")
        sending.close()              # no final advertisement: only the silence tells
        wait_for(lambda: "EOS" in events, 10, message="EOS after the activity timeout")
    assert events == ["BOS", "EOS"]


def test_a_proxy_sessions_rate_holds_back_then_drops_beyond_its_queue(tmp_path):
    """A router's proxy source (overflow "drop") never blocks its loop: what the data rate holds
    back waits in a queue of max_queue bytes, and what does not fit is counted as dropped."""
    domain = new_domain(tmp_path)
    loop = EventLoop("rate")
    loop.start_thread()
    try:
        session = LbtrmSourceSession(loop, "127.0.0.1", domain.lbtrm_group, domain.port, domain.tcp_low, domain.tcp_high,
                                     data_rate_limit=80_000, rate_interval=0.1, datagram_max_size=1400,
                                     overflow="drop", max_queue=20_000, batching_minimum_length=1)
        frame = MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, 1000, 1, 0) + bytes(1000 - MESSAGE_HEADER.size)
        started = time.monotonic()
        for _ in range(40):
            loop.call_and_wait(session.send_raw, frame, None, 1, True)
        assert time.monotonic() - started < 5, "sending never waited for the rate"
        counters = session.counters
        assert counters["dropped_would_block_batches"] > 0
        accounted = loop.call_and_wait(lambda: counters["msgs_sent"] + counters["dropped_would_block_batches"]
                                       + len(session.pending))
        assert accounted == 40
        wait_for(lambda: not session.pending, 20, message="the queue drains at the rate")
        assert counters["msgs_sent"] + counters["dropped_would_block_batches"] == 40
    finally:
        loop.call_and_wait(session.close)
        loop.stop()


def test_no_free_source_port_is_a_clear_error(tmp_path):
    domain = new_domain(tmp_path)
    options = {**domain.overrides(), "transport_lbtrm_source_port_high": domain.tcp_low}
    with Context(transport="lbtrm", **options) as first, Context(transport="lbtrm", **options) as second:
        first.source("rm.port")
        with pytest.raises(OSError, match=f"no free LBT-RM source port in {domain.tcp_low}..{domain.tcp_low}"):
            second.source("rm.port")


def test_the_session_on_the_wire_with_loss(tmp_path, monkeypatch):
    """Data, session messages, NAKs and retransmissions as tshark decodes them: every DATA
    sequence number once as sent, each NAKed one retransmitted with the RX flag, and no expert
    warning but the dissector's own "NAK" marker on each NAK."""
    monkeypatch.setenv("LBTRM_LOSS_RATE", "20")
    domain, receiving, sending = _contexts(tmp_path)
    pcap = tmp_path / "session.pcapng"
    with receiving, sending:
        got, _ = _collect(receiving, "rm.wire")
        source = sending.source("rm.wire")
        with LiveCapture(capture_filter=f"udp and (dst host {domain.lbtrm_group} or "
                                        f"dst portrange {domain.tcp_low}-{domain.tcp_high})", path=pcap) as capture:
            _send_when_joined(source, receiving, [b"%05d" % i * 40 for i in range(400)])
            wait_for(lambda: len(got) == 400, 30, message="every message, repaired")
            stream = next(iter(receiving.clients.values()))
            wait_for(lambda: stream.counters["sms_rcved"] > 0, 10, message="a session message")
    prefs, decode_as = domain.lbtrm_prefs(), domain.lbtrm_decode_as()
    frames = decode(pcap, decode_as, prefs, fields=["lbtrm.hdr.type", "lbtrm.data.sqn", "lbtrm.data.flags_fec_type.rx",
                                             "lbtrm.nak.list.nak"], display_filter=f"lbtrm and {capture.not_canary}")
    kinds = [int(f["lbtrm.hdr.type"][0], 0) for f in frames]
    assert {0, 2, 3} <= set(kinds), kinds                         # DATA, SM, NAK (NCFs only if refused)
    originals = [int(f["lbtrm.data.sqn"][0], 0) for f in frames
                 if "lbtrm.data.sqn" in f and f["lbtrm.data.flags_fec_type.rx"] in (["0"], ["False"])]
    retransmitted = {int(f["lbtrm.data.sqn"][0], 0) for f in frames
                     if "lbtrm.data.sqn" in f and f["lbtrm.data.flags_fec_type.rx"] in (["1"], ["True"])}
    naked = {int(sqn, 0) for f in frames for sqn in f.get("lbtrm.nak.list.nak", [])}
    assert originals == list(range(len(originals))), "each datagram sent once, in order"
    assert naked and naked <= retransmitted, (naked, retransmitted)
    rows = expert_info(pcap, decode_as, prefs, min_severity="warn")
    assert all(row.startswith("Warn/Sequence/LBT-RM: NAK") for row in rows), rows


def test_naks_beyond_the_retransmit_rate_wait_or_are_shed_and_the_ncfs_say_which(tmp_path):
    """A burst of NAKs larger than the retransmit rate allows: the first retransmissions go at
    once, up to a second's worth wait for the rate (NCF "rx delay", then they come), the rest are
    refused (NCF "shed"), and a NAK for one already on its way is "ignored"."""
    domain = new_domain(tmp_path)
    group, port = domain.lbtrm_group, domain.port
    loop = EventLoop("naks")
    loop.start_thread()
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((group, port))
    listener.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton(group) + socket.inet_aton("127.0.0.1"))
    listener.settimeout(0.2)
    nak_sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    session = LbtrmSourceSession(loop, "127.0.0.1", group, port, domain.tcp_low, domain.tcp_high, data_rate_limit=0,
                                 retransmit_rate_limit=8 * 20_000, rate_interval=0.1, datagram_max_size=1400,
                                 batching_minimum_length=1)
    try:
        frame = MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, 1000, 1, 0) + bytes(1000 - MESSAGE_HEADER.size)
        for _ in range(40):
            loop.call_and_wait(session.send_raw, frame, None, 1, True)
        source_address = ("127.0.0.1", session.port)
        nak_sender.sendto(encode_lbtrm_nak(session.session_id, session.port, range(40)), source_address)
        # Sequence number 1 waits for the rate (0 went at once): asked for again, it is on its way.
        nak_sender.sendto(encode_lbtrm_nak(session.session_id, session.port, [1]), source_address)
        retransmitted, ncfs = set(), {}
        deadline = time.monotonic() + 20
        counters = session.counters
        while time.monotonic() < deadline:
            try:
                packet = decode_lbtrm(listener.recv(65536))
            except socket.timeout:
                if ncfs and counters["rxs_sent"] == len(retransmitted) and not session.rx_delayed:
                    break
                continue
            if isinstance(packet, LbtrmNcf):
                ncfs.setdefault(packet.reason, set()).update(packet.sqns)
            elif isinstance(packet, LbtrmData) and packet.retransmission:
                retransmitted.add(packet.sqn)
        delayed, shed = ncfs.get(NCF_RX_DELAY, set()), ncfs.get(NCF_SHED, set())
        assert delayed and shed, ncfs
        assert delayed | shed | retransmitted == set(range(40)) and not delayed & shed
        assert delayed <= retransmitted and not shed & retransmitted, "what waited came; what was shed did not"
        assert counters["rxs_delayed"] == len(delayed) and counters["naks_shed"] == len(shed)
        assert 1 in delayed and ncfs.get(NCF_IGNORED) == {1} and counters["naks_ignored"] == 1
    finally:
        loop.call_and_wait(session.close)
        loop.stop()
        listener.close()
        nak_sender.close()
