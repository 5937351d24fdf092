"""LBT-RU between real contexts on loopback: connections (CREQ, SM SYN, ACK, RST), order,
fragments, loss repaired by NAKs, several receivers on one session, sources that go away or never
answer, receivers the source forgets, held data for a late receiver, malformed datagrams, and the
session as tshark decodes it.

Loss is made by the receiving side (LBTRU_LOSS_RATE, read when a context opens its LBT-RU
receiving socket, i.e. when it joins its first LBT-RU source): what it drops it must NAK and get
back from the source's transmission window. Where a test needs to be a receiver the source has
never seen (or one that went quiet), it is a plain UDP socket speaking the wire codec.
"""
from __future__ import annotations

import logging
import socket
import threading
import time

import pytest

from router.um.context import Context
from router.um.lbtru_receiver import LbtruPort, LbtruSessionClient
from router.um.lbtru_source import LbtruSourceSession
from router.um.loop import EventLoop
from router.um.repairing_source import NCF_NO_RETRY, WINDOW_ENTRY_OVERHEAD
from router.um.wire.lbtru import (FLAG_RETRANSMISSION, LbtruCreq, LbtruData, LbtruNak, LbtruNcf, LbtruRst, LbtruSm,
                                  decode_lbtru, encode_lbtru_ack, encode_lbtru_creq, encode_lbtru_data,
                                  encode_lbtru_nak, encode_lbtru_ncf, encode_lbtru_rst, encode_lbtru_sm)
from router.um.wire.errors import WireError
from router.um.wire.lbmc import LBMC_TYPE_MESSAGE, MESSAGE_HEADER, NHDR_DATA
from tests.support.decoded_data import record_decoded_data
from tests.support.domains import new_domain
from tests.support.processes import wait_for
from tests.support.tshark import LiveCapture, decode, expert_info

pytestmark = pytest.mark.integration

SOURCE_LOG = "router.um.lbtru_source"
RECEIVER_LOG = "router.um.lbtru_receiver"


# -- helpers -------------------------------------------------------------------------------------
def _collect(receiver_context, topic):
    got, events = [], []
    receiver_context.receiver(topic, on_batch=lambda ms: got.extend((m.sequence_number, m.data) for m in ms),
                              on_event=lambda e: events.append(e.kind))
    return got, events


def _send_when_connected(source, payloads, receivers: int = 1):
    """Send once `receivers` receivers have connected (CREQ answered): before that the session
    sends its data to nobody."""
    wait_for(lambda: source.receiver_count >= receivers, 10,
             message=f"{receivers} receiver(s) connected to the LBT-RU session")
    for payload in payloads:
        source.send(payload)
    source.flush()


def _stream(context):
    """The context's one joined LBT-RU session."""
    wait_for(lambda: context.clients, 10, message="the receiving context joins the LBT-RU session")
    (stream,) = context.clients.values()
    assert isinstance(stream, LbtruSessionClient)
    return stream


def _raw_socket():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.1)
    return sock


