"""Off-transport recovery (router.um.otr) and unrecoverable loss between real contexts on loopback.

A source with `late_join` retains what it sends and advertises its context's request port; a
receiver with `use_otr` asks that port (UME_RXREQ) for what its transport lost for good and gets it
back (RETRANS), delivered in sequence order with the live messages around it, flagged `otr`. A
receiver that cannot recover is told of each loss (an UNRECOVERABLE_LOSS event). A lost tail (no
later message shows the gap) is told by the source session's TSNIs (router.um.sequence_info).

Loss is made at the receiver on LBT-RM, with NAKs off (`transport_lbtrm_send_naks 0`) so the
transport gives each lost datagram up after `transport_lbtrm_nak_generation_interval` (100 ms
here). Most tests choose exactly which messages go: `Dropper` discards the datagrams carrying them
before the receiving session sees them (so the expected losses are known exactly); one uses
LBTRM_LOSS_RATE (random loss, read when the receiver's LBT-RM socket opens, at the join).
"""
from __future__ import annotations

import threading
import time

import pytest

from router.um.context import Context
from router.um.messages import UNRECOVERABLE_LOSS, RequestMessage
from router.um.wire.lbmc import MESSAGE_HEADER
from router.um.wire.lbmc_properties import Property
from router.um.wire.lbtrm import LbtrmData
from tests.support.domains import new_domain
from tests.support.processes import wait_for
from tests.support.retransmissions import answer_requests

pytestmark = pytest.mark.integration

# The receiver: the transport gives loss up quickly (no NAKs), OTR asks soon and often.
_GIVE_UP = {"transport_lbtrm_send_naks": False, "transport_lbtrm_nak_generation_interval": 100}
_OTR = {"use_otr": True, "otr_request_initial_delay": 100, "otr_request_minimum_interval": 100,
        "otr_request_maximum_interval": 400, **_GIVE_UP}
# The source: LBT-RM, retaining; an idle session's TSNIs every 200 ms (UM: 5 s) show a lost tail.
_SOURCE = {"transport": "lbtrm", "late_join": True, "transport_topic_sequence_number_info_interval": 200}


def _payload(n: int, size: int = 40) -> bytes:
    head = b"%06d|" % n
    return head + bytes([n % 251]) * max(0, size - len(head))


class Collector:
    """A receiver's messages, and its events with how many messages had come before each."""

    def __init__(self, context: Context, topic: str):
        self.messages: list = []
        self.events: list[tuple] = []          # (kind, sequence_number, count, messages before it)
        self.receiver = context.receiver(topic, on_batch=self.messages.extend, on_event=self._event)

    def _event(self, event) -> None:
        self.events.append((event.kind, event.sequence_number, event.count, len(self.messages)))

    def wait(self, count: int, timeout: float = 15) -> None:
        wait_for(lambda: len(self.messages) >= count, timeout, message=f"{count} messages")

    @property
    def sqns(self) -> list[int]:
        return [m.sequence_number for m in self.messages]

    @property
    def recovered(self) -> list[int]:
        return [m.sequence_number for m in self.messages if getattr(m, "otr", False)]

    @property
    def losses(self) -> list[tuple[int, int, int]]:
        return [(sqn, count, before) for kind, sqn, count, before in self.events if kind == UNRECOVERABLE_LOSS]


def _frames(payload) -> list[tuple[int, int]]:
    """(topic index, sequence number) of the MESSAGE frames in an LBT-RM datagram's payload."""
    out, offset = [], 0
    while offset + 4 <= len(payload):
        length = (payload[offset + 2] << 8) | payload[offset + 3]
        if length < 4:
            break
        if payload[offset] == 0 and length >= MESSAGE_HEADER.size:
            _, _, _, tidx, sqn = MESSAGE_HEADER.unpack_from(payload, offset)
            out.append((tidx, sqn))
        offset += length
    return out


class Dropper:
    """Lose, at the receiver, the LBT-RM DATA datagrams (not retransmissions) holding a frame of
    `tidx` whose sequence number is in `sqns`; `dropped` lists the frames that went with them."""

    def __init__(self, stream, tidx: int, sqns):
        self.tidx, self.sqns = tidx, set(sqns)
        self.dropped: list[int] = []
        self.lock = threading.Lock()
        # The group socket offers new DATA to the stream's `in_order_data` first, and passes on
        # to its `packet` what that does not take: a datagram is lost on either way.
        self.original = stream.packet
        self.original_in_order = stream.in_order_data
        stream.packet = self._packet
        stream.in_order_data = self._in_order_data

    def _lost(self, payload) -> bool:
        frames = [sqn for tidx, sqn in _frames(payload) if tidx == self.tidx]
        if not self.sqns.intersection(frames):
            return False
        with self.lock:
            self.dropped += frames
        return True

    def _in_order_data(self, sqn, payload, now) -> bool:
        return self._lost(payload) or self.original_in_order(sqn, payload, now)   # True: gone, untold

    def _packet(self, packet, now) -> None:
        if isinstance(packet, LbtrmData) and not packet.retransmission and self._lost(packet.payload):
            return
        self.original(packet, now)


