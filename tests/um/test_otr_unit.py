"""Off-transport recovery and loss detection without a network.

`OtrRecovery` (router.um.otr) driven by hand: a fake context (a loop whose timers the test fires,
a responder that records the UME_RXREQs asked, the context's OTR counters) and a fake joined
source that records, in order, what reaches the application (live runs, recovered runs, requests,
losses). The clock is the test's (router.um.otr's `time` replaced).

Then what feeds it: FrameStream's gap detection (`_in_sequence`, `_sequence_info`, `_gap`), the
TSNI header's codec (router.um.wire.lbmc_tsni), the source side's TSNI timer
(router.um.sequence_info.SequenceInfo) with a fake session, and the small helpers around them.
"""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.cli.receive_stats import ReceiveStats
from router.um import otr as otr_module
from router.um import sequence_info as sequence_info_module
from router.um.config import UMConfig, from_overrides
from router.um.frame_runs import frames_and_last_sequence_numbers
from router.um.frame_stream import MAX_REASSEMBLED, FrameStream, run_payloads
from router.um.messages import UNRECOVERABLE_LOSS, OtrMessage, ReceiverEvent
from router.um.otr import OtrRecovery, OtrSettings
from router.um.requests import RequestOrigin, message_frames
from router.um.sequence_info import SequenceInfo, later
from router.um.wire.errors import WireError
from router.um.wire.lbmc import (CONTROL_HEADER, FRAG_HEADER, LBMC_TYPE_CONTROL, LBMC_TYPE_MESSAGE, LBMC_TYPE_RETRANS,
                                 MESSAGE_HEADER, NHDR_APPHDR_CHAIN, NHDR_DATA, NHDR_FRAG, NHDR_TSNI, LbmcMessage,
                                 LjiRequest, Tsni, UmeLjInfo, UmeRxReq, decode_lbmc, encode_lbmc)
from router.um.wire.lbmc_properties import Property, apphdr_chain, encode_properties
from router.um.wire.lbmc_tsni import MAX_RECORDS, TSNI_IGNORE, tsni_messages
from router.um.wire.lbmr import LateJoinOption
from tests.support.retransmissions import retrans_frames

TIDX = 7
SOURCE_PORT = ("10.0.0.1", 14391)        # the source context's request port (its LATEJOIN option)
REPLY_TO = ("10.0.0.2", 14392)           # ours
ORIGIN = RequestOrigin("10.9.8.7", 14395, 42)


# -- the fakes ---------------------------------------------------------------------------------------
class Clock:
    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class Timer:
    def __init__(self, when: float, delay: float, callback, args):
        self.when, self.delay, self.callback, self.args = when, delay, callback, args
        self.cancelled = self.fired = False

    def cancel(self) -> None:
        self.cancelled = True