def _receive(sock, kind, timeout: float = 5.0, where: list | None = None):
    """The first datagram on `sock` that decodes to a `kind` packet, within `timeout` seconds;
    what else arrives (session messages, say) is put in `where` if given."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            datagram, _ = sock.recvfrom(65536)
        except socket.timeout:
            continue
        packet = decode_lbtru(datagram)
        if isinstance(packet, kind):
            return packet
        if where is not None:
            where.append(packet)
    raise AssertionError(f"no {kind.__name__} within {timeout} s (besides: {where})")


def _receive_syn(sock, timeout: float = 5.0) -> LbtruSm:
    """The next SM SYN on `sock` (periodic session messages may come before it)."""
    deadline = time.monotonic() + timeout
    while True:
        sm = _receive(sock, LbtruSm, max(0.1, deadline - time.monotonic()))
        if sm.syn:
            return sm
        if time.monotonic() > deadline:
            raise AssertionError(f"no SM SYN within {timeout} s")


def _payloads(count: int, big_every: int = 0, big: int = 20_000) -> list[bytes]:
    """Small messages (batched into datagrams) and, every `big_every`, one of `big` bytes: more
    than a datagram (8192 bytes), so it goes in FRAG fragments."""
    return [bytes([i % 251]) * (big if big_every and i % big_every == 7 else 100 + i % 300) for i in range(count)]


# -- delivery ------------------------------------------------------------------------------------
def test_messages_and_fragments_arrive_whole_and_in_order_through_loss(tmp_path, monkeypatch):
    monkeypatch.setenv("LBTRU_LOSS_RATE", "10")
    domain = new_domain(tmp_path)
    options = domain.overrides()
    payloads = _payloads(1200, big_every=40)
    with Context(**options) as receiving, Context(transport="lbtru", **options) as sending:
        got, events = _collect(receiving, "ru.loss")
        source = sending.source("ru.loss")
        _send_when_connected(source, payloads)
        wait_for(lambda: len(got) == len(payloads), 60, message="every message, repaired")
        stream = _stream(receiving)
        # A NAK repeated just before the repair came may still be on its way to the source.
        live = source.session.counters
        wait_for(lambda: live["naks_rcved"] >= stream.counters["naks_sent"] - live["naks_shed"], 10,
                 message="every NAK sent heard or shed")
        counters, port = dict(stream.counters), dict(receiving.lbtru_port.counters)
        session = dict(source.session.counters)
        assert events == ["BOS"]
    assert [data for _, data in got] == payloads
    sqns = [sqn for sqn, _ in got]
    assert sqns == sorted(set(sqns)), "in order, each once"        # a fragmented message takes one per fragment
    assert port["dgrams_dropped_simulated"] > 0, port
    assert counters["naks_sent"] > 0 and counters["nak_pckts_sent"] > 0, counters
    assert counters["retransmissions_rcved"] > 0, counters
    assert counters["lost"] == 0 and counters["malformed"] == 0 and counters["fragments_expired"] == 0, counters
    assert counters["reassembled"] == sum(1 for p in payloads if len(p) > 8192), counters
    assert counters["connects"] == 1 and counters["rsts_rcved"] == 0, counters
    assert session["rxs_sent"] > 0 and session["nak_pckts_rcved"] > 0, session
    assert session["naks_rcved"] >= counters["naks_sent"] - session["naks_shed"], (session, counters)
    assert session["clients_connected"] == 1 and session["malformed"] == 0, session


def test_two_receiving_contexts_on_one_source_both_get_everything(tmp_path):
    domain = new_domain(tmp_path)
    options = domain.overrides()
    payloads = _payloads(300, big_every=100)
    with Context(**options) as first, Context(**options) as second, \
            Context(transport="lbtru", **options) as sending:
        got1, _ = _collect(first, "ru.two")
        got2, _ = _collect(second, "ru.two")
        source = sending.source("ru.two")
        _send_when_connected(source, payloads, receivers=2)
        wait_for(lambda: len(got1) == len(got2) == len(payloads), 30, message="both receivers get every message")
        assert source.receiver_count == 2
        session = dict(source.session.counters)
        streams = [_stream(first), _stream(second)]
        assert streams[0].client_id != streams[1].client_id
        addresses = set(source.session.clients)
        assert addresses == {("127.0.0.1", first.lbtru_port.port), ("127.0.0.1", second.lbtru_port.port)}
    assert [d for _, d in got1] == payloads and [d for _, d in got2] == payloads
    assert session["clients_connected"] == 2 and session["creqs_rcved"] >= 2, session


# -- connections ---------------------------------------------------------------------------------
def test_a_creq_is_answered_with_an_sm_syn_and_acks_keep_a_receiver_connected(tmp_path):
    """A raw CREQ gets an SM SYN naming the session, whose lead is the last sequence number sent:
    the next DATA follows it. A real receiver's ACKs reach the source and keep it remembered well
    past the client activity timeout while no data flows."""
    domain = new_domain(tmp_path)
    options = domain.overrides()
    raw = _raw_socket()
    with raw, Context(transport="lbtru", transport_lbtru_client_activity_timeout=500, **options) as sending:
        source = sending.source("ru.syn")
        session = source.session
        for i in range(3):                          # sent to nobody: three datagrams
            source.send(b"before %d" % i, flush=True)
        wait_for(lambda: session.next_sqn == 3, 10, message="three datagrams sent")
        address = ("127.0.0.1", session.port)
        raw.sendto(encode_lbtru_creq(session.session_id, 0xC0FFEE), address)
        syn = _receive(raw, LbtruSm)
        assert syn.syn and syn.session_id == session.session_id, syn
        assert (syn.lead_sqn, syn.trail_sqn) == (2, 0), syn
        assert source.receiver_count == 1
        source.send(b"after", flush=True)
        data = _receive(raw, LbtruData)
        assert data.session_id == session.session_id and data.sqn == syn.lead_sqn + 1 and not data.retransmission
        assert bytes(data.payload).endswith(b"after")
        # Its SYN went missing: it asks again, and is answered again, still one receiver.
        raw.sendto(encode_lbtru_creq(session.session_id, 0xC0FFEE), address)
        again = _receive_syn(raw)
        assert again.lead_sqn == 3 and again.session_id == session.session_id
        assert source.receiver_count == 1 and session.counters["clients_connected"] == 1

        with Context(**options) as receiving:
            got, _ = _collect(receiving, "ru.syn")
            wait_for(lambda: source.receiver_count == 2, 10, message="the real receiver connects")
            stream = _stream(receiving)
            # The raw receiver, silent since its CREQ, is forgotten after the 500 ms activity
            # timeout; the real one, sending nothing but ACKs (100 ms apart), stays.
            raw_address = ("127.0.0.1", raw.getsockname()[1])
            wait_for(lambda: raw_address not in session.clients, 10, message="the silent raw receiver is forgotten")
            acks = session.counters["acks_rcved"]
            wait_for(lambda: session.counters["acks_rcved"] >= acks + 6, 10, message="ACKs reach the source")
            # Every ACK the source counted was sent by this receiver; its loop counts one just after
            # sending it, so the source can count it first (it did, in one CI run): waited for.
            received = session.counters["acks_rcved"]
            wait_for(lambda: stream.counters["acks_sent"] >= received, 10, message="the ACKs counted as sent")
            assert stream.connected
            assert list(session.clients) == [("127.0.0.1", receiving.lbtru_port.port)]
            assert session.counters["clients_timed_out"] == 1 and source.receiver_count == 1
            source.send(b"for the real one", flush=True)
            wait_for(lambda: got, 10, message="data for the real receiver")
            assert [d for _, d in got] == [b"for the real one"]
            assert stream.counters["rsts_rcved"] == 0 and stream.counters["connects"] == 1


def test_the_window_limit_counts_what_each_kept_datagram_costs(tmp_path):
    """transport_lbtru_transmission_window_limit bounds the memory the transmission window takes:
    each kept datagram costs its bytes and WINDOW_ENTRY_OVERHEAD, so small datagrams leave the
    window long before transmission_window_size bytes of them; a NAK for one that left gets NCF
    "no retry", one for a datagram still kept its retransmission."""
    domain = new_domain(tmp_path)
    count, length = 1000, 150
    limit = 100 * (WINDOW_ENTRY_OVERHEAD + length)
    raw = _raw_socket()
    with raw, Context(transport="lbtru", transport_lbtru_transmission_window_limit=limit,
                      **domain.overrides()) as sending:
        source = sending.source("ru.window")
        session = source.session
        for _ in range(count):                          # to nobody: the window keeps them all the same
            source.send(bytes(length), flush=True)
        wait_for(lambda: session.next_sqn == count, 10, message="every datagram sent")
        with session.window_lock:
            kept = list(session.window)
            cost = session.window_footprint()
            one = len(session.window[kept[-1]]) + WINDOW_ENTRY_OVERHEAD
        assert kept == list(range(count - len(kept), count)), "the newest are kept"
        assert cost <= limit < cost + one, (len(kept), cost, limit)
        assert session.window_bytes < session.window_size / 1000, "the limit let them go, not the size"
        address = ("127.0.0.1", session.port)
        raw.sendto(encode_lbtru_creq(session.session_id, 5), address)
        assert _receive_syn(raw).lead_sqn == count - 1
        raw.sendto(encode_lbtru_nak(session.session_id, 5, [0]), address)
        ncf = _receive(raw, LbtruNcf)
        assert ncf.sqns == (0,) and ncf.reason == NCF_NO_RETRY, ncf
        raw.sendto(encode_lbtru_nak(session.session_id, 5, [count - 1]), address)
        repaired = _receive(raw, LbtruData)
        assert repaired.sqn == count - 1 and repaired.retransmission


def test_a_silent_receiver_is_forgotten_and_then_reset(tmp_path, caplog):
    """A receiver that connected and then went quiet (no ACK, no RST: a raw socket) is forgotten
    after transport_lbtru_client_activity_timeout; a NAK or ACK from it then is answered with an
    RST, as is a request for a session this port does not have."""
    caplog.set_level(logging.INFO, logger=SOURCE_LOG)
    domain = new_domain(tmp_path)
    options = domain.overrides()
    raw = _raw_socket()
    with raw, Context(transport="lbtru", transport_lbtru_client_activity_timeout=300, **options) as sending:
        source = sending.source("ru.quiet")
        session = source.session
        address = ("127.0.0.1", session.port)
        raw.sendto(encode_lbtru_creq(session.session_id, 77), address)
        assert _receive(raw, LbtruSm).syn
        assert source.receiver_count == 1
        wait_for(lambda: source.receiver_count == 0, 10, message="the silent receiver is forgotten")
        assert session.counters["clients_timed_out"] == 1 and not session.clients
        assert any("silent for" in r.getMessage() for r in caplog.records if r.name == SOURCE_LOG)

        rsts = session.counters["rsts_sent"]
        raw.sendto(encode_lbtru_nak(session.session_id, 77, [0]), address)
        assert _receive(raw, LbtruRst) == LbtruRst()
        raw.sendto(encode_lbtru_ack(session.session_id, 77, 0), address)
        assert _receive(raw, LbtruRst) == LbtruRst()
        raw.sendto(encode_lbtru_ack(session.session_id ^ 1, 77, 0), address)   # another session's
        assert _receive(raw, LbtruRst) == LbtruRst()
        wait_for(lambda: session.counters["rsts_sent"] == rsts + 3, 5, message="three RSTs counted")
        assert session.counters["rxs_sent"] == 0, "a forgotten receiver's NAK is not answered with data"

        # Connecting again works: it is a receiver again.
        raw.sendto(encode_lbtru_creq(session.session_id, 78), address)
        assert _receive_syn(raw).session_id == session.session_id
        assert source.receiver_count == 1 and session.counters["clients_connected"] == 2


def test_a_receiver_the_source_forgot_is_reset_connects_again_and_repairs_what_it_missed(tmp_path):
    """The receiving context's loop stalls (its ACKs stop) past the source's client activity
    timeout: the source forgets it and sends on to nobody. Its next ACK is answered with an RST;
    it connects again, the SM SYN's lead shows what it missed, and NAKs get it back."""
    domain = new_domain(tmp_path)
    options = domain.overrides()
    first, missed = [b"first %d" % i for i in range(20)], [b"missed %d" % i for i in range(20)]
    gate = threading.Event()
    with Context(**options) as receiving, \
            Context(transport="lbtru", transport_lbtru_client_activity_timeout=500, **options) as sending:
        got, events = _collect(receiving, "ru.forgot")
        source = sending.source("ru.forgot")
        session = source.session
        try:
            _send_when_connected(source, first)
            wait_for(lambda: len(got) == len(first), 10, message="the first messages")
            stream = _stream(receiving)
            receiving.loop.call_soon_threadsafe(gate.wait, 20)          # the receiver stalls
            wait_for(lambda: source.receiver_count == 0, 10, message="the stalled receiver is forgotten")
            for payload in missed:
                source.send(payload, flush=True)                        # to nobody
            assert len(got) == len(first)
        finally:
            gate.set()
        wait_for(lambda: len(got) == len(first) + len(missed), 20, message="the missed messages, repaired")
        counters, session_counters = dict(stream.counters), dict(session.counters)
        assert source.receiver_count == 1 and stream.connected and events == ["BOS"]
    assert [d for _, d in got] == first + missed
    assert counters["rsts_rcved"] >= 1 and counters["connects"] == 2, counters
    assert counters["naks_sent"] >= len(missed) and counters["retransmissions_rcved"] >= len(missed), counters
    assert counters["lost"] == 0, counters
    assert session_counters["clients_timed_out"] == 1 and session_counters["rsts_sent"] >= 1, session_counters
    assert session_counters["clients_connected"] == 2, session_counters