def _joined(receiving: Context, got: Collector) -> None:
    """Wait for the receiver to join its source (BOS) and for its late join (of nothing) to finish."""
    wait_for(lambda: any(e[0] == "BOS" for e in got.events), 10, message="BOS")
    wait_for(lambda: all(j.late_join is None for j in list(got.receiver.joined.values())), 10,
             message="late join done")


def _stream(got: Collector):
    """The LBT-RM stream delivering the (one) source `got`'s receiver joined."""
    [joined] = got.receiver.joined.values()
    return joined.client


def _send(source, payloads) -> None:
    for payload in payloads:
        source.send(payload, flush=True)        # a datagram each: what is dropped is one message


def _otr(context: Context) -> dict[str, int]:
    return {k: v for k, v in context.counters().items() if k.startswith(("otr_", "unrecoverable_", "lj_", "uim_"))}


def _runs(sqns) -> list[tuple[int, int]]:
    """Sorted sequence numbers as (first, count) runs."""
    runs: list[list[int]] = []
    for sqn in sorted(sqns):
        if runs and runs[-1][0] + runs[-1][1] == sqn:
            runs[-1][1] += 1
        else:
            runs.append([sqn, 1])
    return [tuple(run) for run in runs]


# -- 1. lost and recovered -----------------------------------------------------------------------------
def test_what_lbtrm_lost_is_recovered_in_order_and_flagged_otr(tmp_path):
    domain = new_domain(tmp_path)
    payloads = [_payload(n, 40 + n % 50) for n in range(80)]
    lost = {3, 17, 18, 19, 40, 41, 60}
    with Context(**domain.overrides(), **_SOURCE) as sending, Context(**domain.overrides(), **_OTR) as receiving:
        source = sending.source("otr.basic")
        got = Collector(receiving, "otr.basic")
        _joined(receiving, got)
        dropper = Dropper(_stream(got), source.index, lost)
        _send(source, payloads)
        got.wait(len(payloads))
        # Requests asked twice are answered twice; the second copy is refused (uim_frames_unknown).
        wait_for(lambda: _otr(sending)["lj_rx_requests_rcved"] == _otr(receiving)["otr_requests_sent"]
                 and _otr(receiving)["uim_frames_unknown"] == _otr(sending)["lj_retransmissions_sent"] - len(lost),
                 10, message="every request answered")
        src, rcv = _otr(sending), _otr(receiving)
    assert sorted(dropper.dropped) == sorted(lost)
    assert got.sqns == list(range(len(payloads)))
    assert [m.data for m in got.messages] == payloads
    assert got.recovered == sorted(lost)
    assert all(not m.retransmit for m in got.messages)
    assert got.events == [("BOS", 0, 0, 0)]
    assert rcv["otr_messages_missing"] == rcv["otr_frames_recovered"] == rcv["otr_messages_recovered"] == len(lost)
    assert rcv["otr_requests_sent"] >= len(lost)
    assert rcv["otr_messages_unrecovered"] == rcv["otr_messages_incomplete"] == rcv["otr_cache_overflows"] == 0
    assert rcv["unrecoverable_loss_events"] == rcv["unrecoverable_loss_messages"] == 0
    assert src["lj_retransmissions_sent"] == src["lj_rx_requests_rcved"] >= len(lost)
    assert src["lj_retransmissions_unavailable"] == src["lj_requests_unknown_source"] == 0


def test_random_lbtrm_loss_is_recovered_every_message_once_in_order(tmp_path, monkeypatch):
    domain = new_domain(tmp_path)
    count = 2000
    payloads = [_payload(n, 30 + n % 40) for n in range(count)]
    monkeypatch.setenv("LBTRM_LOSS_RATE", "5")
    with Context(**domain.overrides(), **_SOURCE) as sending, Context(**domain.overrides(), **_OTR) as receiving:
        source = sending.source("otr.random")
        got = Collector(receiving, "otr.random")
        _joined(receiving, got)
        [group] = receiving.lbtrm_groups.values()
        assert group.loss_rate == 0.05
        # The first message starts the receiver's stream (what is lost before it is no gap): not lost.
        group.loss_rate = 0.0
        _send(source, payloads[:1])
        got.wait(1)
        group.loss_rate = 0.05
        _send(source, payloads[1:])
        got.wait(count, timeout=30)
        dropped = group.counters["dgrams_dropped_simulated"]
        src, rcv = _otr(sending), _otr(receiving)
    assert got.sqns == list(range(count))
    assert [m.data for m in got.messages] == payloads
    assert dropped > 0 and len(got.recovered) > 0
    assert rcv["otr_messages_recovered"] == len(got.recovered)
    assert src["lj_retransmissions_sent"] >= len(got.recovered)
    assert rcv["unrecoverable_loss_events"] == 0 and got.losses == []