class Loop:
    """call_later's timers, fired by the test. Like router.um.loop, one pass fires only the timers
    due when it starts (a timer armed by a callback waits for the next pass)."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.timers: list[Timer] = []

    def call_later(self, delay: float, callback, *args) -> Timer:
        timer = Timer(self.clock.now + max(0.0, delay), delay, callback, args)
        self.timers.append(timer)
        return timer

    def pending(self) -> list[Timer]:
        return [t for t in self.timers if not t.cancelled and not t.fired]

    def run_due(self) -> int:
        due = sorted((t for t in self.pending() if t.when <= self.clock.now), key=lambda t: t.when)
        for timer in due:
            timer.fired = True
            timer.callback(*timer.args)
        return len(due)

    def run_until(self, until: float, max_passes: int = 10_000) -> None:
        """Fire every timer due up to `until`, each at its own time; a timer armed for a time
        already past is fired a millisecond later (the real loop's next turn)."""
        for _ in range(max_passes):
            pending = self.pending()
            if not pending:
                break
            when = min(t.when for t in pending)
            if when > until:
                break
            self.clock.now = max(when, self.clock.now + 1e-3 if when <= self.clock.now else when)
            self.run_due()
        self.clock.now = max(self.clock.now, until)

    def advance(self, seconds: float) -> None:
        self.run_until(self.clock.now + seconds)


class Responder:
    """What the recovery asks of the source: each UME_RXREQ, with when it was sent."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.sent: list[tuple[tuple, list[UmeRxReq]]] = []
        self.asked: list[tuple[float, int]] = []            # (time, sequence number)
        self.info_requests: list[LjiRequest] = []           # (what the source retains)
        self.message_sizes: list[int] = []                  # headers per CONTROL message

    def send_frames(self, address, data) -> None:
        offset, headers = 0, []
        while offset < len(data):
            message, used = decode_lbmc(data, offset)
            assert message.msg_type == LBMC_TYPE_CONTROL
            self.message_sizes.append(len(message.headers))
            headers += message.headers
            offset += used
        self.info_requests += [h for h in headers if isinstance(h, LjiRequest)]
        requests = [h for h in headers if not isinstance(h, LjiRequest)]
        assert all(isinstance(h, UmeRxReq) for h in requests)
        self.sent.append((address, requests))
        self.asked += [(self.clock.now, h.seqnum) for h in requests]

    def sqns(self) -> list[int]:
        return [sqn for _, sqn in self.asked]

    def take(self) -> list[int]:
        sqns = self.sqns()
        self.asked.clear()
        return sqns


class Joined:
    """A joined source: what reaches the application, in order."""

    def __init__(self):
        self.topic, self.source = "otr.topic", "LBTRM:10.0.0.1:14400:00000001:239.1.1.1:14400[7]"
        self.candidate = SimpleNamespace(index=TIDX)
        self.ended = False
        self.late_join = None                  # no late join fetching
        self.log: list[tuple] = []
        self.recovered: list[OtrMessage] = []  # as delivered (their properties)

    def deliver_live(self, messages) -> None:
        self.log.append(("live", [(sqn, bytes(payload)) for sqn, payload in messages]))

    def deliver_ready(self, messages) -> None:
        assert all(isinstance(m, OtrMessage) and m.otr and not m.retransmit for m in messages)
        self.recovered += messages
        assert all(m.topic == self.topic and m.source == self.source for m in messages)
        self.log.append(("otr", [(m.sequence_number, bytes(m.data)) for m in messages]))

    def deliver_request(self, sqn, payload, origin, otr=False) -> None:
        self.log.append(("otr request" if otr else "request", sqn, bytes(payload), origin))

    def report_loss(self, first, count) -> None:
        self.log.append(("loss", first, count))

    def order(self) -> list[tuple[str, int]]:
        """Each delivery as (kind, sequence number), flattened; a loss as ("loss", first)."""
        out = []
        for entry in self.log:
            if entry[0] in ("live", "otr"):
                out += [(entry[0], sqn) for sqn, _ in entry[1]]
            else:
                out.append((entry[0], entry[1]))
        return out

    def take(self) -> list[tuple]:
        log = list(self.log)
        self.log.clear()
        return log


_COUNTER_NAMES = ("otr_messages_missing", "otr_requests_sent", "otr_frames_recovered", "otr_messages_recovered",
                  "otr_messages_unrecovered", "otr_messages_incomplete", "otr_properties_malformed",
                  "otr_cache_overflows")


class Harness:
    def __init__(self, monkeypatch, **settings):
        self.clock = Clock()
        monkeypatch.setattr(otr_module, "time", self.clock)
        self.loop = Loop(self.clock)
        self.responder = Responder(self.clock)
        self.context = SimpleNamespace(loop=self.loop, responder=self.responder,
                                       otr_counters={name: 0 for name in _COUNTER_NAMES})
        self.joined = Joined()
        option = LateJoinOption(src_tcp_port=SOURCE_PORT[1], src_ip=SOURCE_PORT[0], transport_idx=3,
                                high_seqnum=0, low_seqnum=0)
        defaults = dict(enabled=True, initial_delay=0.1, minimum_interval=0.1, maximum_interval=0.4, duration=5.0,
                        outstanding_maximum=0, log_alert_cooldown=300.0, caching_threshold=10_000)
        self.settings = OtrSettings(**{**defaults, **settings})
        self.otr = OtrRecovery(self.context, self.joined, option, self.settings, REPLY_TO)

    @property
    def counters(self) -> dict:
        return self.context.otr_counters

    def retrans(self, frame: bytes) -> bool:
        return self.otr.retransmission(frame)


@pytest.fixture
def h(monkeypatch):
    return Harness(monkeypatch)


def data_frame(sqn: int, payload: bytes, tidx: int = TIDX) -> bytes:
    """A RETRANS frame as the source's LateJoinServer sends it: the retained frame, type RETRANS."""
    return MESSAGE_HEADER.pack(LBMC_TYPE_RETRANS, NHDR_DATA, MESSAGE_HEADER.size + len(payload), tidx, sqn) + payload


def frag_frames(first: int, payload: bytes, piece: int, tidx: int = TIDX) -> list[bytes]:
    """The RETRANS frames of a fragmented message: first, first+1, ... each `piece` bytes."""
    frames = []
    for number, start in enumerate(range(0, len(payload), piece)):
        chunk = payload[start:start + piece]
        length = MESSAGE_HEADER.size + FRAG_HEADER.size + len(chunk)
        frames.append(MESSAGE_HEADER.pack(LBMC_TYPE_RETRANS, NHDR_FRAG, length, tidx, first + number)
                      + FRAG_HEADER.pack(NHDR_DATA, FRAG_HEADER.size, 0, first, start, len(payload)) + chunk)
    return frames


def request_frames(sqn: int, payload: bytes, datagram_max_size: int = 8192) -> list[bytes]:
    return retrans_frames(TIDX, sqn, payload, origin=ORIGIN, datagram_max_size=datagram_max_size)


def property_frames(sqn: int, data: bytes, block: bytes, datagram_max_size: int = 8192) -> list[bytes]:
    """A message with UM message properties (`block` ends its payload)."""
    return retrans_frames(TIDX, sqn, data + block, properties_size=len(block), datagram_max_size=datagram_max_size)


def live(*sqns: int) -> list[tuple[int, bytes]]:
    return [(sqn, b"live%d" % sqn) for sqn in sqns]


def p(sqn: int) -> bytes:
    return b"lost%d" % sqn


# -- OTR: settings -------------------------------------------------------------------------------------
def test_settings_are_ums_defaults_in_seconds_and_follow_the_receiver_options():
    assert OtrSettings.from_config(UMConfig()) == OtrSettings(False, 10.0, 1.0, 10.0, 20.0, 200, 300, 10000)
    config = from_overrides({"use_otr": 1, "otr_request_initial_delay": 250, "otr_request_minimum_interval": 50,
                             "otr_request_maximum_interval": 800, "otr_request_duration": 3000,
                             "otr_request_outstanding_maximum": 0, "otr_message_caching_threshold": 7})
    assert OtrSettings.from_config(config) == OtrSettings(True, 0.25, 0.05, 0.8, 3.0, 0, 300, 7)


# -- OTR: the exchange -----------------------------------------------------------------------------------
def test_the_first_request_waits_the_initial_delay_and_names_the_source_and_our_request_port(h):
    h.otr.gap(10, 3)
    assert h.otr.holding and h.responder.sent == []
    assert [t.delay for t in h.loop.pending()] == [pytest.approx(0.1)]
    h.loop.advance(0.099)
    assert h.responder.sent == []
    h.loop.advance(0.001)
    [(address, headers)] = h.responder.sent
    assert address == SOURCE_PORT
    assert [(r.transport_idx, r.id_2, r.seqnum, r.rx_ip, r.rx_port) for r in headers] == \
        [(3, TIDX, sqn, *REPLY_TO) for sqn in (10, 11, 12)]
    assert h.counters["otr_messages_missing"] == 3 and h.counters["otr_requests_sent"] == 3


def test_many_lost_messages_are_asked_in_control_messages_of_at_most_64_requests(h):
    h.otr.gap(0, 150)
    h.loop.advance(0.1)
    assert max(h.responder.message_sizes) == 64 and sum(h.responder.message_sizes) <= 150 + 1
    assert len(h.responder.message_sizes) == 3
    assert h.responder.sqns() == list(range(150))


def test_a_message_not_recovered_is_asked_again_the_interval_doubling_up_to_the_maximum(monkeypatch):
    h = Harness(monkeypatch, initial_delay=1.0, minimum_interval=0.1, maximum_interval=0.5, duration=100.0)
    start = h.clock.now
    h.otr.gap(10, 1)
    h.loop.advance(3.3)
    times = [t - start for t, sqn in h.responder.asked]
    assert set(h.responder.sqns()) == {10}
    assert times == pytest.approx([1.0, 1.1, 1.3, 1.7, 2.2, 2.7, 3.2])
    assert [b - a for a, b in zip(times, times[1:])] == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5, 0.5])


def test_each_message_keeps_its_own_interval(monkeypatch):
    """A loss seen later starts at the minimum interval, whatever an older one has reached."""
    h = Harness(monkeypatch, initial_delay=0.1, minimum_interval=0.1, maximum_interval=1.6, duration=100.0)
    start = h.clock.now
    h.otr.gap(1, 1)
    h.loop.advance(0.7)                                  # 1 asked at 0.1, 0.2, 0.4
    h.otr.gap(2, 1)                                      # at 0.7: asked at 0.8, 0.9, 1.1
    h.loop.advance(0.45)
    asked = {sqn: [round(t - start, 6) for t, s in h.responder.asked if s == sqn] for sqn in (1, 2)}
    assert asked[1] == pytest.approx([0.1, 0.2, 0.4, 0.8])
    assert asked[2] == pytest.approx([0.8, 0.9, 1.1])


