"""UM late join between real contexts on loopback (router.um.late_join, router.um.retention).

A late-join source keeps what it sends and advertises it (its TIR's LATEJOIN option); a receiver
that joins it later asks the source's context, over UIM connections between the two contexts'
request ports, what it retains (LJI_REQ -> UME_LJ_INFO), asks for it (UME_RXREQ -> RETRANS), and
delivers it first, flagged as retransmissions, then the live messages it held back meanwhile.

Some tests need the source's answer to come late, deterministically: they take the source's
retention out of its context's LateJoinServer (`remove`) so that the receiver's first LJI_REQs go
unanswered (counted as lj_requests_unknown_source), and put it back (`add`) when the test is ready.
"""
from __future__ import annotations

import socket
import threading
import time

import pytest

from router.cli.payload import HEADER
from router.um import late_join
from router.um.context import Context
from router.um.messages import UNRECOVERABLE_LOSS
from router.um.wire.lbmc_properties import Property
from router.um.wire.lbmc import (CONTROL_HEADER, LBMC_TYPE_CONTROL, LBMC_TYPE_RETRANS, MESSAGE_HEADER,
                                 NHDR_DATA, NHDR_NONE, LbmcMessage, LjiRequest, UmeRxReq, encode_lbmc)
from tests.support.domains import new_domain
from tests.support.processes import wait_for
from tests.support.retransmissions import answer_requests
from tests.support.tshark import LiveCapture, assert_no_expert_info, decode

pytestmark = pytest.mark.integration

# Per transport: the option that makes its datagrams small enough for 20 KB messages to fragment.
_SMALL_DATAGRAMS = {"tcp": {"transport_tcp_datagram_max_size": 8192},
                    "lbtrm": {"transport_lbtrm_datagram_max_size": 8192},
                    "lbtru": {"transport_lbtru_datagram_max_size": 8192},
                    "lbtipc": {"transport_lbtipc_datagram_max_size": 8192}}
# Retries that never happen in a healthy exchange: counters on both sides then match exactly.
_NO_RETRIES = {"late_join_info_request_interval": 5000, "retransmit_request_interval": 5000}


def _payload(n: int, size: int = 40) -> bytes:
    """Message n: its number first (the order checks read it back), then filler up to `size`."""
    head = b"%06d|" % n
    return head + bytes([n % 251]) * max(0, size - len(head))


def _number(message) -> int:
    return int(message.data[:6])


class Collector:
    """What a receiver delivered, and its events with how many messages had come before each."""

    def __init__(self, context: Context, topic: str, on_batch: bool = True, pattern: str | None = None):
        self.messages: list = []
        self.events: list[tuple[str, int]] = []
        on_event = lambda event: self.events.append((event.kind, len(self.messages)))    # noqa: E731
        if pattern is not None:
            self.receiver = context.wildcard_receiver(pattern, on_batch=self.messages.extend, on_event=on_event)
        elif on_batch:
            self.receiver = context.receiver(topic, on_batch=self.messages.extend, on_event=on_event)
        else:
            self.receiver = context.receiver(topic, self.messages.append, on_event=on_event)

    def wait(self, count: int, timeout: float = 15, what: str = "messages") -> None:
        wait_for(lambda: len(self.messages) >= count, timeout, message=f"{count} {what}")

    @property
    def numbers(self) -> list[int]:
        return [_number(m) for m in self.messages]

    @property
    def flags(self) -> list[bool]:
        return [m.retransmit for m in self.messages]


def _send(source, payloads) -> None:
    for payload in payloads:
        source.send(payload)
    source.flush()


def _lj(context: Context) -> dict[str, int]:
    return {k: v for k, v in context.counters().items() if k.startswith("lj_") or k.startswith("uim_")}


def _held(context: Context) -> int:
    """Live messages the context's late-join clients hold back now (read on its loop)."""
    return context.loop.call_and_wait(
        lambda: sum(len(item) if kind == "batch" else 1
                    for client in context.late_join_clients.values() for kind, item in client.held))


def _withhold_answers(source_context: Context, source):
    """Make the source's context ignore LJI_REQs for `source` until the returned callable is called."""
    _, transport_idx, retention = source.late_join
    source_context.loop.call_and_wait(source_context.late_join_server.remove, transport_idx, source.index)
    return lambda: source_context.loop.call_and_wait(source_context.late_join_server.add, transport_idx,
                                                     source.index, retention)


def _assert_retransmitted_then_live(got: Collector, payloads: list[bytes], retransmitted: int) -> None:
    """Every payload exactly once, in order: the first `retransmitted` flagged, the rest not."""
    numbers = got.numbers
    assert len(numbers) == len(set(numbers)), f"duplicates: {numbers}"
    assert numbers == list(range(len(payloads))), f"gaps or disorder: {numbers}"
    assert [m.data for m in got.messages] == payloads
    assert got.flags == [True] * retransmitted + [False] * (len(payloads) - retransmitted)


# -- 1. the late receiver gets what came before, then the live messages ------------------------------
# LBT-RM: each message flushed on its own, so the session has sent more than YOUNG_SESSION (16)
# datagrams before the receiver joins (a younger one: see the young-session test below).
@pytest.mark.parametrize("transport, flush_each", [("tcp", False), ("lbtrm", True), ("lbtru", False),
                                                   ("lbtipc", False)], ids=["tcp", "lbtrm", "lbtru", "lbtipc"])