# -- 2. lost for good ------------------------------------------------------------------------------------
def test_without_otr_each_loss_is_an_unrecoverable_loss_event_in_its_place(tmp_path):
    domain = new_domain(tmp_path)
    payloads = [_payload(n) for n in range(80)]
    lost = {3, 17, 18, 19, 40, 41, 60}
    with Context(**domain.overrides(), **_SOURCE) as sending, Context(**domain.overrides(), **_GIVE_UP) as receiving:
        source = sending.source("otr.off")
        got = Collector(receiving, "otr.off")
        _joined(receiving, got)
        Dropper(_stream(got), source.index, lost)
        _send(source, payloads)
        got.wait(len(payloads) - len(lost))
        rcv, src = _otr(receiving), _otr(sending)
        assert receiving.otr_recoveries == {}
    kept = [n for n in range(len(payloads)) if n not in lost]
    assert got.sqns == kept and [m.data for m in got.messages] == [payloads[n] for n in kept]
    assert got.recovered == []
    # Each event says exactly which messages, told after those before them and before those after.
    assert got.losses == [(3, 1, 3), (17, 3, 16), (40, 2, 36), (60, 1, 54)]
    assert rcv["unrecoverable_loss_events"] == 4 and rcv["unrecoverable_loss_messages"] == len(lost)
    assert rcv["otr_requests_sent"] == rcv["otr_messages_missing"] == 0
    assert src["lj_rx_requests_rcved"] == 0


def test_without_otr_random_loss_events_cover_exactly_what_did_not_come(tmp_path, monkeypatch):
    domain = new_domain(tmp_path)
    count = 1000
    monkeypatch.setenv("LBTRM_LOSS_RATE", "5")
    with Context(**domain.overrides(), **_SOURCE) as sending, Context(**domain.overrides(), **_GIVE_UP) as receiving:
        source = sending.source("otr.off.random")
        got = Collector(receiving, "otr.off.random")
        _joined(receiving, got)
        [group] = receiving.lbtrm_groups.values()
        group.loss_rate = 0.0                      # the first message starts the stream: not lost
        _send(source, [_payload(0)])
        got.wait(1)
        group.loss_rate = 0.05
        _send(source, [_payload(n) for n in range(1, count)])
        # A lost tail is told by a TSNI.
        wait_for(lambda: len(got.messages) + sum(c for _, c, _ in got.losses) >= count, 20,
                 message="every message delivered or reported lost")
        rcv = _otr(receiving)
    delivered = got.sqns
    assert delivered == sorted(delivered) and len(set(delivered)) == len(delivered)
    reported = [sqn for first, n, _ in got.losses for sqn in range(first, first + n)]
    assert sorted(delivered + reported) == list(range(count))
    assert got.losses and _runs(reported) == [(first, n) for first, n, _ in got.losses]
    # Each is told in its place: after every message before it, before every one after it.
    for first, _, before in got.losses:
        assert all(sqn < first for sqn in delivered[:before]) and all(sqn > first for sqn in delivered[before:])
    assert rcv["unrecoverable_loss_messages"] == len(reported)
    assert rcv["unrecoverable_loss_events"] == len(got.losses)


def test_a_source_without_late_join_cannot_be_recovered_from_losses_are_reported(tmp_path):
    domain = new_domain(tmp_path)
    lost = {5, 6, 20}
    with Context(**domain.overrides(), **{**_SOURCE, "late_join": False}) as sending, \
            Context(**domain.overrides(), **_OTR) as receiving:
        source = sending.source("otr.nolj")
        got = Collector(receiving, "otr.nolj")
        _joined(receiving, got)
        Dropper(_stream(got), source.index, lost)
        _send(source, [_payload(n) for n in range(30)])
        got.wait(30 - len(lost))
        [joined] = got.receiver.joined.values()
        assert joined.otr is None and receiving.otr_recoveries == {}
        rcv = _otr(receiving)
    assert got.sqns == [n for n in range(30) if n not in lost] and got.recovered == []
    assert got.losses == [(5, 2, 5), (20, 1, 18)]
    assert rcv["otr_requests_sent"] == 0 and rcv["unrecoverable_loss_messages"] == 3