def test_at_most_the_outstanding_maximum_are_asked_and_more_once_those_come(monkeypatch):
    h = Harness(monkeypatch, outstanding_maximum=2)
    h.otr.gap(1, 5)
    h.loop.advance(0.1)
    assert h.responder.take() == [1, 2]
    h.loop.advance(0.35)                                  # 1 and 2 asked again; 3.. still waiting
    assert set(h.responder.take()) == {1, 2}
    assert h.retrans(data_frame(2, p(2)))
    h.loop.advance(0.01)
    assert h.responder.take() == [3]                      # 2 came: room for one more
    assert h.retrans(data_frame(1, p(1))) and h.retrans(data_frame(3, p(3)))
    h.loop.advance(0.01)
    assert h.responder.take() == [4, 5]
    assert h.retrans(data_frame(4, p(4))) and h.retrans(data_frame(5, p(5)))
    assert h.joined.order() == [("otr", sqn) for sqn in range(1, 6)]
    h.loop.advance(5)
    assert h.responder.take() == [] and not h.otr.holding and not h.loop.pending()


def test_no_outstanding_maximum_asks_everything_at_once(monkeypatch):
    h = Harness(monkeypatch, outstanding_maximum=0)
    h.otr.gap(100, 300)
    h.loop.advance(0.1)
    assert h.responder.sqns() == list(range(100, 400))


def test_a_full_outstanding_window_does_not_spin_the_loop(monkeypatch):
    h = Harness(monkeypatch, outstanding_maximum=1, minimum_interval=1.0, maximum_interval=1.0)
    h.otr.gap(1, 2)
    h.loop.advance(0.1)
    assert h.responder.take() == [1]
    # Nothing can change before 1 is asked again (1 s) or comes back: no timer before then.
    assert all(t.when - h.clock.now >= 0.5 for t in h.loop.pending()), \
        [round(t.when - h.clock.now, 3) for t in h.loop.pending()]
    passes = 0
    while h.loop.run_due() and passes < 100:             # the real loop's turns, the clock still
        passes += 1
    assert passes == 0


def test_a_retransmission_not_waited_for_is_refused(h):
    assert not h.retrans(data_frame(5, b"x"))             # nothing missing
    h.otr.gap(5, 1)
    assert not h.retrans(data_frame(6, b"x"))             # not that one
    assert h.retrans(data_frame(5, b"x"))
    assert not h.retrans(data_frame(5, b"x"))             # a second copy (asked twice, answered twice)
    assert h.counters["otr_frames_recovered"] == 1
    h.otr.gap(9, 1)
    h.otr.close()
    assert not h.retrans(data_frame(9, b"x"))             # closed (the source ended)
    assert not h.loop.pending()


# -- OTR: what the source retains (its LJ_INFO answer) -------------------------------------------------------
def test_requests_ask_what_the_source_retains_and_again_with_each_retry(h):
    h.otr.gap(10, 2)
    h.loop.advance(0.1)
    [info_request] = h.responder.info_requests
    assert (info_request.transport_idx, info_request.topic_idx, info_request.req_ip, info_request.req_port) == \
        (3, TIDX, *REPLY_TO)
    [(_, requests)] = h.responder.sent
    assert {r.request_idx for r in requests} == {info_request.request_idx}
    h.loop.advance(0.1)                                        # asked again: and so is the LJI_REQ
    assert len(h.responder.info_requests) == 2
    h.otr.info(UmeLjInfo(0, 100, info_request.request_idx))   # it retains 0..100: nothing given up
    assert h.joined.log == [] and sorted(h.otr.missing) == [10, 11]
    h.loop.advance(0.2)
    assert h.responder.take() == [10, 11, 10, 11, 10, 11]
    # Each retry asks again (the answer rebinds a replaced connection of the source's).
    assert len(h.responder.info_requests) == 3


def test_what_the_source_no_longer_retains_is_given_up_at_once(h):
    h.otr.gap(10, 4)
    h.otr.hold(live(14))
    h.loop.advance(0.1)
    [info_request] = h.responder.info_requests
    h.otr.info(UmeLjInfo(12, 30, info_request.request_idx))    # 10 and 11 are gone
    assert h.joined.take() == [("loss", 10, 2)] and sorted(h.otr.missing) == [12, 13]
    assert h.retrans(data_frame(13, p(13))) and h.retrans(data_frame(12, p(12)))
    assert h.joined.take() == [("otr", [(12, p(12)), (13, p(13))]), ("live", live(14))]
    assert h.counters["otr_messages_unrecovered"] == 2


def test_a_source_that_retains_nothing_gives_every_loss_up_at_once(h):
    h.otr.gap(10, 2)
    h.otr.hold(live(12))
    h.otr.gap(13, 1)
    h.otr.hold(live(14))
    h.loop.advance(0.1)
    [info_request] = h.responder.info_requests
    h.otr.info(UmeLjInfo(1, 0, info_request.request_idx))      # low > high: nothing retained
    assert h.joined.take() == [("loss", 10, 2), ("live", live(12)), ("loss", 13, 1), ("live", live(14))]
    assert not h.otr.holding


def test_a_retention_spanning_the_wrap_is_not_taken_for_an_empty_one(h):
    h.otr.gap(5, 1)                                            # just after the wrap
    h.otr.hold(live(6))
    h.loop.advance(0.1)
    [info_request] = h.responder.info_requests
    h.otr.info(UmeLjInfo(0xFFFFFFF0, 0x10, info_request.request_idx))
    assert h.joined.log == [] and sorted(h.otr.missing) == [5]
    assert h.retrans(data_frame(5, p(5)))
    assert h.joined.take() == [("otr", [(5, p(5))]), ("live", live(6))]


def test_what_is_recovered_while_late_join_fetches_waits_for_it(h):
    h.joined.late_join = object()                              # late join still fetching
    h.otr.gap(5, 1)
    h.loop.advance(0.1)
    assert h.retrans(data_frame(5, p(5)))
    assert h.joined.log == []                                  # not before what late join delivers
    h.joined.late_join = None                                  # it finished: its held messages, then
    h.otr.hold(live(4))
    h.otr.resume()
    h.otr.hold(live(6))
    assert h.joined.take() == [("live", live(4)), ("otr", [(5, p(5))]), ("live", live(6))]