def test_a_late_receiver_gets_what_was_sent_before_in_order_then_the_live_messages(tmp_path, transport, flush_each):
    domain = new_domain(tmp_path)
    options = domain.overrides()
    before = [_payload(n, 20_000 if n % 4 == 1 else 40 + n) for n in range(12)]   # 20 KB: 3 fragments
    live = [_payload(n, 20_000 if n == 14 else 30) for n in range(12, 18)]
    with Context(**options, transport=transport, late_join=True, **_SMALL_DATAGRAMS[transport]) as sending, \
            Context(**options, retransmit_request_outstanding_maximum=3, **_NO_RETRIES) as receiving:
        source = sending.source("lj.basic")
        for payload in before:
            source.send(payload, flush=flush_each)
        source.flush()
        frames_before = source.sequence_number
        assert frames_before > len(before), "the 20 KB messages were sent in fragments"
        got = Collector(receiving, "lj.basic")
        got.wait(len(before), what="retransmitted messages")
        _send(source, live)
        got.wait(len(before) + len(live))
        wait_for(lambda: _lj(sending)["lj_retransmissions_sent"] == frames_before, 10,
                 message="the source's counters")
        _assert_retransmitted_then_live(got, before + live, len(before))
        # Retransmitted messages carry their original sequence numbers (a fragmented one: its first).
        assert [m.sequence_number for m in got.messages[:len(before)]] == \
            [0, 1, 4, 5, 6, 7, 10, 11, 12, 13, 16, 17]
        assert got.messages[len(before)].sequence_number == frames_before
        assert got.events == [("BOS", 0)]
        src, rcv = _lj(sending), _lj(receiving)
    assert src["lj_info_requests_rcved"] == 1
    assert src["lj_rx_requests_rcved"] == src["lj_retransmissions_sent"] == frames_before
    assert src["lj_retransmissions_unavailable"] == src["lj_requests_unknown_source"] == 0
    assert rcv["lj_retransmissions_requested"] == frames_before
    assert rcv["lj_messages_delivered"] == len(before)
    assert rcv["lj_retransmissions_given_up"] == rcv["lj_info_unanswered"] == rcv["lj_messages_incomplete"] == 0
    assert rcv["uim_frames_unknown"] == src["uim_frames_unknown"] == 0


def test_a_late_receiver_of_a_young_lbtrm_session_gets_no_duplicates(domain):
    before = [_payload(n) for n in range(12)]                  # one datagram
    # No session message before the live datagram (a receiver hearing one first starts after its lead).
    quiet = {"transport_lbtrm_sm_minimum_interval": 20_000, "transport_lbtrm_sm_maximum_interval": 20_000}
    with Context(**domain.overrides(), transport="lbtrm", late_join=True, **quiet) as sending, \
            Context(**domain.overrides()) as receiving:
        source = sending.source("lj.young")
        _send(source, before)
        got = Collector(receiving, "lj.young")
        got.wait(12, what="retransmitted messages")
        source.send(_payload(12), flush=True)
        # LBT-RM delivers in order: whatever it repaired from before the join comes before this one.
        wait_for(lambda: 12 in got.numbers, 10, message="the live message")
    _assert_retransmitted_then_live(got, before + [_payload(12)], 12)


def test_a_hundred_kilobyte_message_at_the_default_datagram_size_comes_back_whole(domain):
    before = [_payload(0, 30), _payload(1, 100_000), _payload(2, 30)]
    with Context(**domain.overrides(), late_join=True) as sending, Context(**domain.overrides()) as receiving:
        source = sending.source("lj.big")
        _send(source, before)
        assert source.sequence_number == 4          # 65535-byte datagrams: 2 fragments
        got = Collector(receiving, "lj.big", on_batch=False)       # one message at a time
        got.wait(3)
        _send(source, [_payload(3)])
        got.wait(4)
        _assert_retransmitted_then_live(got, before + [_payload(3)], 3)
        assert [m.sequence_number for m in got.messages] == [0, 1, 3, 4]


# -- 2. live messages during the fetch are held back, then delivered after -------------------------
def test_live_messages_sent_while_the_receiver_fetches_come_after_the_retransmitted_ones(domain):
    with Context(**domain.overrides(), late_join=True, transport_tcp_datagram_max_size=8192) as sending, \
            Context(**domain.overrides()) as receiving:
        source = sending.source("lj.running")
        sent: list[bytes] = []
        stop = threading.Event()
        failure: list[BaseException] = []

        def publish() -> None:
            try:
                n = 0
                while not stop.is_set() and n < 20_000:
                    payload = _payload(n, 12_000 if n % 37 == 5 else 24)
                    source.send(payload, flush=n % 8 == 0)
                    sent.append(payload)
                    n += 1
                    if n % 50 == 0:
                        time.sleep(0.001)       # pacing only: let the join overlap the sending
                source.flush()
            except BaseException as err:      # the test fails with it rather than hanging
                failure.append(err)

        publisher = threading.Thread(target=publish, name="lj-publisher")
        publisher.start()
        try:
            wait_for(lambda: len(sent) >= 300 or failure, 10, message="the publisher under way")
            got = Collector(receiving, "lj.running", on_batch=False)
            # Still publishing while the receiver joins, fetches and holds; stop once live ones flow.
            wait_for(lambda: sum(1 for m in list(got.messages) if not m.retransmit) >= 200 or failure, 15,
                     message="live messages after the retransmitted ones")
        finally:
            stop.set()
            publisher.join(10)
        assert not failure, failure
        got.wait(len(sent), what="every message sent")
        retransmitted = sum(got.flags)
        assert retransmitted >= 300
        _assert_retransmitted_then_live(got, sent, retransmitted)
        assert _lj(receiving)["lj_messages_delivered"] == retransmitted


# -- 3. what the source retains, what the receiver asks for ------------------------------------------
def _late_join_suffix(domain, source_options: dict, receiver_options: dict, count: int = 30):
    """`count` 100-byte frames sent before a receiver joins, 3 after; what it got."""
    with Context(**domain.overrides(), late_join=True, **source_options) as sending, \
            Context(**domain.overrides(), **receiver_options) as receiving:
        source = sending.source("lj.suffix")
        payloads = [_payload(n, 100 - MESSAGE_HEADER.size) for n in range(count + 3)]
        _send(source, payloads[:count])
        got = Collector(receiving, "lj.suffix")
        wait_for(lambda: source.receiver_count >= 1, 10, message="the receiver joins")
        wait_for(lambda: not receiving.loop.call_and_wait(lambda: bool(receiving.late_join_clients)), 10,
                 message="the late join is over")
        _send(source, payloads[count:])
        wait_for(lambda: sum(not f for f in got.flags) >= 3, 10, message="the live messages")
        return got, payloads, _lj(sending), _lj(receiving)


def test_a_small_retention_size_limit_gives_only_the_newest_messages(domain):
    # 100-byte frames, 1000 bytes kept: the last 10 of the 30 sent before.
    got, payloads, src, rcv = _late_join_suffix(domain, {"retransmit_retention_size_limit": 1000}, {})
    assert got.numbers == list(range(20, 33))
    assert got.flags == [True] * 10 + [False] * 3
    assert [m.data for m in got.messages] == payloads[20:]
    assert src["lj_retransmissions_sent"] == rcv["lj_retransmissions_requested"] == 10
    assert rcv["lj_retransmissions_given_up"] == src["lj_retransmissions_unavailable"] == 0