def test_one_receiving_port_serves_two_sources_and_one_ending_leaves_the_other(tmp_path):
    domain = new_domain(tmp_path)
    options = domain.overrides()
    with Context(transport_lbtru_connect_interval=50, transport_lbtru_maximum_connect_attempts=3,
                 **options) as receiving, Context(transport="lbtru", **options) as other:
        got_a, events_a = _collect(receiving, "ru.a")
        got_b, events_b = _collect(receiving, "ru.b")
        source_b = other.source("ru.b")
        with Context(transport="lbtru", **options) as sending:
            source_a = sending.source("ru.a")
            assert source_a.session.port != source_b.session.port
            _send_when_connected(source_a, [b"a1"])
            _send_when_connected(source_b, [b"b1"])
            wait_for(lambda: got_a and got_b, 10, message="both sources' messages")
            wait_for(lambda: len(receiving.clients) == 2, 10, message="two sessions")
            port = receiving.lbtru_port
            assert {stream.port for stream in receiving.clients.values()} == {port}
        wait_for(lambda: "EOS" in events_a, 10, message="source a's EOS")
        source_b.send(b"b2", flush=True)
        wait_for(lambda: len(got_b) == 2, 10, message="source b goes on")
        assert receiving.lbtru_port is port and port.sock is not None and len(receiving.clients) == 1
    assert [d for _, d in got_a] == [b"a1"] and [d for _, d in got_b] == [b"b1", b"b2"]
    assert events_a == ["BOS", "EOS"] and events_b == ["BOS"]