# -- OTR: delivery in order ---------------------------------------------------------------------------------
def test_held_live_messages_recovered_ones_and_requests_are_delivered_in_sequence_order(h):
    h.otr.gap(3, 2)                                        # 3 and 4 lost
    h.otr.hold(live(5, 6, 7))
    h.otr.hold([(8, b"req8", ORIGIN)])                     # a request, in sequence
    h.otr.hold(live(9))
    h.otr.gap(10, 1)
    h.otr.hold(live(11))
    assert h.joined.log == [] and h.otr.holding
    h.loop.advance(0.1)
    assert h.responder.take() == [3, 4, 10]
    assert h.retrans(data_frame(4, p(4)))
    assert h.joined.log == []                              # 3 still missing: 4 waits
    assert h.retrans(data_frame(3, p(3)))
    assert h.joined.take() == [("otr", [(3, p(3)), (4, p(4))]), ("live", live(5, 6, 7)),
                               ("request", 8, b"req8", ORIGIN), ("live", live(9))]
    assert h.otr.holding
    assert h.retrans(data_frame(10, p(10)))
    assert h.joined.take() == [("otr", [(10, p(10))]), ("live", live(11))]
    assert not h.otr.holding
    assert h.counters["otr_messages_recovered"] == 3 and h.counters["otr_frames_recovered"] == 3


def test_a_recovered_request_is_delivered_as_a_request_in_its_place(h):
    h.otr.gap(4, 1)
    h.otr.hold(live(5))
    [frame] = request_frames(4, b"please answer")
    assert h.retrans(frame)
    assert h.joined.take() == [("otr request", 4, b"please answer", ORIGIN), ("live", live(5))]


def test_what_was_given_up_is_reported_in_its_place_after_what_comes_before_it(monkeypatch):
    """6 expires while the siblings of a recovered fragment (before it) are still asked: its loss
    waits for them, then comes between the messages around it."""
    h = Harness(monkeypatch, duration=1.0)
    whole = bytes(range(256)) * 40                         # 10240 bytes in fragments 2, 3, 4
    frames = frag_frames(2, whole, 4000)
    h.otr.gap(3, 1)                                        # the stream had fragment 2, lost 3
    h.otr.hold(live(5))                                    # (fragment 4 went into reassembly)
    h.clock.now += 0.05
    h.otr.gap(6, 1)
    h.otr.hold(live(7))
    h.loop.advance(0.5)
    assert h.retrans(frames[1])                            # 3: its message's other fragments are asked
    h.loop.advance(0.6)                                    # 6 given up (1 s after it was seen)
    assert h.joined.log == []
    assert h.retrans(frames[0]) and h.retrans(frames[2])
    assert h.joined.take() == [("otr", [(2, whole)]), ("live", live(5)), ("loss", 6, 1), ("live", live(7))]
    assert h.counters["otr_messages_unrecovered"] == 1 and h.counters["otr_messages_recovered"] == 1
    assert not h.otr.holding


def test_messages_not_recovered_within_the_duration_are_given_up_in_runs_and_the_held_ones_delivered(monkeypatch):
    h = Harness(monkeypatch, duration=1.0)
    h.otr.gap(3, 2)
    h.otr.hold(live(5))
    h.otr.gap(6, 1)
    h.otr.hold(live(7, 8))
    h.loop.advance(0.9)
    assert h.joined.log == []
    h.loop.advance(0.2)
    assert h.joined.take() == [("loss", 3, 2), ("live", live(5)), ("loss", 6, 1), ("live", live(7, 8))]
    assert h.counters["otr_messages_unrecovered"] == 3
    assert not h.otr.holding and not h.loop.pending()
    h.otr.hold(live(9))                                     # (the receiver would not hold any more)
    assert h.joined.take() == [("live", live(9))]


def test_beyond_the_caching_threshold_the_oldest_losses_are_given_up(monkeypatch):
    h = Harness(monkeypatch, caching_threshold=3)
    h.otr.gap(1, 1)
    h.otr.hold(live(2))
    h.otr.gap(3, 2)
    h.otr.hold(live(5, 6))
    assert h.joined.log == [] and h.counters["otr_cache_overflows"] == 0          # 3 held: at the threshold
    h.otr.hold(live(7))
    # 4 held: the oldest loss (1) goes, and 2 with it; 3 and 4 are still being recovered.
    assert h.joined.take() == [("loss", 1, 1), ("live", live(2))]
    assert h.counters["otr_cache_overflows"] == 1 and h.counters["otr_messages_unrecovered"] == 1
    assert sorted(h.otr.missing) == [3, 4]
    h.loop.advance(0.1)
    assert h.responder.take() == [3, 4]
    assert h.retrans(data_frame(4, p(4))) and h.retrans(data_frame(3, p(3)))
    assert h.joined.take() == [("otr", [(3, p(3)), (4, p(4))]), ("live", live(5, 6, 7))]


def test_an_overflow_gives_up_one_run_after_another_until_the_held_ones_fit(monkeypatch):
    h = Harness(monkeypatch, caching_threshold=1)
    h.otr.gap(1, 1)
    h.otr.hold(live(2))
    h.otr.gap(3, 1)
    h.otr.hold(live(4))
    assert h.joined.take() == [("loss", 1, 1), ("live", live(2))]
    h.otr.gap(5, 2)
    h.otr.hold(live(7, 8, 9))
    assert h.joined.take() == [("loss", 3, 1), ("live", live(4)), ("loss", 5, 2), ("live", live(7, 8, 9))]
    assert h.counters["otr_cache_overflows"] == 2 and not h.otr.holding


def test_give_up_delivers_what_came_and_what_was_held_then_reports_the_rest_lost_in_order(h):
    h.otr.gap(3, 2)
    h.otr.hold(live(5))
    h.otr.hold([(6, b"req6", ORIGIN)])
    h.otr.gap(7, 1)
    h.otr.hold(live(8))
    h.loop.advance(0.1)
    assert h.retrans(data_frame(4, p(4)))
    h.otr.give_up()                                         # the source ended
    assert h.joined.take() == [("loss", 3, 1), ("otr", [(4, p(4))]), ("live", live(5)),
                               ("request", 6, b"req6", ORIGIN), ("loss", 7, 1), ("live", live(8))]
    assert not h.loop.pending()
    assert not h.retrans(data_frame(7, p(7)))                # closed


def test_nothing_is_delivered_for_a_source_that_ended_meanwhile(h):
    h.otr.gap(3, 1)
    h.otr.hold(live(4))
    h.joined.ended = True
    h.otr.give_up()
    assert h.joined.log == []