def test_retransmit_request_maximum_asks_for_only_the_last_k(domain):
    got, payloads, src, rcv = _late_join_suffix(domain, {}, {"retransmit_request_maximum": 5})
    assert got.numbers == list(range(25, 33))
    assert got.flags == [True] * 5 + [False] * 3
    assert src["lj_retransmissions_sent"] == rcv["lj_retransmissions_requested"] == 5


def test_retransmit_request_maximum_above_what_is_retained_gets_what_is_retained(domain):
    got, _, src, rcv = _late_join_suffix(domain, {"retransmit_retention_size_limit": 700},
                                         {"retransmit_request_maximum": 20})
    assert got.numbers == list(range(23, 33))
    assert got.flags == [True] * 7 + [False] * 3


def test_the_retention_age_threshold_drops_what_is_older(domain):
    with Context(**domain.overrides(), late_join=True, retransmit_retention_age_threshold=3) as sending, \
            Context(**domain.overrides()) as receiving:
        source = sending.source("lj.aged")
        payloads = [_payload(n) for n in range(16)]
        _send(source, payloads[:10])
        retention = source.late_join[2]
        wait_for(lambda: sending.loop.call_and_wait(retention.bounds) is None, 10,
                 message="the first ten age out")
        _send(source, payloads[10:13])             # fresh: within the threshold when asked for
        got = Collector(receiving, "lj.aged")
        got.wait(3, what="the fresh retained messages")
        _send(source, payloads[13:])
        got.wait(6)
        assert got.numbers == list(range(10, 16))
        assert got.flags == [True] * 3 + [False] * 3


# -- 4. no late join: the receiver's option off, or a source that does not offer it ------------------
def _live_only(domain, source_options: dict, receiver_options: dict):
    with Context(**domain.overrides(), **source_options) as sending, \
            Context(**domain.overrides(), **receiver_options) as receiving:
        source = sending.source("lj.none")
        _send(source, [_payload(n) for n in range(10)])
        got = Collector(receiving, "lj.none")
        wait_for(lambda: source.receiver_count >= 1, 10, message="the receiver joins")
        # Whatever late join would have done, it would have done it by the time this came back.
        wait_for(lambda: receiving.loop.call_and_wait(lambda: not receiving.late_join_clients), 10,
                 message="no late join under way")
        _send(source, [_payload(n) for n in range(10, 15)])
        got.wait(5, what="the live messages")
        source.send(_payload(15), flush=True)
        got.wait(6)
        return got, _lj(sending), _lj(receiving)


def test_a_receiver_with_use_late_join_off_gets_only_live_messages(domain):
    got, src, rcv = _live_only(domain, {"late_join": True}, {"use_late_join": False})
    assert got.numbers == list(range(10, 16)) and not any(got.flags)
    assert src["lj_info_requests_rcved"] == src["lj_retransmissions_sent"] == 0
    assert rcv["lj_retransmissions_requested"] == rcv["lj_messages_delivered"] == 0
    assert src["uim_frames_sent"] == rcv["uim_frames_sent"] == 0


def test_a_source_without_late_join_gives_only_live_messages(domain):
    got, src, rcv = _live_only(domain, {}, {})
    assert got.numbers == list(range(10, 16)) and not any(got.flags)
    assert src["lj_info_requests_rcved"] == 0 and rcv["lj_retransmissions_requested"] == 0
    assert src["uim_frames_sent"] == rcv["uim_frames_sent"] == 0


def test_only_a_late_join_source_advertises_the_latejoin_option(domain, tmp_path):
    pcap = tmp_path / "tirs.pcapng"
    with LiveCapture(capture_filter=f"udp port {domain.port}", path=pcap) as capture:
        with Context(**domain.overrides()) as plain, Context(**domain.overrides(), late_join=True) as offering, \
                Context(**domain.overrides()) as receiving:
            plain_source = plain.source("lj.plain")
            offering_source = offering.source("lj.offered")
            _send(plain_source, [_payload(0)])
            _send(offering_source, [_payload(0)])
            got_plain, got_offered = Collector(receiving, "lj.plain"), Collector(receiving, "lj.offered")
            wait_for(lambda: plain_source.receiver_count >= 1 and offering_source.receiver_count >= 1, 10,
                     message="both sources joined")
            got_offered.wait(1, what="the retransmitted message")
            plain_source.send(_payload(1), flush=True)
            got_plain.wait(1)
            request_address = offering.request_address()
    assert got_plain.numbers == [1] and got_plain.flags == [False]
    assert got_offered.numbers == [0] and got_offered.flags == [True]
    prefs = domain.lbmr_prefs()
    assert_no_expert_info(pcap, [], prefs, min_severity="warn")
    fields = ["lbmr.tir.name", "lbmr.topt.latejoin", "lbmr.topt.latejoin.src_tcp_port",
              "lbmr.topt.latejoin.src_ip_addr", "lbmr.topt.latejoin.transport_idx"]
    tirs = [(name, frame) for frame in decode(pcap, [], prefs, fields=fields, display_filter=capture.not_canary)
            for name in frame.get("lbmr.tir.name", [])]
    plain_tirs = [frame for name, frame in tirs if name == "lj.plain"]
    offered_tirs = [frame for name, frame in tirs if name == "lj.offered"]
    assert plain_tirs and offered_tirs, tirs
    for frame in plain_tirs:        # one TIR per packet here: each source advertises on its own
        assert "lbmr.topt.latejoin" not in frame, frame
    for frame in offered_tirs:
        assert frame["lbmr.topt.latejoin.src_tcp_port"] == [str(request_address[1])]
        assert frame["lbmr.topt.latejoin.src_ip_addr"] == [request_address[0]]
        assert frame["lbmr.topt.latejoin.transport_idx"] == [str(offering_source.late_join[1])]


