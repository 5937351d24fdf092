"""Late join and what the transport says meanwhile, without a network.

The real receiver side (router.um.receiver.JoinedSource, router.um.late_join.LateJoinClient and,
where the receiver has `use_otr`, router.um.otr.OtrRecovery) driven by hand as a transport would
drive it: live batches, gaps (`on_gap`), and the source's answers (UME_LJ_INFO, RETRANS frames).
A fake context records what is asked of the source; its loop's timers are fired by the test.

The case that matters here is a young LBT-RM session: the receiver repairs the session's first
datagrams by NAK while late join fetches the same messages from the source's retention, and one
datagram cannot be repaired. The transport then tells a gap among messages late join delivers.
"""
from __future__ import annotations

from types import SimpleNamespace

from router.um.late_join import LateJoinClient, LateJoinSettings
from router.um.requests import RequestOrigin
from router.um.messages import UNRECOVERABLE_LOSS, RequestMessage
from router.um.otr import OtrRecovery, OtrSettings
from router.um.receiver import JoinedSource, Receiver
from router.um.wire.lbmc import (FRAG_HEADER, LBMC_TYPE_RETRANS, MESSAGE_HEADER, NHDR_DATA, NHDR_FRAG, UmeLjInfo,
                                 UmeRxReq, decode_lbmc)
from router.um.wire.lbmr import LateJoinOption
from tests.support.retransmissions import retrans_frames

TIDX = 7
SOURCE_PORT = ("10.0.0.1", 14391)
REPLY_TO = ("10.0.0.2", 14392)


class Timer:
    def __init__(self, callback, args):
        self.callback, self.args, self.cancelled = callback, args, False

    def cancel(self) -> None:
        self.cancelled = True


class Loop:
    def __init__(self):
        self.timers: list[Timer] = []
        self.soon: list = []                  # what runs at this turn's end

    def call_soon_threadsafe(self, callback, *args) -> None:
        self.soon.append((callback, args))

    def end_turn(self) -> None:
        while self.soon:
            callback, args = self.soon.pop(0)
            callback(*args)

    def call_later(self, delay, callback, *args) -> Timer:
        timer = Timer(callback, args)
        self.timers.append(timer)
        return timer

    def fire(self, owner) -> None:
        """Fire the pending timers of `owner` (a LateJoinClient or an OtrRecovery)."""
        for timer in [t for t in self.timers if not t.cancelled and getattr(t.callback, "__self__", None) is owner]:
            timer.cancelled = True
            timer.callback(*timer.args)


class Responder:
    """What is asked of the source: the sequence numbers of each UME_RXREQ, by request index."""

    def __init__(self):
        self.asked: dict[int, list[int]] = {}
        self.messages: list[list[int]] = []        # the UME_RXREQs' sequence numbers, by message

    def send_frames(self, address, data) -> None:
        offset = 0
        self.messages.append([])
        while offset < len(data):
            message, used = decode_lbmc(data, offset)
            offset += used
            for header in message.headers:
                if isinstance(header, UmeRxReq):
                    self.asked.setdefault(header.request_idx, []).append(header.seqnum)
                    self.messages[-1].append(header.seqnum)


def retrans(sqn: int) -> bytes:
    payload = b"msg%d" % sqn
    return MESSAGE_HEADER.pack(LBMC_TYPE_RETRANS, NHDR_DATA, MESSAGE_HEADER.size + len(payload), TIDX, sqn) + payload


def live(*sqns: int) -> list[tuple[int, bytes]]:
    return [(sqn, b"msg%d" % sqn) for sqn in sqns]