# -- 3. fragments -----------------------------------------------------------------------------------------
def test_a_fragmented_message_with_a_lost_fragment_is_recovered_whole(tmp_path):
    domain = new_domain(tmp_path)
    # 20 KB in 8 KB datagrams: 3 fragments. Message n is big when n % 3 == 1.
    payloads = [_payload(n, 20_000 if n % 3 == 1 else 60) for n in range(15)]
    first_sqn, sqn = [], 0
    for payload in payloads:
        first_sqn.append(sqn)
        sqn += 3 if len(payload) > 8192 else 1
    # Of the big ones: 1 loses its first fragment, 4 its middle one, 7 its last, 10 two of them;
    # and small message 12 is lost whole.
    lost = {first_sqn[1], first_sqn[4] + 1, first_sqn[7] + 2, first_sqn[10], first_sqn[10] + 2, first_sqn[12]}
    with Context(**domain.overrides(), **_SOURCE, transport_lbtrm_datagram_max_size=8192) as sending, \
            Context(**domain.overrides(), **_OTR) as receiving:
        source = sending.source("otr.frag")
        got = Collector(receiving, "otr.frag")
        _joined(receiving, got)
        dropper = Dropper(_stream(got), source.index, lost)
        _send(source, payloads)
        assert source.sequence_number == sqn
        got.wait(len(payloads))
        rcv = _otr(receiving)
    assert sorted(dropper.dropped) == sorted(lost)
    assert [m.data for m in got.messages] == payloads
    assert got.sqns == first_sqn
    assert got.recovered == [first_sqn[n] for n in (1, 4, 7, 10, 12)]
    # Every fragment of each recovered big message came back (the transport's copies of the others
    # went into a reassembly that could not complete).
    assert rcv["otr_frames_recovered"] == 4 * 3 + 1
    assert rcv["otr_messages_recovered"] == 5 and rcv["otr_messages_incomplete"] == 0
    assert got.losses == []


# -- 4. a lost tail ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("use_otr", [True, False], ids=["otr", "no-otr"])
def test_a_tsni_tells_of_a_lost_tail(tmp_path, use_otr):
    domain = new_domain(tmp_path)
    payloads = [_payload(n) for n in range(30)]
    lost = {27, 28, 29}                           # nothing after them would ever show the gap
    with Context(**domain.overrides(), **_SOURCE) as sending, \
            Context(**domain.overrides(), **(_OTR if use_otr else _GIVE_UP)) as receiving:
        source = sending.source("otr.tail")
        got = Collector(receiving, "otr.tail")
        _joined(receiving, got)
        stream = _stream(got)
        Dropper(stream, source.index, lost)
        _send(source, payloads)
        if use_otr:
            got.wait(30)
        else:
            wait_for(lambda: got.losses, 10, message="the loss event")
        # The source's loop counts a TSNI just after sending it, so the loss it told of can be seen
        # here first (it was, in one CI run): the count is waited for, not read once.
        wait_for(lambda: source.session.counters["tsni_sent"] > 0, 10, message="the TSNI counted")
        gaps = stream.counters["sequence_gaps"]
    assert gaps == 1
    if use_otr:
        assert got.sqns == list(range(30)) and got.recovered == [27, 28, 29]
        assert [m.data for m in got.messages] == payloads and got.losses == []
    else:
        assert got.sqns == list(range(27)) and got.losses == [(27, 3, 27)]


# -- 5. what the source no longer has ---------------------------------------------------------------------------
def test_what_the_source_no_longer_retains_is_given_up_and_the_held_messages_still_come_in_order(tmp_path):
    domain = new_domain(tmp_path)
    payloads = [_payload(n) for n in range(40)]       # 52-byte frames: the source keeps only its newest
    lost = {5, 20, 21}
    with Context(**domain.overrides(), **_SOURCE, retransmit_retention_size_limit=60) as sending, \
            Context(**domain.overrides(), **_OTR, otr_request_duration=1500) as receiving:
        source = sending.source("otr.gone")
        got = Collector(receiving, "otr.gone")
        _joined(receiving, got)
        Dropper(_stream(got), source.index, lost)
        _send(source, payloads)
        got.wait(40 - len(lost))
        wait_for(lambda: len(got.losses) == 2, 10, message="both losses told")
        # ... and answered: the source counts a request as it comes and its answer after it.
        wait_for(lambda: _otr(sending)["lj_rx_requests_rcved"] == _otr(receiving)["otr_requests_sent"]
                 == _otr(sending)["lj_retransmissions_unavailable"], 10, message="every request at the source")
        src, rcv = _otr(sending), _otr(receiving)
    # The messages after each loss were held back until it was given up, then delivered in order,
    # the loss told in its place.
    assert got.sqns == [n for n in range(40) if n not in lost]
    assert [m.data for m in got.messages] == [payloads[n] for n in got.sqns]
    assert got.losses == [(5, 1, 5), (20, 2, 19)] and got.recovered == []
    assert rcv["otr_messages_unrecovered"] == rcv["unrecoverable_loss_messages"] == 3
    assert rcv["unrecoverable_loss_events"] == 2 and rcv["otr_messages_recovered"] == 0
    # The first loss is asked for; a later one is too, unless the source's answer to the first
    # (UME_LJ_INFO: what it still retains) came after it was seen: then it is known gone unasked.
    assert rcv["otr_requests_sent"] >= 1
    assert src["lj_retransmissions_unavailable"] == src["lj_rx_requests_rcved"] == rcv["otr_requests_sent"]
    assert src["lj_retransmissions_sent"] == 0