def test_a_receiver_whose_source_closes_gets_eos_after_its_connection_attempts(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=RECEIVER_LOG)
    domain = new_domain(tmp_path)
    options = domain.overrides()
    with Context(transport_lbtru_connect_interval=50, transport_lbtru_maximum_connect_attempts=5,
                 **options) as receiving:
        got, events = _collect(receiving, "ru.gone")
        with Context(transport="lbtru", **options) as sending:
            source = sending.source("ru.gone")
            _send_when_connected(source, [b"one", b"two"])
            wait_for(lambda: len(got) == 2, 10, message="the two messages")
            stream = _stream(receiving)
            creqs = stream.counters["creqs_sent"]
            assert stream.connected
        # The source sent an RST as it closed (no final advertisement: resolver_send_final_advertisements 0);
        # the receiver asks to connect again five times, 50 ms apart, and nobody answers.
        wait_for(lambda: "EOS" in events, 10, message="EOS after the connection attempts")
        counters = dict(stream.counters)
        assert stream.closed and not receiving.clients
    assert events == ["BOS", "EOS"]
    assert [d for _, d in got] == [b"one", b"two"]
    assert counters["rsts_rcved"] >= 1, counters
    assert counters["creqs_sent"] == creqs + 5, counters
    warnings = [r.getMessage() for r in caplog.records if r.name == RECEIVER_LOG and r.levelno == logging.WARNING]
    assert any(stream.description in m and "no answer to 5 connection requests" in m for m in warnings), warnings


def _end_with_final_advertisements(tmp_path, monkeypatch):
    """A source that closes with final advertisements, its receiver losing 20%: (messages sent,
    messages received, events, the stream's counters when EOS came)."""
    monkeypatch.setenv("LBTRU_LOSS_RATE", "20")
    domain = new_domain(tmp_path)
    options = domain.overrides()
    payloads = [b"%05d" % i * 50 for i in range(300)]
    got, events, at_eos = [], [], {}

    def on_event(event):
        events.append(event.kind)
        if event.kind == "EOS" and stream_of:
            at_eos.update(stream_of[0].counters)
    stream_of = []
    with Context(**options) as receiving:
        receiving.receiver("ru.final", on_batch=lambda ms: got.extend(m.data for m in ms), on_event=on_event)
        with Context(transport="lbtru", **options) as sending:
            source = sending.source("ru.final", final_advertisements=2)
            stream_of.append(_stream(receiving))
            _send_when_connected(source, payloads)
            # The session closes with its last source and answers no NAK after that (as an
            # application that deletes its source at once): the repairs come first.
            wait_for(lambda: len(got) == len(payloads), 10, message="every message, lost ones repaired")
            source.close()
            wait_for(lambda: "EOS" in events, 10, message="EOS after the final advertisements")
    return payloads, got, events, at_eos