class Harness:
    def __init__(self, use_otr: bool, settings: LateJoinSettings = LateJoinSettings()):
        self.loop, self.responder = Loop(), Responder()
        self.context = SimpleNamespace(
            loop=self.loop, responder=self.responder, late_join_clients={},
            late_join_counters={"lj_info_unanswered": 0, "lj_retransmissions_requested": 0,
                                "lj_retransmissions_given_up": 0, "lj_messages_delivered": 0,
                                "lj_messages_incomplete": 0, "lj_properties_malformed": 0,
                                "lj_held_overflows": 0},
            otr_counters={"otr_messages_missing": 0, "otr_requests_sent": 0, "otr_frames_recovered": 0,
                          "otr_messages_recovered": 0, "otr_messages_unrecovered": 0,
                          "otr_messages_incomplete": 0, "otr_properties_malformed": 0,
                          "otr_cache_overflows": 0},
            loss_counters={"unrecoverable_loss_events": 0, "unrecoverable_loss_messages": 0})
        self.delivered: list = []                 # what the application got, in order
        receiver = Receiver(self.context, "lj.topic", None, on_event=self._event, on_batch=self.delivered.extend)
        candidate = SimpleNamespace(index=TIDX, source_string="LBTRM:10.0.0.1:14400:00000001:239.1.1.1:14400[7]",
                                    otid=b"\x01" * 32)
        self.joined = JoinedSource(receiver, candidate)
        option = LateJoinOption(src_tcp_port=SOURCE_PORT[1], src_ip=SOURCE_PORT[0], transport_idx=3,
                                high_seqnum=0, low_seqnum=0)
        self.client = LateJoinClient(self.context, self.joined, option, settings, REPLY_TO)
        self.joined.late_join = self.client
        self.context.late_join_clients[self.client.request_idx] = self.client
        if use_otr:
            self.joined.otr = OtrRecovery(self.context, self.joined, option,
                                          OtrSettings(enabled=True, initial_delay=0.0), REPLY_TO)

    def _event(self, event) -> None:
        if event.kind == UNRECOVERABLE_LOSS:
            self.delivered.append(("loss", event.sequence_number, event.count))

    def answer_otr(self) -> None:
        """OTR asks (its timer fires) and the source answers every message it asks for."""
        otr = self.joined.otr
        self.loop.fire(otr)
        for sqn in self.responder.asked.get(otr.request_idx, []):
            otr.retransmission(retrans(sqn))

    def order(self) -> list:
        return [m if m[0] == "loss" else (m.sequence_number, m.retransmit, getattr(m, "otr", False))
                for m in self.delivered]


def _young_session_with_a_datagram_not_repaired(h: Harness) -> None:
    """The source retains 0..9 and says so first; the transport then repairs 0 and 1, gives 2 up,
    and goes on with 3..12; late join's retransmissions of 0..9 come last."""
    h.client.info(UmeLjInfo(0, 9, h.client.request_idx))
    assert h.responder.asked[h.client.request_idx] == list(range(10))
    h.joined.on_batch(live(0, 1))
    h.joined.on_gap(2, 1)
    h.joined.on_batch(live(*range(3, 13)))
    for sqn in range(10):
        h.client.retransmission(retrans(sqn))
    h.loop.end_turn()
    assert h.client.done and h.joined.late_join is None


def test_a_gap_among_what_late_join_delivers_is_not_recovered_again_by_otr():
    h = Harness(use_otr=True)
    _young_session_with_a_datagram_not_repaired(h)
    h.answer_otr()
    h.joined.on_batch(live(13))
    assert h.order() == [(n, True, False) for n in range(10)] + [(n, False, False) for n in range(10, 14)]
    assert h.context.otr_counters["otr_requests_sent"] == 0


def test_a_gap_among_what_late_join_delivers_is_not_told_as_lost():
    h = Harness(use_otr=False)
    _young_session_with_a_datagram_not_repaired(h)
    h.joined.on_batch(live(13))
    assert h.order() == [(n, True, False) for n in range(10)] + [(n, False, False) for n in range(10, 14)]
    assert h.context.loss_counters == {"unrecoverable_loss_events": 0, "unrecoverable_loss_messages": 0}


def test_a_gap_partly_past_what_late_join_fetched_is_told_or_recovered_for_the_rest_in_its_place():
    for use_otr in (False, True):
        h = Harness(use_otr=use_otr)
        h.client.info(UmeLjInfo(0, 9, h.client.request_idx))
        h.joined.on_batch(live(0, 1))
        h.joined.on_gap(8, 4)                     # 8, 9 late join brings; 10, 11 are lost
        h.joined.on_batch(live(12, 13))
        for sqn in range(10):
            h.client.retransmission(retrans(sqn))
        if use_otr:
            h.answer_otr()
            assert h.responder.asked[h.joined.otr.request_idx] == [10, 11]
            middle = [(10, False, True), (11, False, True)]
        else:
            middle = [("loss", 10, 2)]
        assert h.order() == [(n, True, False) for n in range(10)] + middle + [(12, False, False),
                                                                             (13, False, False)]