def test_when_the_source_ends_the_held_messages_come_then_the_loss_is_told_then_eos(tmp_path):
    domain = new_domain(tmp_path)
    payloads = [_payload(n) for n in range(10)]
    with Context(**domain.overrides(), **_SOURCE) as sending, \
            Context(**domain.overrides(), **_OTR, otr_request_duration=60_000) as receiving:
        source = sending.source("otr.end")
        got = Collector(receiving, "otr.end")
        _joined(receiving, got)
        _, transport_idx, _ = source.late_join          # the source's context answers nothing
        sending.loop.call_and_wait(sending.late_join_server.remove, transport_idx, source.index)
        Dropper(_stream(got), source.index, {5})
        _send(source, payloads)
        wait_for(lambda: sending.counters()["lj_retransmissions_unavailable"] >= 2, 10, message="5 asked twice")
        assert got.sqns == [0, 1, 2, 3, 4]                # 6.. came after the loss was seen: held back
        source.close(final_advertisements=3)
        wait_for(lambda: any(kind == "EOS" for kind, *_ in got.events), 10, message="EOS")
        rcv = _otr(receiving)
        assert receiving.otr_recoveries == {}
    assert got.sqns == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    assert got.events == [("BOS", 0, 0, 0), (UNRECOVERABLE_LOSS, 5, 1, 5), ("EOS", 0, 0, 9)]
    assert rcv["otr_messages_unrecovered"] == rcv["unrecoverable_loss_messages"] == 1


# -- 6. requests -----------------------------------------------------------------------------------------------------
def test_requests_are_held_behind_a_loss_and_a_lost_request_is_recovered_and_can_be_answered(tmp_path):
    domain = new_domain(tmp_path)
    responses: list[bytes] = []
    with Context(**domain.overrides(), **_SOURCE) as sending, Context(**domain.overrides(), **_OTR) as receiving:
        source = sending.source("otr.req")
        got = Collector(receiving, "otr.req")
        _joined(receiving, got)
        # 0..9 messages, 10 a request, 11..14 messages, 15 a request, 16..19 messages.
        Dropper(_stream(got), source.index, {5, 15})
        _send(source, [_payload(n) for n in range(10)])
        first = source.send_request(_payload(10), lambda r: responses.append(r.data))
        _send(source, [_payload(n) for n in range(11, 15)])
        second = source.send_request(_payload(15), lambda r: responses.append(r.data))
        _send(source, [_payload(n) for n in range(16, 20)])
        got.wait(20)
        requests = answer_requests(got.messages, responses, [first, second])
    assert got.sqns == list(range(20))
    assert [m.sequence_number for m in requests] == [10, 15]
    assert got.recovered == [5, 15]                           # the lost request is flagged too
    assert [m.otr for m in requests] == [False, True] and not any(m.retransmit for m in requests)
    assert sorted(responses) == [b"re:000010", b"re:000015"]


def test_a_fragmented_request_with_a_lost_fragment_is_recovered_whole(tmp_path):
    domain = new_domain(tmp_path)
    big = _payload(1, 20_000)
    with Context(**domain.overrides(), **_SOURCE, transport_lbtrm_datagram_max_size=8192) as sending, \
            Context(**domain.overrides(), **_OTR) as receiving:
        source = sending.source("otr.bigreq")
        got = Collector(receiving, "otr.bigreq")
        _joined(receiving, got)
        Dropper(_stream(got), source.index, {2})            # the request's middle fragment
        _send(source, [_payload(0)])
        pending = source.send_request(big)                                 # sqns 1, 2, 3
        _send(source, [_payload(4)])
        wait_for(lambda: 4 in got.sqns, 10, message="the message after the request")
        pending.close()
        rcv = _otr(receiving)
    told = [m.sequence_number for m in got.messages] + [sqn for sqn, _, _ in got.losses]
    assert 1 in told, "the request was neither delivered nor reported lost"
    assert [m.sequence_number for m in got.messages] == [0, 1, 4] and got.messages[1].data == big
    assert isinstance(got.messages[1], RequestMessage)
    assert rcv["otr_frames_recovered"] == 3 and rcv["otr_messages_incomplete"] == 0 and got.losses == []


# -- 7. TSNI timing ----------------------------------------------------------------------------------------
def test_tsnis_stop_after_the_active_threshold_and_resume_when_the_topic_moves(tmp_path):
    domain = new_domain(tmp_path)
    interval, threshold = 0.1, 1
    with Context(**domain.overrides(), transport_topic_sequence_number_info_interval=int(interval * 1000),
                 transport_topic_sequence_number_info_active_threshold=threshold) as sending, \
            Context(**domain.overrides()) as receiving:
        source = sending.source("tsni.threshold")              # LBT-TCP
        got = Collector(receiving, "tsni.threshold")
        wait_for(lambda: got.events and source.receiver_count == 1, 10, message="the receiver connected")
        counters = source.session.counters
        source.send(b"one", flush=True)
        got.wait(1)
        wait_for(lambda: counters["tsni_sent"] >= 2, 10, message="TSNIs of an idle session")
        quiet = _quiet(lambda: counters["tsni_sent"], 0.6, 15)
        # At most one each interval from the first for `threshold` seconds (fewer on a slow machine).
        assert 2 <= quiet <= threshold / interval + 1
        source.send(b"two", flush=True)
        wait_for(lambda: counters["tsni_sent"] > quiet, 10, message="TSNIs again after the topic moved")
        got.wait(2)
        [stream] = receiving.clients.values()
        assert stream.counters["control_frames"] > 0
        assert stream.counters["sequence_gaps"] == 0 and stream.counters["malformed"] == 0
    assert got.losses == [] and len(got.messages) == 2