def test_final_advertisements_end_the_stream_once_what_was_lost_is_repaired(tmp_path, monkeypatch):
    payloads, got, events, at_eos = _end_with_final_advertisements(tmp_path, monkeypatch)
    assert got == payloads and events == ["BOS", "EOS"]
    assert at_eos["naks_sent"] > 0 and at_eos["lost"] == 0, at_eos
    assert at_eos["rsts_rcved"] == 0, "EOS came from the final advertisements, before the source's RST"


def test_a_stream_ended_by_a_datagram_closes_its_port_without_a_receive_error(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.WARNING)
    payloads, got, events, _ = _end_with_final_advertisements(tmp_path, monkeypatch)
    assert got == payloads and events == ["BOS", "EOS"]
    errors = [r.getMessage() for r in caplog.records if "receive failed" in r.getMessage()]
    assert errors == [], errors


def test_a_source_that_never_answers_is_given_up_after_the_connection_attempts(tmp_path, caplog):
    """A session client pointed at a UDP port where nobody answers: five CREQs, 50 ms apart, then
    the stream ends, with a warning naming the session; the context's port closes with it."""
    caplog.set_level(logging.INFO, logger=RECEIVER_LOG)
    domain = new_domain(tmp_path)
    silent = _raw_socket()
    loop = EventLoop("silent")
    loop.start_thread()
    closed, emptied = [], []
    try:
        port = loop.call_and_wait(LbtruPort, loop, "127.0.0.1", domain.request_low, domain.request_high, 65536,
                                  emptied.append)
        silent_port = silent.getsockname()[1]
        client = loop.call_and_wait(lambda: LbtruSessionClient(
            loop, port, "127.0.0.1", silent_port, 0x5EED, closed.append, connect_interval=0.05,
            maximum_connect_attempts=5, acknowledgement_interval=0.05))
        wait_for(lambda: closed, 10, message="the session client gives up")
        creqs = []
        deadline = time.monotonic() + 2
        while len(creqs) < 5 and time.monotonic() < deadline:
            try:
                datagram, sender = silent.recvfrom(65536)
            except socket.timeout:
                continue
            creqs.append((decode_lbtru(datagram), sender))
        assert closed == [client] and client.closed and not client.connected
        assert client.counters["creqs_sent"] == 5 and client.attempts == 5, client.counters
        assert [packet for packet, _ in creqs] == [LbtruCreq(0x5EED, client.client_id)] * 5
        assert {sender for _, sender in creqs} == {("127.0.0.1", port.port)}, "CREQs come from the context's port"
        assert emptied == [port] and port.sock is None
        warnings = [r.getMessage() for r in caplog.records
                    if r.name == RECEIVER_LOG and r.levelno == logging.WARNING]
        assert warnings == [f"LBT-RU session 127.0.0.1:{silent_port}:00005EED: no answer to 5 connection "
                            "requests; ended"], warnings
    finally:
        loop.close()
        silent.close()


class _RawSource:
    """A plain UDP socket playing an LBT-RU source, and a session client of the receiving side's
    port (on its own loop) joined to it and connected."""

    SESSION_ID = 0x5EED

    def __init__(self, domain, **client_options):
        self.sock = _raw_socket()
        self.loop = EventLoop("raw-source")
        self.loop.start_thread()
        self.closed_at: list[float] = []
        self.port = self.loop.call_and_wait(LbtruPort, self.loop, "127.0.0.1", domain.request_low,
                                            domain.request_high, 65536, lambda _: None)
        self.client = self.loop.call_and_wait(lambda: LbtruSessionClient(
            self.loop, self.port, "127.0.0.1", self.sock.getsockname()[1], self.SESSION_ID,
            lambda _: self.closed_at.append(time.monotonic()), **client_options))
        _receive(self.sock, LbtruCreq)
        self.send(encode_lbtru_sm(self.SESSION_ID, 0, 0, 0, syn=True))      # its stream starts at 1
        wait_for(lambda: self.client.connected, 10, message="the session client connects")

    def send(self, datagram: bytes) -> None:
        self.sock.sendto(datagram, ("127.0.0.1", self.port.port))

    def send_data(self, sqn: int) -> None:
        frame = MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, MESSAGE_HEADER.size + 4, 1, sqn) + b"data"
        self.send(encode_lbtru_data(self.SESSION_ID, sqn, frame, trail_sqn=1))

    def counters(self) -> dict:
        return self.loop.call_and_wait(lambda: dict(self.client.counters))

    def close(self) -> None:
        self.loop.call_and_wait(self.client.close)
        self.loop.close()
        self.sock.close()


@pytest.fixture
def raw_source(tmp_path):
    made = []

    def make(**client_options) -> _RawSource:
        made.append(_RawSource(new_domain(tmp_path), **client_options))
        return made[-1]
    yield make
    for each in made:
        each.close()