def test_a_gap_after_late_join_ended_below_what_it_delivered_is_not_told():
    """The transport may still give up a datagram late join delivered after late join is over
    (its NAKs go on): that is no loss."""
    h = Harness(use_otr=False)
    h.client.info(UmeLjInfo(0, 9, h.client.request_idx))
    for sqn in range(10):
        h.client.retransmission(retrans(sqn))
    assert h.client.done
    h.joined.on_batch(live(0, 1))
    h.joined.on_gap(2, 1)
    h.joined.on_batch(live(*range(3, 12)))
    assert h.order() == [(n, True, False) for n in range(10)] + [(10, False, False), (11, False, False)]
    assert h.context.loss_counters["unrecoverable_loss_events"] == 0


# -- what the retransmitted frames hold ----------------------------------------------------------------------
ORIGIN = RequestOrigin("10.9.8.7", 14395, 42)


def request_retrans(sqn: int, payload: bytes, datagram_max_size: int = 8192) -> list[bytes]:
    return retrans_frames(TIDX, sqn, payload, origin=ORIGIN, datagram_max_size=datagram_max_size)


def test_a_retransmitted_request_is_delivered_as_a_request_in_its_place():
    h = Harness(use_otr=False)
    big = bytes(i % 199 for i in range(20_000))
    frames = [retrans(0)] + request_retrans(1, b"question") + request_retrans(2, big) + [retrans(5)]
    assert len(frames) == 6                          # the big request: 2, 3, 4
    h.client.info(UmeLjInfo(0, 5, h.client.request_idx))
    for frame in frames:
        h.client.retransmission(frame)
    assert h.client.done
    assert [type(m).__name__ for m in h.delivered] == ["RetransmittedMessage", "RequestMessage", "RequestMessage",
                                                        "RetransmittedMessage"]
    requests = [m for m in h.delivered if isinstance(m, RequestMessage)]
    assert [(m.sequence_number, m.data, m.origin) for m in requests] == [(1, b"question", ORIGIN), (2, big, ORIGIN)]
    assert [m.sequence_number for m in h.delivered] == [0, 1, 2, 5]
    assert h.context.late_join_counters["lj_messages_delivered"] == 4


def test_a_retransmitted_frame_that_cannot_be_read_is_counted_and_told_lost_in_its_place():
    h = Harness(use_otr=False)
    unknown = MESSAGE_HEADER.pack(LBMC_TYPE_RETRANS, 0x7F, MESSAGE_HEADER.size + 4, TIDX, 1) + b"what"
    short_fragment = MESSAGE_HEADER.pack(LBMC_TYPE_RETRANS, NHDR_FRAG, MESSAGE_HEADER.size + 6, TIDX, 2) + bytes(6)
    beyond = (MESSAGE_HEADER.pack(LBMC_TYPE_RETRANS, NHDR_FRAG, MESSAGE_HEADER.size + FRAG_HEADER.size + 10, TIDX, 3)
              + FRAG_HEADER.pack(NHDR_DATA, FRAG_HEADER.size, 0, 3, 0, 4) + bytes(10))    # 10 bytes of 4
    h.client.info(UmeLjInfo(0, 4, h.client.request_idx))
    for frame in (retrans(0), unknown, short_fragment, beyond, retrans(4)):
        h.client.retransmission(frame)
    assert h.client.done
    assert h.order() == [(0, True, False), ("loss", 1, 3), (4, True, False)]
    assert h.context.late_join_counters["lj_messages_incomplete"] == 3
    assert h.context.late_join_counters["lj_messages_delivered"] == 2


# Regression: at 11fb9e1 each retransmission that came refilled the window at once, one UME_RXREQ
# in a request message of its own: every router on the way decoded and sent on a message for each
# message retransmitted (19,224 requests for 20,000 retransmissions across two links).
def test_the_answers_of_one_turn_refill_the_window_in_one_request():
    h = Harness(use_otr=False, settings=LateJoinSettings(outstanding_maximum=4))
    h.client.info(UmeLjInfo(0, 9, h.client.request_idx))
    assert [m for m in h.responder.messages if m] == [[0, 1, 2, 3]]
    for sqn in (0, 1, 2):
        h.client.retransmission(retrans(sqn))
    assert [m for m in h.responder.messages if m] == [[0, 1, 2, 3]]          # not yet: more may come this turn
    h.loop.end_turn()
    assert [m for m in h.responder.messages if m] == [[0, 1, 2, 3], [4, 5, 6]]
    for sqn in range(3, 10):
        h.client.retransmission(retrans(sqn))
        h.loop.end_turn()
    assert h.client.done and [m.sequence_number for m in h.delivered] == list(range(10))