def test_a_recovery_closed_with_its_receiver_keeps_nothing_it_held(h):
    """The source context's connection to our request port names the recovery until another
    answer on it replaces it, and lives as long as the source: a receiver that closes while its
    recovery waits for a million lost messages must not leave them, and what it held, behind."""
    h.otr.gap(3, 100_000)
    h.otr.hold(live(*range(100_003, 100_100)))
    assert h.otr.retransmission(data_frame(5, p(5)))
    h.otr.close()
    assert (h.otr.missing, h.otr.held, h.otr.recovered, h.otr.losses) == ({}, [], {}, [])
    assert h.joined.log == []
    assert not h.retrans(data_frame(7, p(7)))


def test_a_huge_gap_gives_up_its_oldest_part_at_once(monkeypatch):
    monkeypatch.setattr(otr_module, "MAX_GAP", 10)
    h = Harness(monkeypatch)
    h.otr.gap(100, 25)
    assert sorted(h.otr.missing) == list(range(115, 125))
    h.otr.hold(live(125))
    h.loop.advance(0.1)
    assert h.responder.sqns() == list(range(115, 125))
    for sqn in range(115, 125):
        assert h.retrans(data_frame(sqn, p(sqn)))
    assert h.joined.log[0] == ("loss", 100, 15)
    assert h.joined.order() == [("loss", 100)] + [("otr", sqn) for sqn in range(115, 125)] + [("live", 125)]


# -- OTR: fragmented messages ---------------------------------------------------------------------------------
WHOLE = bytes(i % 251 for i in range(20_000))


@pytest.mark.parametrize("lost", [[10], [11], [12], [10, 12], [10, 11, 12]],
                         ids=["first", "middle", "last", "first-and-last", "all"])
def test_a_recovered_fragment_brings_its_whole_message(h, lost):
    frames = frag_frames(10, WHOLE, 8000)                   # 10, 11 (8000 bytes each), 12 (4000)
    h.otr.gap(lost[0], 1)
    if len(lost) > 1:
        h.otr.gap(lost[1], len(lost) - 1)
    h.otr.hold(live(13))
    h.loop.advance(0.1)
    assert h.responder.take() == lost
    assert h.retrans(frames[lost[0] - 10])
    h.loop.advance(0.001)                                    # the other fragments are asked at once
    assert sorted(h.responder.take()) == sorted({10, 11, 12} - set(lost))
    assert h.joined.log == []
    for sqn in (10, 11, 12):
        if sqn != lost[0]:
            assert h.retrans(frames[sqn - 10])
    assert h.joined.take() == [("otr", [(10, WHOLE)]), ("live", live(13))]
    assert h.counters["otr_frames_recovered"] == 3 and h.counters["otr_messages_recovered"] == 1


def test_a_fragmented_message_whose_other_fragments_are_gone_is_given_up(monkeypatch):
    h = Harness(monkeypatch, duration=1.0)
    frames = frag_frames(10, WHOLE, 8000)
    h.otr.gap(11, 1)
    h.otr.hold(live(13))
    h.loop.advance(0.1)
    assert h.retrans(frames[1])
    h.loop.advance(1.1)                                        # 10 and 12 never came
    assert h.joined.take() == [("loss", 10, 1), ("loss", 12, 1), ("live", live(13))]
    assert h.counters["otr_messages_incomplete"] == 1 and h.counters["otr_messages_recovered"] == 0


def test_a_recovered_fragment_of_a_request_brings_the_whole_request(h):
    payload = bytes(i % 199 for i in range(20_000))
    frames = request_frames(10, payload)
    assert len(frames) == 3
    h.otr.gap(11, 1)
    h.otr.hold(live(13))
    h.loop.advance(0.1)
    assert h.responder.take() == [11]
    assert h.retrans(frames[1])
    h.loop.advance(0.001)
    for sqn in h.responder.take():                         # (the other fragments, if asked)
        h.retrans(frames[sqn - 10])
    assert h.joined.take() == [("otr request", 10, payload, ORIGIN), ("live", live(13))]


PROPERTIES = {"venue": Property("string", "XNAS"), "quantity": Property("int", 300)}


def test_a_recovered_message_with_properties_is_delivered_with_them(h):
    h.otr.gap(4, 1)
    h.otr.hold(live(5))
    [frame] = property_frames(4, b"with properties", encode_properties(PROPERTIES))
    assert h.retrans(frame)
    assert h.joined.take() == [("otr", [(4, b"with properties")]), ("live", live(5))]
    assert h.joined.recovered[0].properties == PROPERTIES
    assert h.counters["otr_messages_recovered"] == 1 and h.counters["otr_messages_incomplete"] == 0


def test_a_recovered_fragment_of_a_message_with_properties_brings_the_whole_message_and_its_properties(h):
    data = bytes(i % 251 for i in range(20_000))
    frames = property_frames(10, data, encode_properties(PROPERTIES))
    assert len(frames) == 3
    h.otr.gap(11, 1)
    h.otr.hold(live(13))
    h.loop.advance(0.1)
    assert h.retrans(frames[1])
    h.loop.advance(0.001)
    for sqn in h.responder.take():                         # the other fragments, asked at once
        h.retrans(frames[sqn - 10])
    assert h.joined.take() == [("otr", [(10, data)]), ("live", live(13))]
    assert h.joined.recovered[0].properties == PROPERTIES


def test_a_recovered_message_whose_properties_cannot_be_read_comes_without_them_and_is_counted(h):
    h.otr.gap(4, 1)
    [frame] = property_frames(4, b"data", b"\x00" * 24)     # no properties block magic
    assert h.retrans(frame)
    assert h.joined.take() == [("otr", [(4, b"data")])]
    assert h.joined.recovered[0].properties is None
    assert h.counters["otr_properties_malformed"] == 1 and h.counters["otr_messages_incomplete"] == 0


def test_a_recovered_message_whose_chain_header_claims_more_properties_than_it_holds_is_told_lost(h):
    """Where its data ends cannot be known: no message of wrong (empty) data, but its loss, in place."""
    h.otr.gap(4, 1)
    h.otr.hold(live(5))
    chain = apphdr_chain(NHDR_DATA, 100)
    frame = MESSAGE_HEADER.pack(LBMC_TYPE_RETRANS, NHDR_APPHDR_CHAIN, MESSAGE_HEADER.size + len(chain) + 4, TIDX, 4) \
        + chain + b"data"
    assert h.retrans(frame)
    assert h.joined.take() == [("loss", 4, 1), ("live", live(5))]
    assert h.counters["otr_messages_incomplete"] == 1 and h.counters["otr_properties_malformed"] == 0