def test_after_a_reset_the_connection_attempts_take_their_configured_time(raw_source):
    """An RST (the source forgot this receiver) makes the receiver connect again: a request at
    once, the next ones transport_lbtru_connect_interval apart, and it gives up no sooner than
    its transport_lbtru_maximum_connect_attempts take, not at the next tick of a timer that ran
    from when it first connected (which may come a moment after that first request)."""
    interval, attempts = 1.0, 2
    source = raw_source(connect_interval=interval, maximum_connect_attempts=attempts,
                        acknowledgement_interval=interval / 4)
    client = source.client
    # Half a connect interval after the client started (its connection and ack timers started with it).
    wait_for(lambda: client.counters["acks_sent"] >= 2, 10, message="two acknowledgements")
    creqs = client.counters["creqs_sent"]
    reset_at = time.monotonic()
    source.send(encode_lbtru_rst())
    wait_for(lambda: source.closed_at, 10 + attempts * interval, message="the client gives up")
    counters = source.counters()
    assert counters["rsts_rcved"] == 1 and counters["creqs_sent"] == creqs + attempts, counters
    assert source.closed_at[0] - reset_at >= attempts * interval, "gave up before its attempts' time"


@pytest.mark.parametrize("forged", ["DATA", "SM"])
def test_a_lead_no_source_could_have_reached_is_dropped_as_malformed_and_the_session_goes_on(raw_source, forged):
    """A datagram of the session claiming a sequence number about 2^31 beyond the last one (corrupt
    or forged) is counted as malformed: it declares nothing lost, sends no NAK, and what the
    source sends next is delivered."""
    source = raw_source(acknowledgement_interval=0.05)
    source.send_data(1)
    source.send_data(2)
    wait_for(lambda: source.counters()["msgs_rcved"] == 2, 10, message="the first two datagrams")
    far = 2 + (1 << 31) - 1
    if forged == "DATA":
        source.send_data(far)
    else:
        source.send(encode_lbtru_sm(source.SESSION_ID, 1, far, 1))
    source.send_data(3)
    wait_for(lambda: source.counters()["msgs_rcved"] == 3 or source.counters()["duplicate_data"], 10,
             message="the datagram after the forged one")
    counters = source.counters()
    assert counters["msgs_rcved"] == 3 and counters["duplicate_data"] == 0, counters
    assert counters["malformed"] == 1 and counters["lost"] == 0 and counters["naks_sent"] == 0, counters
    assert not source.closed_at


def test_a_connected_session_s_data_in_order_is_taken_without_decoding(raw_source):
    """In the steady state each DATA datagram is the next one: the port reads its header and hands
    its frames to the session (in_order_data), not decoding it into a packet; the one after a
    gap goes the whole way, where it is NAKed and repaired."""
    source = raw_source(acknowledgement_interval=0.05)
    decoded = record_decoded_data(source.loop, source.client, LbtruData)
    for sqn in range(1, 6):
        source.send_data(sqn)
    wait_for(lambda: source.counters()["msgs_rcved"] == 5, 10, message="five datagrams")
    assert decoded == []
    source.send_data(7)
    _receive(source.sock, LbtruNak)
    source.send(encode_lbtru_data(source.SESSION_ID, 6, MESSAGE_HEADER.pack(
        LBMC_TYPE_MESSAGE, NHDR_DATA, MESSAGE_HEADER.size + 4, 1, 6) + b"data", trail_sqn=1,
        flags=FLAG_RETRANSMISSION))
    source.send_data(8)
    wait_for(lambda: source.counters()["msgs_rcved"] == 8, 10, message="the repair and the one after it")
    assert decoded == [7, 6]
    assert source.counters()["lost"] == 0


# -- held data -----------------------------------------------------------------------------------
def test_what_a_holding_source_sent_before_any_receiver_reaches_the_first_one(tmp_path):
    domain = new_domain(tmp_path)
    options = domain.overrides()
    before = _payloads(60, big_every=25)
    after = [b"after %d" % i for i in range(20)]
    with Context(transport="lbtru", **options) as sending:
        source = sending.source("ru.hold", hold_for_receiver=5.0)
        for payload in before:
            source.send(payload, flush=True)
        assert source.receiver_count == 0
        held = len(source.session.held)
        assert held > 0
        with Context(**options) as receiving:
            got, events = _collect(receiving, "ru.hold")
            wait_for(lambda: len(got) == len(before), 10, message="the held messages")
            _send_when_connected(source, after)
            wait_for(lambda: len(got) == len(before) + len(after), 10, message="the messages sent after")
            stream = _stream(receiving)
            counters, session = dict(stream.counters), dict(source.session.counters)
    assert [d for _, d in got] == before + after
    sqns = [sqn for sqn, _ in got]
    assert sqns[0] == 0 and sqns == sorted(set(sqns)), "from the first message sent, in order, each once"
    assert session["held_batches_delivered"] == held and session["held_batches_expired"] == 0, session
    assert counters["lost"] == 0 and counters["reassembled"] == sum(1 for p in before if len(p) > 8192), counters
    assert events == ["BOS"]