@pytest.mark.parametrize("transport", ["tcp", "lbtrm", "lbtru", "lbtipc"])
def test_tsnis_reach_receivers_on_every_transport_and_show_no_loss_where_there_is_none(tmp_path, transport):
    domain = new_domain(tmp_path)
    with Context(**domain.overrides(), transport=transport, late_join=True,
                 transport_topic_sequence_number_info_interval=100) as sending, \
            Context(**domain.overrides(), **_OTR) as receiving:
        source = sending.source("tsni." + transport)
        got = Collector(receiving, "tsni." + transport)
        _joined(receiving, got)
        # A connection-oriented source sends only to receivers it has taken in.
        wait_for(lambda: source.receiver_count in (None, 1), 10, message="the source has the receiver")
        _send(source, [_payload(n) for n in range(3)])
        got.wait(3)
        [joined] = got.receiver.joined.values()
        stream = joined.client
        wait_for(lambda: source.session.counters["tsni_sent"] >= 3, 10, message="TSNIs sent")
        # (LBT-TCP's stream starts with a CONTROL message of its own, its session ID.)
        wait_for(lambda: stream.counters["control_frames"] >= 2, 10, message="TSNIs at the receiver")
        counters = dict(stream.counters)
        rcv = _otr(receiving)
    assert counters["sequence_gaps"] == 0 and counters["malformed"] == 0
    assert got.sqns == [0, 1, 2] and got.losses == [] and rcv["otr_messages_missing"] == 0


def _quiet(read, still: float, timeout: float) -> int:
    """Wait until `read()` has not changed for `still` seconds; its value then."""
    state = {"value": read(), "since": time.monotonic()}

    def settled() -> bool:
        value, now = read(), time.monotonic()
        if value != state["value"]:
            state.update(value=value, since=now)
            return False
        return now - state["since"] >= still

    wait_for(settled, timeout, message=f"no change for {still} s")
    return state["value"]


def test_a_busy_session_sends_no_tsni_and_an_idle_one_does(tmp_path):
    domain = new_domain(tmp_path)
    with Context(**domain.overrides(), **{**_SOURCE, "transport_topic_sequence_number_info_interval": 400}) \
            as sending, Context(**domain.overrides(), **_GIVE_UP) as receiving:
        source = sending.source("tsni.busy")
        got = Collector(receiving, "tsni.busy")
        _joined(receiving, got)
        counters = source.session.counters
        assert counters["tsni_sent"] == 0                      # nothing sent yet: nothing to say
        deadline = time.monotonic() + 1.3                      # three intervals and more
        n = 0
        while time.monotonic() < deadline:
            source.send(_payload(n), flush=True)
            n += 1
            time.sleep(0.01)
        assert counters["tsni_sent"] == 0
        wait_for(lambda: counters["tsni_sent"] > 0, 10, message="a TSNI once the session is idle")
        got.wait(n)
    assert got.sqns == list(range(n)) and got.losses == []


# -- 8. more than one source or receiver, late join, connections ------------------------------------------
def test_recoveries_of_two_sources_with_the_same_topic_index_do_not_take_each_others_messages(tmp_path):
    domain = new_domain(tmp_path)
    with Context(**domain.overrides(), **_SOURCE) as sending_a, Context(**domain.overrides(), **_SOURCE) as sending_b, \
            Context(**domain.overrides(), **_OTR) as receiving:
        source_a, source_b = sending_a.source("otr.a"), sending_b.source("otr.b")
        assert source_a.index == source_b.index == 1             # each context numbers its own topics
        got_a = Collector(receiving, "otr.a")
        _joined(receiving, got_a)
        got_b = Collector(receiving, "otr.b")
        _joined(receiving, got_b)
        for got, source in ((got_a, source_a), (got_b, source_b)):
            Dropper(_stream(got), source.index, {5})
        # A's context does not answer yet: B's answer comes first.
        _, transport_idx, retention = source_a.late_join
        sending_a.loop.call_and_wait(sending_a.late_join_server.remove, transport_idx, source_a.index)
        _send(source_a, [b"A%05d" % n for n in range(10)])
        _send(source_b, [b"B%05d" % n for n in range(10)])
        wait_for(lambda: sending_a.counters()["lj_retransmissions_unavailable"] >= 1
                 and sending_b.counters()["lj_retransmissions_sent"] >= 1, 10, message="both asked")
        sending_a.loop.call_and_wait(sending_a.late_join_server.add, transport_idx, source_a.index, retention)
        got_a.wait(10)
        got_b.wait(10)
    assert [m.data for m in got_b.messages] == [b"B%05d" % n for n in range(10)]
    assert [m.data for m in got_a.messages] == [b"A%05d" % n for n in range(10)]