# -- 5. an early receiver ----------------------------------------------------------------------------
def test_a_receiver_that_joined_before_anything_was_sent_gets_no_retransmissions(domain):
    with Context(**domain.overrides(), late_join=True) as sending, Context(**domain.overrides()) as receiving:
        source = sending.source("lj.early")
        got = Collector(receiving, "lj.early")
        wait_for(lambda: source.receiver_count >= 1, 10, message="the receiver joins")
        # The source has answered "nothing retained" (its answer handed to TCP) before it sends.
        wait_for(lambda: _lj(sending)["uim_frames_sent"] >= 1, 10, message="the late-join answer")
        payloads = [_payload(n, 20_000 if n == 3 else 40) for n in range(20)]
        for payload in payloads:
            source.send(payload, flush=True)
        got.wait(20)
        wait_for(lambda: receiving.loop.call_and_wait(lambda: not receiving.late_join_clients), 10,
                 message="the late join over")
        _assert_retransmitted_then_live(got, payloads, 0)
        src, rcv = _lj(sending), _lj(receiving)
    assert src["lj_info_requests_rcved"] == 1 and src["lj_retransmissions_sent"] == 0
    assert rcv["lj_retransmissions_requested"] == rcv["lj_messages_delivered"] == 0


def test_an_answer_after_the_first_live_messages_fetches_only_what_came_before_them(domain):
    """The source's UME_LJ_INFO reaches the receiver after live data: what the source retains from
    the first live message on came live, so only what precedes it is asked for."""
    with Context(**domain.overrides(), late_join=True) as sending, \
            Context(**domain.overrides(), late_join_info_request_interval=100) as receiving:
        source = sending.source("lj.slow")
        payloads = [_payload(n) for n in range(15)]
        _send(source, payloads[:5])
        answer = _withhold_answers(sending, source)
        got = Collector(receiving, "lj.slow")
        wait_for(lambda: source.receiver_count >= 1 and _lj(sending)["lj_requests_unknown_source"] >= 1, 10,
                 message="the receiver joins and asks")
        _send(source, payloads[5:])
        wait_for(lambda: _held(receiving) == 10, 10, message="the live messages held back")
        assert got.messages == []
        answer()
        got.wait(15)
        _assert_retransmitted_then_live(got, payloads, 5)
        assert _lj(receiving)["lj_retransmissions_requested"] == 5


def test_an_early_receiver_whose_answer_comes_after_message_zero_gets_no_retransmissions(domain):
    """As above, but the receiver joined before anything was sent: its first live message is
    sequence number 0, nothing came before it, and nothing must be retransmitted."""
    with Context(**domain.overrides(), late_join=True) as sending, \
            Context(**domain.overrides(), late_join_info_request_interval=100) as receiving:
        source = sending.source("lj.zero")
        answer = _withhold_answers(sending, source)
        got = Collector(receiving, "lj.zero")
        wait_for(lambda: source.receiver_count >= 1 and _lj(sending)["lj_requests_unknown_source"] >= 1, 10,
                 message="the receiver joins and asks")
        payloads = [_payload(n) for n in range(10)]
        _send(source, payloads)
        wait_for(lambda: _held(receiving) == 10, 10, message="the live messages held back")
        answer()
        got.wait(10)
        wait_for(lambda: receiving.loop.call_and_wait(lambda: not receiving.late_join_clients), 10,
                 message="the late join over")
        rcv = _lj(receiving)
    assert got.numbers == list(range(10))
    assert rcv["lj_retransmissions_requested"] == 0, rcv
    assert got.flags == [False] * 10, "messages that came live are delivered as retransmissions"


# -- 6. a source context that does not answer --------------------------------------------------------
def _close_request_port(sending: Context, receiving: Context) -> None:
    """The source's context stops answering: its request port (advertised already) is closed."""
    # The receiver's own request port first: opened after the source's closed, it would take the
    # same port number, and the receiver would ask itself.
    receiving.request_address()
    sending.loop.call_and_wait(sending.request_port.close)


def test_a_receiver_gives_up_on_a_source_context_that_does_not_answer_and_delivers_live(domain):
    with Context(**domain.overrides(), late_join=True) as sending, \
            Context(**domain.overrides(), late_join_info_request_interval=100,
                    late_join_info_request_maximum=3) as receiving:
        source = sending.source("lj.gone")
        _send(source, [_payload(n) for n in range(5)])
        _close_request_port(sending, receiving)
        got = Collector(receiving, "lj.gone")
        wait_for(lambda: source.receiver_count >= 1, 10, message="the receiver joins")
        live = [_payload(n) for n in range(5, 10)]
        _send(source, live)
        got.wait(5, what="the live messages, released")
        source.send(_payload(10), flush=True)
        got.wait(6)
        assert got.numbers == list(range(5, 11)) and not any(got.flags)
        rcv = _lj(receiving)
        assert rcv["lj_info_unanswered"] == 1
        assert rcv["lj_retransmissions_requested"] == rcv["lj_messages_delivered"] == 0
        assert receiving.counters()["uim_frames_dropped"] == 3, "each LJI_REQ refused, none sent again after"
        assert _lj(sending)["lj_info_requests_rcved"] == 0


@pytest.mark.parametrize("final_advertisements", [0, 3], ids=["transport-closes", "final-advertisements"])
def test_live_messages_held_back_are_delivered_when_the_source_ends_before_its_context_answers(
        domain, final_advertisements):
    """The source ends while the receiver still asks what came before: by its transport closing,
    or by final advertisements (which end the stream on their own path)."""
    with Context(**domain.overrides(), late_join=True) as sending, \
            Context(**domain.overrides(), late_join_info_request_interval=100,
                    late_join_info_request_maximum=100) as receiving:          # 10 s of asking
        source = sending.source("lj.ends")
        _send(source, [_payload(n) for n in range(5)])
        _close_request_port(sending, receiving)
        got = Collector(receiving, "lj.ends")
        wait_for(lambda: source.receiver_count >= 1, 10, message="the receiver joins")
        _send(source, [_payload(n) for n in range(5, 10)])
        wait_for(lambda: _held(receiving) == 5, 10, message="the live messages held back")
        source.close(final_advertisements=final_advertisements)
        wait_for(lambda: any(kind == "EOS" for kind, _ in got.events), 10, message="EOS")
    assert got.numbers == list(range(5, 10)), "the live messages the transport received"
    assert got.events == [("BOS", 0), ("EOS", 5)]