def test_held_messages_reach_a_receiver_that_connects_while_the_source_is_sending(tmp_path):
    domain = new_domain(tmp_path)
    options = {**domain.overrides(), "transport_lbtru_data_rate_limit": 800_000}     # 100 KB/s
    before = [b"held %d" % i for i in range(40)]
    big = bytes(range(256)) * 1600            # 400 KB: about four seconds at the rate, in 50 fragments
    with Context(transport="lbtru", **options) as sending:
        source = sending.source("ru.hold.race", hold_for_receiver=10.0)
        session = source.session
        for payload in before:
            source.send(payload, flush=True)
        held = len(session.held)
        assert held == len(before)
        sender = threading.Thread(target=source.send, args=(big, True))
        sender.start()
        try:
            wait_for(lambda: session.next_sqn > held, 10, message="the large message is being sent")
            with Context(**options) as receiving:
                got, _ = _collect(receiving, "ru.hold.race")
                wait_for(lambda: receiving.clients, 10, message="the receiver joins")
                if not sender.is_alive():
                    raise RuntimeError("the receiver did not connect while the large message was sent: "
                                       "the test did not set up what it means to check")
                stream = _stream(receiving)
                sender.join(30)
                wait_for(lambda: len(got) == len(before) + 1 or stream.counters["duplicate_data"] > 0, 20,
                         message="the held messages and the large one, or the held ones dropped")
                wait_for(lambda: len(got) == len(before) + 1 or stream.counters["duplicate_data"] >= held
                         or stream.closed, 5, message="everything sent has arrived")
                counters, session_counters = dict(stream.counters), dict(session.counters)
        finally:
            sender.join(30)
    assert session_counters["held_batches_delivered"] > held, session_counters
    assert counters["duplicate_data"] == 0, counters
    assert [d for _, d in got] == before + [big], (len(got), counters)


# -- malformed datagrams -------------------------------------------------------------------------
def test_malformed_datagrams_are_counted_and_never_stop_delivery(tmp_path):
    domain = new_domain(tmp_path)
    options = domain.overrides()
    raw = _raw_socket()
    with raw, Context(**options) as receiving, Context(transport="lbtru", **options) as sending:
        got, _ = _collect(receiving, "ru.bad")
        source = sending.source("ru.bad")
        session = source.session
        _send_when_connected(source, [b"first %d" % i for i in range(10)])
        wait_for(lambda: len(got) == 10, 10, message="the first messages")
        stream = _stream(receiving)
        receiver_address = ("127.0.0.1", receiving.lbtru_port.port)
        source_address = ("127.0.0.1", session.port)
        sid = session.session_id

        undecodable = [b"", b"\x00", b"\x10\x00\x00\x00",                  # empty, truncated, version 1
                       b"\x08\x00\x00\x00",                                   # type 8
                       encode_lbtru_creq(sid, 1)[:-3],                        # a CREQ cut short
                       bytes(encode_lbtru_nak(sid, 1, [1, 2]))[:8] + b"\x00" * 3]   # a NAK's list cut short
        for datagram in undecodable:
            with pytest.raises(WireError):
                decode_lbtru(datagram)
        # What only sources send, sent to a source; and an RST, which a source never receives.
        wrong_way = [encode_lbtru_data(sid, 0, b""), encode_lbtru_sm(sid, 0, 0, 0), encode_lbtru_ncf(sid, 0, 0, [0]),
                     encode_lbtru_rst()]
        malformed = session.counters["malformed"]
        for datagram in undecodable + wrong_way:
            raw.sendto(datagram, source_address)
        wait_for(lambda: session.counters["malformed"] == malformed + len(undecodable) + len(wrong_way), 5,
                 message="the source counts every malformed datagram")

        # What receivers send, or nothing valid, sent to a receiver: dropped at the header.
        port = receiving.lbtru_port
        dropped_hdr, dropped_sid = port.counters["dgrams_dropped_hdr"], port.counters["dgrams_dropped_sid"]
        for datagram in undecodable:
            raw.sendto(datagram, receiver_address)
        raw.sendto(encode_lbtru_data(sid, 10, b"\x00" * 8), receiver_address)   # right session id, wrong sender
        raw.sendto(encode_lbtru_rst(), receiver_address)                       # from no source of ours
        wait_for(lambda: port.counters["dgrams_dropped_hdr"] == dropped_hdr + len(undecodable), 5,
                 message="the receiver counts every undecodable datagram")
        wait_for(lambda: port.counters["dgrams_dropped_sid"] >= dropped_sid + 1, 5,
                 message="the stranger's DATA is dropped as of no session here")

        source.send(b"second", flush=True)
        more = [b"then %d" % i for i in range(10)]
        for payload in more:
            source.send(payload)
        source.flush()
        wait_for(lambda: len(got) == 21, 10, message="delivery goes on")
        assert stream.connected and not stream.closed and source.receiver_count == 1
        assert stream.counters["rsts_rcved"] == 0 and stream.counters["malformed"] == 0, stream.counters
        assert stream.counters["lost"] == 0, stream.counters
    assert [d for _, d in got] == [b"first %d" % i for i in range(10)] + [b"second"] + more