def test_a_recovered_frame_that_cannot_be_read_is_counted_and_told_lost_in_its_place(h):
    h.otr.gap(4, 1)
    h.otr.hold(live(5))
    h.loop.advance(0.1)
    unknown = MESSAGE_HEADER.pack(LBMC_TYPE_RETRANS, 0x7F, MESSAGE_HEADER.size + 4, TIDX, 4) + b"what"
    assert h.retrans(unknown)
    assert h.joined.take() == [("loss", 4, 1), ("live", live(5))]
    assert h.counters["otr_messages_incomplete"] == 1 and h.counters["otr_messages_recovered"] == 0


def test_a_recovered_fragment_of_a_message_larger_than_any_reassembly_asks_for_nothing_more(h):
    """Its FRAG header would have the recovery ask for tens of thousands of fragments and set
    aside the message's claimed size: it is counted, and its loss told, instead."""
    h.otr.gap(4, 1)
    h.otr.hold(live(5))
    h.loop.advance(0.1)
    assert h.responder.take() == [4]
    [frame] = frag_frames(4, bytes(1000), 1000)
    frame = frame[:MESSAGE_HEADER.size] + FRAG_HEADER.pack(NHDR_DATA, FRAG_HEADER.size, 0, 4, 0, MAX_REASSEMBLED + 1) \
        + frame[MESSAGE_HEADER.size + FRAG_HEADER.size:]
    assert h.retrans(frame)
    h.loop.advance(0.001)
    assert h.responder.take() == []
    assert h.joined.take() == [("loss", 4, 1), ("live", live(5))]
    assert h.counters["otr_messages_incomplete"] == 1 and not h.otr.holding


# -- OTR: the 32-bit wrap -----------------------------------------------------------------------------------------
def test_live_messages_after_the_wrap_wait_for_a_loss_before_it(h):
    h.otr.gap(0xFFFFFFFF, 1)
    h.otr.hold(live(0, 1))
    assert h.joined.log == []
    h.loop.advance(0.1)
    assert h.retrans(data_frame(0xFFFFFFFF, p(0)))
    assert h.joined.take() == [("otr", [(0xFFFFFFFF, p(0))]), ("live", live(0, 1))]


def test_a_gap_across_the_wrap_asks_for_the_wrapped_sequence_numbers(h):
    h.otr.gap(0xFFFFFFFE, 3)                                  # FrameStream: expected 0xFFFFFFFE, got 1
    h.loop.advance(0.1)
    assert h.responder.sqns() == [0xFFFFFFFE, 0xFFFFFFFF, 0]


# -- FrameStream: gaps ---------------------------------------------------------------------------------------------
class _Stream(FrameStream):
    def _close_transport(self):
        pass


class _FakeStreamLoop:
    def __init__(self):
        self.calls = []

    def call_later(self, delay, callback, *args):
        self.calls.append((delay, callback))


class _Sub:
    """A (non-raw) subscription recording every call in order."""

    def __init__(self):
        self.log: list[tuple] = []

    def on_run(self, data, first, count, length):
        self.on_batch(run_payloads(data, first, count, length))

    def on_batch(self, messages):
        self.log.append(("batch", [sqn for sqn, _ in messages]))

    def on_request(self, sqn, payload, origin):
        self.log.append(("request", sqn))

    def on_gap(self, first, count):
        self.log.append(("gap", first, count))

    def on_eos(self):
        self.log.append(("eos",))


class _RawSub:
    raw = True

    def __init__(self):
        self.frames = 0
        self.told: list[int] = []

    def on_frames(self, frames, count, longest):
        self.frames += count

    def on_sequence_info(self, sqn):
        self.told.append(sqn)

    def on_request_frames(self, frames, count, longest):
        self.frames += count


def _msg(sqn: int, tidx: int = 1, payload: bytes = b"m") -> bytes:
    return MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, MESSAGE_HEADER.size + len(payload), tidx, sqn) + payload


def _request(sqn: int, tidx: int = 1) -> bytes:
    [(headers, piece)] = list(message_frames(tidx, sqn, b"req", 8192, ORIGIN))
    return headers + bytes(piece)


def _tsni(*records) -> bytes:
    return encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, [Tsni(list(records))]))


def _stream(*tidxs, raw=()):
    stream = _Stream(_FakeStreamLoop(), ("test",), lambda s: None)
    subs = {}
    for tidx in tidxs:
        subs[tidx] = _Sub()
        stream.subscribe(tidx, subs[tidx])
    for tidx in raw:
        subs[tidx] = _RawSub()
        stream.subscribe(tidx, subs[tidx])
    return stream, subs


def test_a_gap_is_told_after_the_frames_before_it_in_the_same_read_and_before_those_after():
    stream, subs = _stream(1, 2)
    stream._parse(_msg(0) + _msg(1) + _msg(0, tidx=2) + _msg(2) + _msg(5) + _msg(1, tidx=2) + _msg(6))
    assert subs[1].log == [("batch", [0, 1, 2]), ("gap", 3, 2), ("batch", [5, 6])]
    assert subs[2].log == [("batch", [0, 1])]
    assert stream.counters["sequence_gaps"] == 1 and stream.counters["frames_missing"] == 2


def test_requests_before_a_gap_come_before_it_in_their_place():
    stream, subs = _stream(1)
    stream._parse(_msg(0) + _request(1) + _msg(2) + _msg(4))
    assert subs[1].log == [("batch", [0]), ("request", 1), ("batch", [2]), ("gap", 3, 1), ("batch", [4])]


def test_a_gap_between_reads_and_the_first_frame_of_a_topic_is_no_gap():
    stream, subs = _stream(1)
    stream._parse(_msg(100) + _msg(101))                     # joined mid-stream: starts here
    stream._parse(_msg(105))
    assert subs[1].log == [("batch", [100, 101]), ("gap", 102, 3), ("batch", [105])]


def test_old_frames_are_dropped_and_a_far_jump_back_is_a_new_source_followed_from_there():
    stream, subs = _stream(1)
    stream._parse(_msg(5_000_000) + _msg(5_000_001))
    stream._parse(_msg(5_000_000) + _msg(5_000_002 - (1 << 20)) + _msg(5_000_002))    # old: delivered already
    assert subs[1].log == [("batch", [5_000_000, 5_000_001]), ("batch", [5_000_002])]
    stream._parse(_msg(7) + _msg(8))                           # far back: a new source on the index
    assert subs[1].log[-1] == ("batch", [7, 8])
    assert stream.counters["sequence_gaps"] == 0


def test_sequence_numbers_wrap_without_a_gap_and_a_gap_across_the_wrap_is_told_wrapped():
    stream, subs = _stream(1, 2)
    stream._parse(_msg(0xFFFFFFFE) + _msg(0xFFFFFFFF) + _msg(0) + _msg(1))
    stream._parse(_msg(0xFFFFFFFD, tidx=2) + _msg(2, tidx=2))
    assert subs[1].log == [("batch", [0xFFFFFFFE, 0xFFFFFFFF, 0, 1])]
    assert subs[2].log == [("batch", [0xFFFFFFFD]), ("gap", 0xFFFFFFFE, 4), ("batch", [2])]