def test_live_messages_held_back_beyond_the_limit_stop_the_fetching(domain, monkeypatch, caplog):
    """A receiver fetching from a source context that does not answer holds live messages back,
    but not without bound: past MAX_HELD_BYTES it stops asking and delivers them."""
    monkeypatch.setattr(late_join, "MAX_HELD_BYTES", 2000)
    with Context(**domain.overrides(), late_join=True) as sending, \
            Context(**domain.overrides(), late_join_info_request_interval=100,
                    late_join_info_request_maximum=1000) as receiving:              # 100 s of asking
        source = sending.source("lj.overflow")
        _send(source, [_payload(n) for n in range(5)])
        _close_request_port(sending, receiving)
        got = Collector(receiving, "lj.overflow")
        wait_for(lambda: source.receiver_count >= 1, 10, message="the receiver joins")
        live = [_payload(n) * 50 for n in range(5, 15)]          # well past 2000 bytes
        _send(source, live)
        got.wait(len(live), what="the live messages, released by the limit")
    assert got.numbers == list(range(5, 15)) and not any(got.flags)
    assert _lj(receiving)["lj_held_overflows"] == 1
    assert "held back while fetching what came before; fetching stops" in caplog.text


# -- 7. tshark's reading of one late join --------------------------------------------------------------
def test_tshark_decodes_the_latejoin_option_the_requests_the_answers_and_the_retransmissions(domain, tmp_path):
    pcap = tmp_path / "late_join.pcapng"
    before = [_payload(n, 20_000 if n == 2 else 30) for n in range(6)]
    capture_filter = f"udp port {domain.port} or tcp portrange {domain.tcp_low}-{domain.request_high}"
    with LiveCapture(capture_filter=capture_filter, path=pcap) as capture:
        with Context(**domain.overrides(), late_join=True, transport_tcp_datagram_max_size=8192) as sending, \
                Context(**domain.overrides(), retransmit_request_maximum=100, **_NO_RETRIES) as receiving:
            source = sending.source("lj.wire")
            _send(source, before)
            frames = source.sequence_number                 # 5 messages + 3 fragments
            got = Collector(receiving, "lj.wire")
            got.wait(6, what="retransmitted messages")
            source.send(_payload(6), flush=True)
            got.wait(7)
            data_port = source.transport_info.port
            source_request, receiver_request = sending.request_address(), receiving.request_address()
            transport_idx = source.late_join[1]
            topic_idx = source.index
    assert frames == 8
    assert got.flags == [True] * 6 + [False]
    decode_as = [f"tcp.port=={data_port},lbttcp", f"tcp.port=={source_request[1]},lbttcp",
                 f"tcp.port=={receiver_request[1]},lbttcp"]
    prefs = [f"lbttcp.source_port_low:{domain.tcp_low}", f"lbttcp.source_port_high:{domain.tcp_high}",
             f"lbttcp.request_port_low:{domain.request_low}", f"lbttcp.request_port_high:{domain.request_high}",
             "lbmc.reassemble_fragments:TRUE", *domain.lbmr_prefs()]
    assert_no_expert_info(pcap, decode_as, prefs, min_severity="warn")
    rows = decode(pcap, decode_as, prefs, display_filter=capture.not_canary, fields=[
        "tcp.srcport", "tcp.dstport", "_ws.malformed", "lbmc.type", "lbmc.tidx", "lbmc.sqn", "lbmc.frag.first_sqn",
        "lbmr.tir.name", "lbmr.topt.latejoin.src_tcp_port", "lbmr.topt.latejoin.src_ip_addr",
        "lbmr.topt.latejoin.transport_idx", "lbmr.topt.latejoin.low_seqnum", "lbmr.topt.latejoin.high_seqnum",
        "lbmc.lji_req.request_idx", "lbmc.lji_req.transport_idx", "lbmc.lji_req.topic_idx", "lbmc.lji_req.req_ip",
        "lbmc.lji_req.req_port", "lbmc.lji_req.flags.m_flag", "lbmc.lji_req.flags.o_flag",
        "lbmc.lji_req.rx_req_max", "lbmc.lji_req.rx_req_outstanding_max",
        "lbmc.ume_lj_info.low_seqnum", "lbmc.ume_lj_info.high_seqnum", "lbmc.ume_lj_info.qidx",
        "lbmc.ume_rxreq.request_idx", "lbmc.ume_rxreq.transport_idx", "lbmc.ume_rxreq.id_2",
        "lbmc.ume_rxreq.seqnum", "lbmc.ume_rxreq.rx_port", "lbmc.ume_rxreq.rx_ip"])
    assert not [r for r in rows if "_ws.malformed" in r], "malformed frames"

    def values(field: str, **where) -> list[str]:
        return [v for r in rows if all(r.get(k) == [str(w)] for k, w in where.items()) for v in r.get(field, [])]

    # The TIR: where to ask, and what is retained (the one the receiver used: 0..7).
    options = [(r["lbmr.topt.latejoin.src_ip_addr"][0], int(r["lbmr.topt.latejoin.src_tcp_port"][0]),
                int(r["lbmr.topt.latejoin.transport_idx"][0]), int(r["lbmr.topt.latejoin.low_seqnum"][0]),
                int(r["lbmr.topt.latejoin.high_seqnum"][0]))
               for r in rows if r.get("lbmr.tir.name") == ["lj.wire"] and "lbmr.topt.latejoin.src_tcp_port" in r]
    assert options, "TIRs with the LATEJOIN option"
    assert {o[:3] for o in options} == {(*source_request, transport_idx)}
    assert (*source_request, transport_idx, 0, 7) in options
    # LJI_REQ to the source's request port.
    (request_idx,) = values("lbmc.lji_req.request_idx", **{"tcp.dstport": source_request[1]})
    assert values("lbmc.lji_req.transport_idx") == [str(transport_idx)]
    assert values("lbmc.lji_req.topic_idx") == [str(topic_idx)]
    assert values("lbmc.lji_req.req_ip") == [receiver_request[0]]
    assert values("lbmc.lji_req.req_port") == [str(receiver_request[1])]
    assert values("lbmc.lji_req.rx_req_max") == ["100"] and values("lbmc.lji_req.flags.m_flag") == ["1"]
    assert values("lbmc.lji_req.rx_req_outstanding_max") == ["200"]
    # UME_LJ_INFO back to the receiver's.
    assert values("lbmc.ume_lj_info.low_seqnum", **{"tcp.dstport": receiver_request[1]}) == ["0"]
    assert values("lbmc.ume_lj_info.high_seqnum") == ["7"]
    assert values("lbmc.ume_lj_info.qidx") == [request_idx]
    # UME_RXREQ: one per frame retained, to the source's request port.
    assert values("lbmc.ume_rxreq.seqnum", **{"tcp.dstport": source_request[1]}) == [str(n) for n in range(8)]
    assert set(values("lbmc.ume_rxreq.request_idx")) == {request_idx}
    assert set(values("lbmc.ume_rxreq.transport_idx")) == {str(transport_idx)}
    assert set(values("lbmc.ume_rxreq.id_2")) == {str(topic_idx)}
    assert set(values("lbmc.ume_rxreq.rx_port")) == {str(receiver_request[1])}
    assert set(values("lbmc.ume_rxreq.rx_ip")) == {receiver_request[0]}
    # RETRANS (type 10) on the receiver's request port: the 8 frames as sent, fragments too.
    to_receiver = [r for r in rows if r.get("tcp.dstport") == [str(receiver_request[1])]]
    retrans = [(t, int(x), int(s)) for r in to_receiver      # (CONTROL messages have no tidx, sqn)
               for t, x, s in zip([t for t in r.get("lbmc.type", []) if t != "8"], r.get("lbmc.tidx", []),
                                  r.get("lbmc.sqn", []))]
    assert retrans == [("10", topic_idx, n) for n in range(8)]
    assert [v for r in to_receiver for v in r.get("lbmc.frag.first_sqn", [])] == ["2", "2", "2"]
    # The live message afterwards, on the source's data connection, as an ordinary MESSAGE.
    live = [(t, int(s)) for r in rows if r.get("tcp.srcport") == [str(data_port)]
            for t, s in zip([t for t in r.get("lbmc.type", []) if t != "8"], r.get("lbmc.sqn", []))]
    assert live == [("0", 8)]