# -- the wire ------------------------------------------------------------------------------------
def test_the_session_on_the_wire_with_loss(tmp_path, monkeypatch):
    """CREQ, SM SYN, DATA, ACK, NAK, retransmissions and the closing RST as tshark decodes them:
    every DATA sequence number once as sent, each NAKed one retransmitted with the RX flag, no
    malformed frame and no expert warning but the dissector's own "NAK" marker on each NAK."""
    monkeypatch.setenv("LBTRU_LOSS_RATE", "20")
    domain = new_domain(tmp_path)
    options = domain.overrides()
    pcap = tmp_path / "session.pcapng"
    capture_filter = (f"udp and (portrange {domain.tcp_low}-{domain.tcp_high} or "
                      f"portrange {domain.request_low}-{domain.request_high})")
    with Context(**options) as receiving, Context(transport="lbtru", **options) as sending:
        with LiveCapture(capture_filter=capture_filter, path=pcap) as capture:
            got, _ = _collect(receiving, "ru.wire")
            source = sending.source("ru.wire")
            _send_when_connected(source, [b"%05d" % i * 40 for i in range(400)])
            wait_for(lambda: len(got) == 400, 30, message="every message, repaired")
            stream = _stream(receiving)
            wait_for(lambda: stream.counters["sms_rcved"] > 1 and stream.counters["acks_sent"] > 0, 10,
                     message="a session message and an ACK")
            sending.close()                       # its RST to the receiver, which asks to connect again
            wait_for(lambda: stream.counters["rsts_rcved"] > 0, 10, message="the RST")
            counters = dict(stream.counters)
    assert counters["lost"] == 0 and counters["naks_sent"] > 0, counters
    prefs = [f"lbtru.source_port_low:{domain.tcp_low}", f"lbtru.source_port_high:{domain.tcp_high}",
             f"lbtru.receiver_port_low:{domain.request_low}", f"lbtru.receiver_port_high:{domain.request_high}"]
    frames = decode(pcap, [], prefs, display_filter=f"udp and {capture.not_canary}",
                    fields=["lbtru.hdr.type", "lbtru.data.sqn", "lbtru.hdr.flags.rx", "lbtru.hdr.flags.syn",
                            "lbtru.nak.list.nak", "lbtru.opt_sid.session_id", "_ws.malformed"])
    assert frames and all("lbtru.hdr.type" in f for f in frames), [f for f in frames if "lbtru.hdr.type" not in f]
    assert not [f for f in frames if "_ws.malformed" in f]
    kinds = [int(f["lbtru.hdr.type"][0], 0) for f in frames]
    assert {0, 2, 3, 5, 6, 7} <= set(kinds), sorted(set(kinds))    # DATA SM NAK ACK CREQ RST (NCF if refused)
    assert any(f.get("lbtru.hdr.flags.syn") in (["1"], ["True"]) for f in frames), "an SM SYN"
    session_ids = {int(v, 0) for f in frames for v in f.get("lbtru.opt_sid.session_id", [])}
    assert session_ids == {source.session.session_id}, session_ids
    originals = [int(f["lbtru.data.sqn"][0], 0) for f in frames
                 if "lbtru.data.sqn" in f and f["lbtru.hdr.flags.rx"] in (["0"], ["False"])]
    retransmitted = {int(f["lbtru.data.sqn"][0], 0) for f in frames
                     if "lbtru.data.sqn" in f and f["lbtru.hdr.flags.rx"] in (["1"], ["True"])}
    naked = {int(sqn, 0) for f in frames for sqn in f.get("lbtru.nak.list.nak", [])}
    assert originals == list(range(len(originals))), "each datagram sent once, in order"
    assert naked and naked <= retransmitted, (naked, retransmitted)
    rows = expert_info(pcap, [], prefs, min_severity="warn")
    assert rows and all(row.startswith("Warn/Sequence/LBT-RU: NAK (x") for row in rows), rows


def test_a_datagram_whose_copies_cost_more_than_the_rate_bucket_still_goes(loop, domain):
    """The data rate is charged for every copy an LBT-RU session sends, so with enough receivers
    one datagram costs more than the bucket holds (one `transport_lbtru_rate_interval` of the
    rate, or one datagram): it goes once the bucket is full, and the rate is paid back after, as
    for any datagram (else a router's proxy session never sent again, its queue only growing)."""
    session = LbtruSourceSession(loop, "127.0.0.1", domain.tcp_low, domain.tcp_high, datagram_max_size=8192,
                                 data_rate_limit=80_000, rate_interval=0.1, overflow="drop",
                                 max_queue=1 << 20, batching_minimum_length=1)
    receivers = [_raw_socket(), _raw_socket()]
    try:
        address = ("127.0.0.1", session.port)
        for client_id, raw in enumerate(receivers, 1):
            raw.sendto(encode_lbtru_creq(session.session_id, client_id), address)
            _receive_syn(raw)
        assert session.data_rate.capacity < 2 * 5000          # two copies: more than it holds
        frame = MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, 5000, 1, 0) + bytes(5000 - MESSAGE_HEADER.size)
        loop.call_and_wait(session.send_raw, frame, None, 1, True)
        for raw in receivers:
            data = _receive(raw, LbtruData, timeout=10.0)
            assert data.sqn == 0 and len(data.payload) == 5000
        assert not session.pending
    finally:
        loop.call_and_wait(session.close)
        for raw in receivers:
            raw.close()