def test_two_receivers_of_one_context_on_one_source_each_recover_every_loss(tmp_path):
    domain = new_domain(tmp_path)
    payloads = [_payload(n) for n in range(30)]
    with Context(**domain.overrides(), **_SOURCE) as sending, Context(**domain.overrides(), **_OTR) as receiving:
        source = sending.source("otr.two")
        first, second = Collector(receiving, "otr.two"), Collector(receiving, "otr.two")
        _joined(receiving, first)
        _joined(receiving, second)
        assert _stream(first) is _stream(second)             # one stream, two joined sources
        Dropper(_stream(first), source.index, {5, 6, 12})
        _send(source, payloads)
        first.wait(30)
        second.wait(30)
        rcv = _otr(receiving)
    for got in (first, second):
        assert got.sqns == list(range(30)) and got.recovered == [5, 6, 12]
        assert [m.data for m in got.messages] == payloads
    assert rcv["otr_messages_recovered"] == 6 and rcv["unrecoverable_loss_events"] == 0


def test_a_loss_recovered_while_late_join_still_fetches_is_delivered_in_order(tmp_path):
    domain = new_domain(tmp_path)
    payloads = [_payload(n) for n in range(40)]
    with Context(**domain.overrides(), **_SOURCE) as sending, \
            Context(**domain.overrides(), **_OTR, late_join_info_request_interval=4000) as receiving:
        source = sending.source("otr.lj")
        _send(source, payloads[:20])                               # before the receiver: late join's
        # The source's context answers nothing (late join, OTR) until the gap has been asked about.
        _, transport_idx, retention = source.late_join
        sending.loop.call_and_wait(sending.late_join_server.remove, transport_idx, source.index)
        got = Collector(receiving, "otr.lj")
        wait_for(lambda: got.events, 10, message="BOS")
        Dropper(_stream(got), source.index, {25})
        _send(source, payloads[20:])
        wait_for(lambda: sending.counters()["lj_retransmissions_unavailable"] >= 1, 10, message="OTR's request")
        sending.loop.call_and_wait(sending.late_join_server.add, transport_idx, source.index, retention)
        # OTR asks again within 400 ms; late join's next LJI_REQ comes 4 s after its first.
        got.wait(40)
    assert got.sqns == list(range(40)), got.sqns[:3]
    assert [m.retransmit for m in got.messages] == [True] * 20 + [False] * 20


def test_a_loss_while_late_join_still_fetches_is_told_in_its_place_after_what_came_before(tmp_path):
    """Without OTR a loss is told at once, unless late join is holding back the live messages
    before it: then it waits with them, and is told after the retransmitted and the held ones."""
    domain = new_domain(tmp_path)
    payloads = [_payload(n) for n in range(40)]
    with Context(**domain.overrides(), **_SOURCE) as sending, \
            Context(**domain.overrides(), **_GIVE_UP, late_join_info_request_interval=200) as receiving:
        source = sending.source("lj.loss")
        _send(source, payloads[:20])                               # before the receiver: late join's
        _, transport_idx, retention = source.late_join
        sending.loop.call_and_wait(sending.late_join_server.remove, transport_idx, source.index)
        got = Collector(receiving, "lj.loss")
        wait_for(lambda: got.events, 10, message="BOS")
        Dropper(_stream(got), source.index, {25})
        _send(source, payloads[20:])
        stream = _stream(got)
        wait_for(lambda: stream.counters["sequence_gaps"] >= 1, 10, message="the loss seen")
        sending.loop.call_and_wait(sending.late_join_server.add, transport_idx, source.index, retention)
        got.wait(39)
        wait_for(lambda: got.losses, 10, message="the loss told")
    assert got.sqns == [n for n in range(40) if n != 25]
    assert [m.retransmit for m in got.messages] == [True] * 20 + [False] * 19
    assert got.losses == [(25, 1, 25)]


def test_recovery_goes_on_after_the_source_contexts_connection_is_replaced(tmp_path):
    domain = new_domain(tmp_path)
    payloads = [_payload(n) for n in range(20)]
    with Context(**domain.overrides(), **_SOURCE) as sending, \
            Context(**domain.overrides(), **_OTR, otr_request_duration=2000) as receiving:
        source = sending.source("otr.reconnect")
        got = Collector(receiving, "otr.reconnect")
        _joined(receiving, got)
        Dropper(_stream(got), source.index, {5, 15})
        _send(source, payloads[:10])
        got.wait(10)
        assert got.recovered == [5]
        # The source context's answers came on one connection to our request port: it goes.
        [connection] = sending.responder.connections.values()
        sending.loop.call_and_wait(sending.responder._fail, connection, "closed by the test")
        _send(source, payloads[10:])
        wait_for(lambda: len(got.messages) + len(got.losses) >= 20, 10, message="15 recovered or given up")
        src, rcv = _otr(sending), _otr(receiving)
    assert got.losses == [], (src, rcv)
    assert got.sqns == list(range(20)) and got.recovered == [5, 15]