# -- 8. malformed input to the request ports ---------------------------------------------------------
def _unknown_header_control() -> bytes:
    """A CONTROL message with one header of a type nobody knows (0x7E), 4 bytes long."""
    return CONTROL_HEADER.pack(LBMC_TYPE_CONTROL, 0x7E, CONTROL_HEADER.size + 4) + bytes([NHDR_NONE, 4, 0, 0])


def _retrans(tidx: int, sqn: int, data: bytes) -> bytes:
    return MESSAGE_HEADER.pack(LBMC_TYPE_RETRANS, NHDR_DATA, MESSAGE_HEADER.size + len(data), tidx, sqn) + data


def test_malformed_input_to_the_request_ports_is_counted_and_a_late_join_goes_on(domain):
    with Context(**domain.overrides(), late_join=True, transport_tcp_datagram_max_size=8192) as sending, \
            Context(**domain.overrides(), late_join_info_request_interval=100) as receiving:
        source = sending.source("lj.rogue")
        payloads = [_payload(n, 20_000 if n == 4 else 50) for n in range(14)]
        _send(source, payloads[:8])
        answer = _withhold_answers(sending, source)
        got = Collector(receiving, "lj.rogue")
        wait_for(lambda: source.receiver_count >= 1 and _lj(sending)["lj_requests_unknown_source"] >= 1, 10,
                 message="the late join under way")
        _send(source, payloads[8:10])
        before_src, before_rcv = _lj(sending), _lj(receiving)
        # To the receiver's request port: an unknown CONTROL header; RETRANS for a topic index
        # nobody asked about, and for the late-joined one (sequence numbers it will ask for), from a
        # connection that is not the source context's.
        bogus = b"not from the source"
        with socket.create_connection(receiving.request_address(), timeout=10) as rogue:
            rogue.sendall(_unknown_header_control() + _retrans(999, 0, bogus)
                          + b"".join(_retrans(source.index, sqn, bogus) for sqn in range(4)))
            wait_for(lambda: _lj(receiving)["uim_frames_unknown"] == before_rcv["uim_frames_unknown"] + 6, 10,
                     message="the receiver's request port counts the six frames")
        # To the source's: an unknown CONTROL header, an empty RETRANS on a connection that asked for
        # nothing, late-join requests for a transport it does not have (77).
        with socket.create_connection(sending.request_address(), timeout=10) as rogue:
            unknown = LbmcMessage(LBMC_TYPE_CONTROL, [
                LjiRequest(9, 77, source.index, "127.0.0.1", 9, 0, 0, 0, 0),
                UmeRxReq(9, 77, source.index, 0, 9, "127.0.0.1")])
            rogue.sendall(_unknown_header_control() + _retrans(source.index, 0, b"")
                          + encode_lbmc(unknown))
            # (lj_requests_unknown_source grows anyway: the withheld receiver keeps asking.)
            wait_for(lambda: _lj(sending)["uim_frames_unknown"] == before_src["uim_frames_unknown"] + 2
                     and _lj(sending)["lj_retransmissions_unavailable"] == 1,
                     10, message="the source's request port counts them")
        # A stream that breaks the framing is cut off; the port goes on.
        with socket.create_connection(receiving.request_address(), timeout=10) as rogue:
            rogue.sendall(b"\x08\xff\x00\x02")
            assert rogue.recv(10) == b""
        assert receiving.counters()["responses_malformed"] == 1
        wait_for(lambda: _held(receiving) == 2, 10, message="the live messages held back")
        assert got.messages == []
        answer()
        got.wait(10, what="the retransmitted and the held live messages")
        _send(source, payloads[10:])
        got.wait(14)
        _assert_retransmitted_then_live(got, payloads, 8)
        assert bogus not in b"".join(m.data for m in got.messages)
        rcv, counters = _lj(receiving), receiving.counters()
        assert rcv["lj_retransmissions_given_up"] == rcv["lj_messages_incomplete"] == 0
        assert counters["response_frames_unknown"] == sending.counters()["response_frames_unknown"] == 0
        assert counters["responses_unmatched"] == 0