def test_a_lost_fragment_is_a_gap_and_the_message_it_belonged_to_is_not_delivered():
    stream, subs = _stream(1)
    pieces = [MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_FRAG, 12 + 16 + 4, 1, 10 + n)
              + FRAG_HEADER.pack(NHDR_DATA, 16, 0, 10, 4 * n, 12) + bytes([n]) * 4 for n in range(3)]
    stream._parse(_msg(9) + pieces[0] + pieces[2] + _msg(13))
    assert subs[1].log == [("batch", [9]), ("gap", 11, 1), ("batch", [13])]


# -- FrameStream: TSNI ---------------------------------------------------------------------------------------------
def test_a_tsni_past_what_came_tells_the_lost_tail_after_the_frames_before_it():
    stream, subs = _stream(1, 2, 3)
    stream._parse(_msg(0, tidx=2))
    stream._parse(_msg(0) + _msg(1) + _tsni((1, 4), (2, 0), (3, 9), (99, 5)) + _msg(5))
    # 1: 2..4 lost, told after 0 and 1; 2: up to date; 3: nothing came yet (no start); 99: not ours.
    assert subs[1].log == [("batch", [0, 1]), ("gap", 2, 3), ("batch", [5])]
    assert subs[2].log == [("batch", [0])]
    assert subs[3].log == []
    stream._parse(_tsni((1, 5), (1, 3)))                         # up to date, and behind: nothing
    assert subs[1].log[-1] == ("batch", [5]) and stream.counters["sequence_gaps"] == 1
    assert stream.counters["control_frames"] == 2 and stream.counters["malformed"] == 0


def test_a_tsni_across_the_wrap():
    stream, subs = _stream(1)
    stream._parse(_msg(0xFFFFFFFE))
    stream._parse(_tsni((1, 1)))
    assert subs[1].log == [("batch", [0xFFFFFFFE]), ("gap", 0xFFFFFFFF, 3)]
    stream._parse(_msg(2))
    assert subs[1].log[-1] == ("batch", [2])


def test_a_tsni_for_a_raw_subscription_is_passed_on_not_taken_as_a_gap():
    """A router's proxy receiver passes the origin's TSNI on (its proxy sources say it); the
    stream itself reports no gap for a raw topic (the receivers beyond the router do)."""
    stream, subs = _stream(raw=(1,))
    stream._parse(_msg(0) + _msg(1))
    stream._parse(_tsni((1, 10)))
    assert subs[1].frames == 2 and subs[1].told == [10]
    assert stream.counters["sequence_gaps"] == 0 and stream.counters["malformed"] == 0


def _tsni_with(hdr_len: int, word: int, records: bytes) -> bytes:
    body = bytes([0xFF, hdr_len]) + word.to_bytes(2, "big") + records       # next_hdr NONE
    return CONTROL_HEADER.pack(LBMC_TYPE_CONTROL, NHDR_TSNI, CONTROL_HEADER.size + len(body)) + body


@pytest.mark.parametrize("bad", [
    _tsni_with(12, 2, (1).to_bytes(4, "big") + (9).to_bytes(4, "big")),        # 2 records in 12 bytes
    _tsni_with(3, 0, b""),                                                      # hdr_len below 4
    _tsni_with(60, 1, (1).to_bytes(4, "big") + (9).to_bytes(4, "big")),        # longer than its frame
], ids=["count", "short-header", "beyond-frame"])
def test_a_tsni_with_a_bad_length_is_counted_malformed_and_the_stream_goes_on(bad):
    stream, subs = _stream(1)
    stream._parse(_msg(0))
    consumed = stream._parse(_msg(1) + bad + _msg(2))
    assert consumed == len(_msg(1) + bad + _msg(2))
    assert stream.counters["malformed"] == 1
    assert not stream.closed and stream.loop.calls == []               # no close scheduled
    assert subs[1].log == [("batch", [0]), ("batch", [1, 2])]


# -- the TSNI codec ----------------------------------------------------------------------------------------------------
_u32 = st.integers(0, 0xFFFFFFFF)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_u32, _u32), max_size=MAX_RECORDS), st.sampled_from([0, TSNI_IGNORE]))
def test_tsni_round_trips_through_the_lbmc_codec(records, flags):
    message = LbmcMessage(LBMC_TYPE_CONTROL, [Tsni(records, flags)])
    raw = encode_lbmc(message)
    assert len(raw) == 4 + 4 + 8 * len(records)
    assert raw[5] == 4 + 8 * len(records)                              # hdr_len
    decoded, used = decode_lbmc(raw)
    assert used == len(raw)
    assert decoded.headers == [Tsni(records, flags)]
    # ... and the receiving stream reads the same records.
    stream, subs = _stream(*{tidx for tidx, _ in records[:3]})
    stream._parse(raw)
    assert stream.counters["malformed"] == 0


def test_tsni_layout_and_limits():
    raw = encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, [Tsni([(1, 41), (9, 0xFFFFFFF0)])]))
    assert raw.hex() == "08200018" + "ff14" + "0002" + "00000001" + "00000029" + "00000009" + "fffffff0"
    with pytest.raises(WireError):
        encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, [Tsni([(1, 1)] * (MAX_RECORDS + 1))]))
    assert MAX_RECORDS == 31
    groups = tsni_messages([(n, n) for n in range(70)])
    assert [len(g) for g in groups] == [31, 31, 8] and sum(groups, []) == [(n, n) for n in range(70)]
    assert tsni_messages([]) == []


# -- the TSNI timer --------------------------------------------------------------------------------------------------
class _Every:
    def __init__(self, interval, callback):
        self.interval, self.callback, self.cancelled = interval, callback, False

    def cancel(self):
        self.cancelled = True


class _Session:
    """What SequenceInfo uses of a BatchingSession."""

    def __init__(self):
        self.loop = SimpleNamespace(call_every=self._call_every)
        self.timers: list[_Every] = []
        self.lock = threading.Lock()
        self.counters = {"batches": 0, "tsni_sent": 0}
        self.batch = bytearray()
        self.closed = False
        self.dropped_last: dict[int, int] = {}
        self.queued = 0
        self.sent: list[list[tuple[int, int]]] = []

    def _call_every(self, interval, callback):
        timer = _Every(interval, callback)
        self.timers.append(timer)
        return timer

    def queued_bytes(self) -> int:
        return self.queued

    def send_control(self, data) -> None:
        message, used = decode_lbmc(data)
        assert used == len(data) and message.msg_type == LBMC_TYPE_CONTROL
        [tsni] = message.headers
        self.sent.append(tsni.records)

    _deliver = send_control