def test_each_retry_binds_the_recovery_to_its_connection_once_however_long_it_lives(tmp_path):
    """Every retry asks what the source retains again (LJI_REQ), and each answer binds the
    connection it came on to the recovery: a recovery that lives for months and retries now and
    then must be bound there once, not once more per answer."""
    domain = new_domain(tmp_path)
    payloads = [_payload(n) for n in range(20)]
    with Context(**domain.overrides(), **_SOURCE) as sending, Context(**domain.overrides(), **_OTR) as receiving:
        source = sending.source("otr.rebind")
        got = Collector(receiving, "otr.rebind")
        _joined(receiving, got)
        Dropper(_stream(got), source.index, {5})
        [joined] = got.receiver.joined.values()
        recovery = joined.otr
        # The first answers are lost on the way: the recovery asks again, and again.
        refused = []
        take = recovery.retransmission

        def lossy(frame):
            if len(refused) < 4:
                refused.append(frame)
                return False
            return take(frame)
        recovery.retransmission = lossy
        _send(source, payloads)
        got.wait(20)
        assert len(refused) == 4 and got.recovered == [5]

        def bindings():
            return [client for _, connection in receiving.request_port.connections.values()
                    for clients in connection.late_join.values() for client in clients if client is recovery]
        bound = receiving.loop.call_and_wait(bindings)
    assert len(bound) == 1


# -- 11. message properties --------------------------------------------------------------------------------
def _properties(n: int) -> dict:
    return {"n": Property("int", n), "venue": Property("string", f"V{n % 3}")}


def _recover_with_properties(tmp_path, topic: str, sent: list, lost: set, **source_options):
    """`sent` ((data, properties or None)) from an LBT-RM source to an OTR receiver that loses the
    frames numbered in `lost`: (what was received, the dropper, the receiver's OTR counters, the
    source's next sequence number)."""
    domain = new_domain(tmp_path)
    with Context(**domain.overrides(), **_SOURCE, **source_options) as sending, \
            Context(**domain.overrides(), **_OTR) as receiving:
        source = sending.source(topic)
        got = Collector(receiving, topic)
        _joined(receiving, got)
        dropper = Dropper(_stream(got), source.index, lost)
        for data, properties in sent:
            source.send_with_properties(data, properties, flush=True)
        got.wait(len(sent))
        return got, dropper, _otr(receiving), source.sequence_number


def test_what_lbtrm_lost_of_messages_with_properties_is_recovered_with_them(tmp_path):
    sent = [(_payload(n), _properties(n) if n % 5 else None) for n in range(30)]   # some plain among them
    lost = {3, 4, 10, 17, 25}                                # 10 and 25 are plain
    got, dropper, rcv, _ = _recover_with_properties(tmp_path, "otr.properties", sent, lost)
    assert sorted(dropper.dropped) == sorted(lost)
    assert [(m.data, m.properties) for m in got.messages] == sent
    assert got.recovered == sorted(lost)
    assert rcv["otr_messages_recovered"] == len(lost)
    assert rcv["otr_messages_incomplete"] == rcv["otr_properties_malformed"] == rcv["otr_messages_unrecovered"] == 0
    assert got.losses == []


def test_a_fragmented_message_with_properties_that_lost_a_fragment_is_recovered_whole_with_them(tmp_path):
    # 20 KB in 8 KB datagrams: 3 fragments, each with the APPHDR_CHAIN header. Message n is big when n % 3 == 1.
    sent = [(_payload(n, 20_000 if n % 3 == 1 else 60), _properties(n)) for n in range(10)]
    first_sqn, sqn = [], 0
    for data, _ in sent:
        first_sqn.append(sqn)
        sqn += 3 if len(data) > 8000 else 1
    # Big message 1 loses its first fragment, 4 its middle one, 7 its last; small message 8 is lost whole.
    lost = {first_sqn[1], first_sqn[4] + 1, first_sqn[7] + 2, first_sqn[8]}
    got, dropper, rcv, next_sqn = _recover_with_properties(tmp_path, "otr.properties.frag", sent, lost,
                                                           transport_lbtrm_datagram_max_size=8192)
    assert next_sqn == sqn
    assert sorted(dropper.dropped) == sorted(lost)
    assert [(m.data, m.properties) for m in got.messages] == sent
    assert got.sqns == first_sqn
    assert got.recovered == [first_sqn[n] for n in (1, 4, 7, 8)]
    assert rcv["otr_frames_recovered"] == 3 * 3 + 1
    assert rcv["otr_messages_recovered"] == 4
    assert rcv["otr_messages_incomplete"] == rcv["otr_properties_malformed"] == 0
    assert got.losses == []