# -- several receivers, and umrcv ----------------------------------------------------------------------
def test_two_receivers_of_one_topic_in_one_context_both_get_what_came_before(domain):
    with Context(**domain.overrides(), late_join=True) as sending, \
            Context(**domain.overrides(), retransmit_request_interval=200,
                    retransmit_request_message_timeout=1000) as receiving:
        source = sending.source("lj.two")
        payloads = [_payload(n) for n in range(20)]
        _send(source, payloads)
        first, second = Collector(receiving, "lj.two"), Collector(receiving, "lj.two")
        # (One TCP connection for both: the context joins the session once.)
        wait_for(lambda: _lj(sending)["lj_info_requests_rcved"] >= 2, 10, message="both receivers ask")
        wait_for(lambda: receiving.loop.call_and_wait(lambda: not receiving.late_join_clients), 10,
                 message="both late joins over")
        rcv = _lj(receiving)
    assert first.numbers == list(range(20)) and second.numbers == list(range(20)), rcv
    assert first.flags == second.flags == [True] * 20
    assert rcv["lj_retransmissions_given_up"] == 0, rcv


def test_a_finished_late_join_keeps_nothing_per_message_on_the_connection_that_brought_it(domain):
    """The source context's connection to our request port lives as long as the source does (months)
    and keeps the late-join clients it brought answers to: a finished one must hold nothing per
    message fetched, or each late join leaves its bookkeeping behind for good."""
    with Context(**domain.overrides(), late_join=True) as sending, Context(**domain.overrides()) as receiving:
        source = sending.source("lj.finished")
        payloads = [_payload(n) for n in range(2000)]
        _send(source, payloads)
        got = Collector(receiving, "lj.finished")
        got.wait(2000, what="retransmitted messages")
        wait_for(lambda: receiving.loop.call_and_wait(lambda: not receiving.late_join_clients), 10,
                 message="late join over")

        def kept_per_message():
            clients = [client for _, connection in receiving.request_port.connections.values()
                       for clients in connection.late_join.values() for client in clients]
            return len(clients), sum(len(c.asked_at) + len(c.requested) + len(c.to_ask) + len(c.frames)
                                     + len(c.lost) + len(c.held) for c in clients)
        clients, kept = receiving.loop.call_and_wait(kept_per_message)
    assert got.flags == [True] * 2000
    assert clients == 1 and kept == 0


def test_a_late_join_goes_on_after_the_source_contexts_connection_is_replaced(domain):
    """The retransmissions come on the connection the source's answer (UME_LJ_INFO) came on. If
    that connection goes while they are asked, the source answers the requests asked again on a
    new one: the receiver must recognise them there, not give them up as lost."""
    with Context(**domain.overrides(), late_join=True) as sending, \
            Context(**domain.overrides(), retransmit_request_interval=200,
                    retransmit_request_message_timeout=3000) as receiving:
        source = sending.source("lj.reconnect")
        payloads = [_payload(n) for n in range(20)]
        _send(source, payloads)
        server = sending.late_join_server
        answer = server._retransmit
        failed = []

        def connection_goes_first(request, out):
            if not failed:                  # the first request: its connection fails instead
                [connection] = sending.responder.connections.values()
                sending.responder._fail(connection, "closed by the test")
                failed.append(request.seqnum)
                return True
            return answer(request, out)
        server._retransmit = connection_goes_first
        got = Collector(receiving, "lj.reconnect")
        # Decided on the loop thread, a bool handed back: the joined dict itself, empty when
        # looked at, could be filled by the join before this thread tested it.
        wait_for(lambda: receiving.loop.call_and_wait(lambda: bool(got.receiver.joined) and not any(
            j.late_join for j in got.receiver.joined.values())), 10, message="late join over")
        source.send(_payload(20), flush=True)
        wait_for(lambda: 20 in got.numbers, 10, message="the live message")
        rcv = _lj(receiving)
    assert failed and rcv["lj_retransmissions_given_up"] == 0, rcv
    _assert_retransmitted_then_live(got, payloads + [_payload(20)], 20)


def test_two_receiving_contexts_one_with_a_wildcard_receiver_late_join_one_source_at_once(domain):
    with Context(**domain.overrides(), late_join=True) as sending, Context(**domain.overrides()) as one, \
            Context(**domain.overrides()) as other:
        source = sending.source("lj.pair")
        payloads = [_payload(n, 20_000 if n == 7 else 60) for n in range(25)]
        _send(source, payloads[:20])
        got = [Collector(one, "lj.pair"), Collector(other, "lj.pair", pattern=r"^lj\.pa")]
        for collector in got:
            collector.wait(20, what="retransmitted messages")
        _send(source, payloads[20:])
        for collector in got:
            collector.wait(25)
            _assert_retransmitted_then_live(collector, payloads, 20)
        assert _lj(sending)["lj_info_requests_rcved"] == 2


def test_umrcv_reports_the_retransmitted_messages_in_its_json(domain, tools):
    with Context(**domain.overrides(), late_join=True) as sending:
        source = sending.source("lj.tool")

        def message(n: int) -> bytes:
            return HEADER.pack(7, n, time.time_ns()) + bytes(30)

        _send(source, [message(n) for n in range(12)])
        receiver = tools.umrcv("-c", domain.config_path, "--json", "-C", 15, "--timeout", 30, "lj.tool")
        wait_for(lambda: source.receiver_count >= 1, 15, message="umrcv joins")
        wait_for(lambda: _lj(sending)["lj_retransmissions_sent"] == 12, 15, message="the retransmissions")
        _send(source, [message(n) for n in range(12, 15)])
        result = receiver.result(30)
    assert result["received"] == result["unique"] == 15
    assert result["retransmitted"] == 12
    assert result["duplicates"] == result["gaps"] == 0