class _Source:
    def __init__(self, last=None):
        self.last = last

    def last_sequence_number(self):
        return self.last


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(sequence_info_module, "time", clock)
    return clock


def test_an_idle_session_says_each_topics_last_sequence_number_a_busy_one_says_nothing(clock):
    session = _Session()
    info = SequenceInfo(session, 0.2, 60)
    quiet, busy, silent = _Source(41), _Source(7), _Source(None)
    info.add(1, quiet)
    info.add(2, busy)
    info.add(3, silent)                                            # nothing sent yet: no record
    [timer] = session.timers
    assert timer.interval == 0.2
    session.counters["batches"] = 5
    info.tick()                                                    # batches sent since the last tick
    assert session.sent == []
    session.batch += b"x"
    info.tick()                                                    # a batch being built
    assert session.sent == []
    session.batch.clear()
    session.queued = 100
    info.tick()                                                    # data waiting for a receiver
    assert session.sent == []
    session.queued = 0
    info.tick()
    assert session.sent == [[(1, 41), (2, 7)]] and session.counters["tsni_sent"] == 1
    info.tick()
    assert len(session.sent) == 2                                  # again, each interval


def test_tsnis_stop_after_the_active_threshold_and_start_again_when_the_topic_moves(clock):
    session = _Session()
    info = SequenceInfo(session, 1.0, 10)
    source = _Source(5)
    info.add(1, source)
    info.tick()                                                     # (first tick: busy, nothing seen yet)
    for _ in range(11):
        info.tick()
        clock.now += 1.0
    assert len(session.sent) == 11                                 # 0 .. 10 s after it was first said
    info.tick()
    assert len(session.sent) == 11
    source.last = 6
    session.counters["batches"] += 1
    info.tick()                                                     # busy
    info.tick()
    assert session.sent[-1] == [(1, 6)] and len(session.sent) == 12


def test_an_active_threshold_of_zero_says_it_forever(clock):
    session = _Session()
    info = SequenceInfo(session, 1.0, 0)
    info.add(1, _Source(5))
    info.tick()
    for _ in range(5):
        clock.now += 10_000
        info.tick()
    assert len(session.sent) == 5


def test_a_dropped_tail_later_than_what_the_source_retains_is_what_a_tsni_says(clock):
    session = _Session()
    info = SequenceInfo(session, 1.0, 60)
    info.add(1, _Source(10))
    info.add(2, _Source(0xFFFFFFF0))
    session.dropped_last.update({1: 14, 2: 3})                     # 3 is after 0xFFFFFFF0 (wrapped)
    info.tick()
    info.tick()
    assert session.sent == [[(1, 14), (2, 3)]]


def test_many_topics_take_several_tsni_messages_and_the_timer_stops_with_the_last_topic(clock):
    session = _Session()
    info = SequenceInfo(session, 1.0, 60)
    for tidx in range(1, 41):
        info.add(tidx, _Source(tidx * 10))
    [timer] = session.timers
    info.tick()
    info.tick()
    assert [len(records) for records in session.sent] == [31, 9] and session.counters["tsni_sent"] == 2
    for tidx in range(1, 41):
        info.remove(tidx)
    assert timer.cancelled and info.timer is None
    info.add(1, _Source(1))
    assert len(session.timers) == 2 and not session.timers[1].cancelled


def test_a_closed_session_stops_its_timer(clock):
    session = _Session()
    info = SequenceInfo(session, 1.0, 60)
    info.add(1, _Source(1))
    session.closed = True
    info.tick()
    assert session.sent == [] and session.timers[0].cancelled and info.topics == {}


def test_later_compares_32_bit_sequence_numbers():
    assert later(None, None) is None and later(None, 5) == 5 and later(5, None) == 5
    assert later(5, 9) == 9 and later(9, 5) == 9 and later(7, 7) == 7
    assert later(0xFFFFFFFF, 0) == 0 and later(0, 0xFFFFFFFF) == 0
    assert later(0xFFFFFF00, 0x10) == 0x10 and later(0x10, 0x7FFFFFFF) == 0x7FFFFFFF


def test_frames_and_last_sequence_numbers_walks_the_frames_of_a_dropped_batch():
    batch = _msg(3, tidx=1) + _msg(0, tidx=2) + _tsni((1, 3)) + _msg(4, tidx=1) + _msg(1, tidx=2)
    assert frames_and_last_sequence_numbers(batch) == (5, {1: 4, 2: 1})
    assert frames_and_last_sequence_numbers(batch + b"\x00\x00") == (5, {1: 4, 2: 1})           # a short tail
    assert frames_and_last_sequence_numbers(b"\x00\x00\x00\x02" + _msg(1)) == (0, {})           # broken
    assert frames_and_last_sequence_numbers(b"") == (0, {})


def test_frames_and_last_sequence_numbers_does_not_count_a_frame_cut_short():
    batch = _msg(3, tidx=1) + _msg(4, tidx=1)
    assert frames_and_last_sequence_numbers(batch + _msg(9, tidx=1)[:7]) == (2, {1: 4})


# -- what umrcv counts ------------------------------------------------------------------------------------------------
def test_receive_stats_count_recovered_messages_and_unrecoverable_losses():
    stats = ReceiveStats()
    stats.on_event(ReceiverEvent(UNRECOVERABLE_LOSS, "t", "s", None, 10, 3))
    stats.on_event(ReceiverEvent(UNRECOVERABLE_LOSS, "t", "s", None, 20, 1))
    stats.on_batch([OtrMessage("t", "s", n, b"short") for n in range(4)])
    summary = stats.summary()
    assert summary["otr_recovered"] == 4 and summary["unrecoverable_loss"] == 4
    assert summary["retransmitted"] == 0


def test_a_dropped_batch_is_counted_by_frames_and_its_last_sequence_numbers_kept_for_tsnis():
    from router.um.batching_session import BatchingSession
    session = SimpleNamespace(counters={"dropped_would_block_batches": 0, "dropped_would_block_bytes": 0,
                                        "dropped_would_block_frames": 0},
                              dropped_last={2: 0xFFFFFFFE})
    first = _msg(7, tidx=1) + _msg(8, tidx=1) + _msg(0xFFFFFFFF, tidx=2)
    BatchingSession.count_dropped(session, first)
    BatchingSession.count_dropped(session, _msg(3, tidx=1) + _msg(1, tidx=2))   # 3 is older than 8
    assert session.counters == {"dropped_would_block_batches": 2, "dropped_would_block_bytes": len(first) + 26,
                                "dropped_would_block_frames": 5}
    assert session.dropped_last == {1: 8, 2: 1}