@pytest.mark.parametrize("transport", ["tcp", "lbtrm"])
def test_a_late_join_across_the_sequence_number_wrap_gets_everything_in_order(tmp_path, transport):
    """A source at a million messages a second wraps its sequence numbers every 71 minutes: what it
    retains may run from near 2^32 past 0. Asked, delivered and held back in that order."""
    domain = new_domain(tmp_path)
    before = [_payload(n, 20_000 if n % 7 == 3 else 40) for n in range(30)]
    live = [_payload(n) for n in range(30, 40)]
    with Context(**domain.overrides(), transport=transport, late_join=True, **_SMALL_DATAGRAMS[transport]) \
            as sending, Context(**domain.overrides(), retransmit_request_outstanding_maximum=5) as receiving:
        source = sending.source("lj.wrap")
        source.sequence_number = 2**32 - 25
        for payload in before:
            source.send(payload, flush=transport == "lbtrm")
        source.flush()
        assert source.sequence_number < 100, "the numbers wrapped past 0"
        got = Collector(receiving, "lj.wrap")
        got.wait(len(before), what="retransmitted messages")
        _send(source, live)
        got.wait(len(before) + len(live))
        wait_for(lambda: receiving.loop.call_and_wait(lambda: not receiving.late_join_clients), 10,
                 message="the late join over")
        _assert_retransmitted_then_live(got, before + live, len(before))
        sqns = [m.sequence_number for m in got.messages]
        assert sqns[0] == 2**32 - 25 and sqns[-1] < 100


@pytest.mark.parametrize("transport", ["tcp", "lbtrm", "lbtipc"])
def test_a_source_sends_on_across_the_wrap_and_a_live_receiver_sees_no_gap(tmp_path, transport):
    """After 2^32 frames a topic's sequence numbers start again from 0: messages, fragments and
    requests go on, and a receiver that was there all along sees them in order, nothing lost."""
    domain = new_domain(tmp_path)
    with Context(**domain.overrides(), transport=transport, **_SMALL_DATAGRAMS[transport]) as sending, \
            Context(**domain.overrides()) as receiving:
        source = sending.source("lj.wrap.live")
        got = Collector(receiving, "lj.wrap.live")
        wait_for(lambda: source.receiver_count is None or source.receiver_count >= 1, 10, message="joined")
        wait_for(lambda: any(kind == "BOS" for kind, _ in got.events), 10, message="BOS")
        source.sequence_number = 2**32 - 4
        payloads = [_payload(n, 20_000 if n == 2 else 40) for n in range(8)]    # 2: fragments across 0
        for payload in payloads[:5]:
            source.send(payload, flush=True)
        pending = source.send_request(payloads[5] + b"x" * 20_000)               # a fragmented request too
        for payload in payloads[6:]:
            source.send(payload, flush=True)
        got.wait(len(payloads))
        pending.close()
        assert source.sequence_number < 20
    numbers = [_number(m) for m in got.messages]
    assert numbers == list(range(8)) and [kind for kind, _ in got.events] == ["BOS"]
    assert receiving.counters()["unrecoverable_loss_events"] == 0


def test_retransmissions_that_do_not_come_are_told_as_unrecoverable_loss_in_their_place(domain):
    """The source says it retains 0..29 but no longer has 10..12 when asked: the receiver gives
    them up after retransmit_request_message_timeout and the application is told, between 9 and
    13, then the live messages follow."""
    events = []
    with Context(**domain.overrides(), late_join=True) as sending, \
            Context(**domain.overrides(), retransmit_request_interval=100,
                    retransmit_request_message_timeout=400) as receiving:
        source = sending.source("lj.lost")
        payloads = [_payload(n) for n in range(30)]
        _send(source, payloads)
        retention = source.late_join[2]
        for sqn in (10, 11, 12):
            assert retention.discard(sqn)
        messages = []
        receiving.receiver("lj.lost", on_batch=messages.extend,
                           on_event=lambda e: events.append((e.kind, e.sequence_number, e.count, len(messages))))
        wait_for(lambda: len(messages) >= 27, 10, message="what the source still had")
        _send(source, [_payload(30)])
        wait_for(lambda: len(messages) >= 28, 10, message="the live message")
        rcv = _lj(receiving)
    assert [_number(m) for m in messages] == [n for n in range(31) if n not in (10, 11, 12)]
    assert [m.retransmit for m in messages] == [True] * 27 + [False]
    assert [e for e in events if e[0] == UNRECOVERABLE_LOSS] == [(UNRECOVERABLE_LOSS, 10, 3, 10)]
    assert rcv["lj_retransmissions_given_up"] == 3 and rcv["lj_messages_delivered"] == 27


def test_a_late_receiver_gets_each_retransmitted_message_with_its_properties(domain):
    # Properties end the payload and an APPHDR_CHAIN header says how long they are, in every
    # fragment: retransmitted, the data must come back without them and the properties with it.
    sent = [(b"small %d" % n, {"n": Property("int", n), "tag": Property("string", f"m{n}")}) for n in range(4)]
    sent.append((bytes(30_000), {"big": Property("boolean", True)}))             # fragments
    sent.append((b"plain", None))
    with Context(**domain.overrides(), late_join=True) as sending, Context(**domain.overrides()) as receiving:
        source = sending.source("lj.properties")
        for data, properties in sent:
            source.send_with_properties(data, properties)
        source.flush()
        got = Collector(receiving, "lj.properties")
        got.wait(len(sent), what="retransmitted messages")
        counters = _lj(receiving)
    assert [(m.data, m.properties) for m in got.messages] == sent
    assert all(m.retransmit for m in got.messages)
    assert counters["lj_messages_incomplete"] == counters["lj_properties_malformed"] == 0


def test_a_late_receiver_gets_a_request_sent_before_it_joined_in_its_place_and_can_answer_it(domain):
    # A request is a message of its source, retained with the others: retransmitted, it comes back
    # as a request (small, and fragmented), between the messages around it.
    responses: list[bytes] = []
    big = _payload(4, 20_000)
    with Context(**domain.overrides(), late_join=True, **_SMALL_DATAGRAMS["tcp"]) as sending, \
            Context(**domain.overrides()) as receiving:
        source = sending.source("lj.requests")
        _send(source, [_payload(n) for n in range(3)])
        small = source.send_request(_payload(3), lambda response: responses.append(response.data))
        fragmented = source.send_request(big, lambda response: responses.append(response.data))
        _send(source, [_payload(n) for n in range(5, 7)])
        got = Collector(receiving, "lj.requests")
        got.wait(7, what="retransmitted messages and requests")
        requests = answer_requests(got.messages, responses, [small, fragmented])
        rcv = _lj(receiving)
    assert got.numbers == list(range(7))
    assert [m.data for m in requests] == [_payload(3), big]
    assert [m.sequence_number for m in requests] == [3, 4]
    assert sorted(responses) == [b"re:000003", b"re:000004"]
    assert rcv["lj_messages_delivered"] == 7 and rcv["lj_messages_incomplete"] == 0
