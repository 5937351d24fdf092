"""Adversarial tests of the DRO loss recovery timeout (transport_tcp_dro_loss_recovery_timeout /
transport_lbtipc_dro_loss_recovery_timeout; router.um.reorder_window, router.um.frame_stream).

Part 1 feeds a stream by hand (as tests/um/test_reorder_window.py does) with what the plain tests
do not: fragmented messages and requests behind a gap, two topics on one stream, a subscription
removed while its topic waits, closing while waiting, stale timers, the 32-bit wrap, TSNIs, a
topic index reused by a new source, and a model check over thousands of messages with random
drops, delays and expiries. Part 2 runs real TCP / LBT-IPC contexts (late frames are made at the
receiving stream, as tests/um/test_dro_loss_recovery.py does), with OTR too.

Tests headed "# Regression:" showed a bug in the feature as it landed (the commit named), fixed
since (the other commit): the comment says what it was."""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.um.context import Context
from router.um.frame_stream import FrameStream, run_payloads
from router.um.loop import EventLoop
from router.um.reorder_window import MASK, MAX_WAITED
from router.um.requests import RequestOrigin, message_frames
from router.um.wire.lbmc import LBMC_TYPE_CONTROL, LbmcMessage, encode_lbmc
from router.um.wire.lbmc_tsni import Tsni
from tests.support.domains import new_domain
from tests.support.processes import wait_for
from tests.um.test_dro_loss_recovery import Late

ORIGIN = RequestOrigin("127.0.0.1", 15001, 7)


# -- part 1: a stream fed by hand ------------------------------------------------------------------
class _Stream(FrameStream):
    def _close_transport(self):
        pass


class _Sub:
    """What an application receiver sees, in order: ("msg", sqn, payload), ("req", sqn, payload,
    origin) and ("gap", first, count)."""

    def __init__(self):
        self.seen: list[tuple] = []
        self.eos = False

    def on_run(self, data, first, count, length):
        self.on_batch(run_payloads(data, first, count, length))

    def on_batch(self, messages):
        for entry in messages:
            assert len(entry) == 2, entry          # a request is never handed over as a message
            self.seen.append(("msg", entry[0], bytes(entry[1])))

    def on_request(self, sqn, payload, origin):
        self.seen.append(("req", sqn, bytes(payload), origin))

    def on_gap(self, first, count):
        self.seen.append(("gap", first, count))

    def on_eos(self):
        self.eos = True

    @property
    def kinds(self) -> list[tuple]:
        """The events without payloads: (kind, sqn[, count])."""
        return [(e[0], e[1], e[2]) if e[0] == "gap" else (e[0], e[1]) for e in self.seen]


def _new(timeout: float = 5.0, tidxs=(1,)) -> tuple[_Stream, dict[int, _Sub]]:
    s = _Stream(EventLoop("test"), ("test",), lambda _: None)
    s.loss_recovery_timeout = timeout
    subs = {}
    for tidx in tidxs:
        subs[tidx] = _Sub()
        s.subscribe(tidx, subs[tidx])
    return s, subs


def frames_of(tidx: int, sqn: int, payload: bytes, datagram_max: int = 8192, origin=None) -> list[bytes]:
    """The frames of one message (several, FRAG, above `datagram_max`): as a source frames it."""
    return [bytes(headers) + bytes(piece) for headers, piece in
            message_frames(tidx, sqn & MASK, payload, datagram_max, origin)]


def data(tidx: int, sqn: int) -> bytes:
    [frame] = frames_of(tidx, sqn, b"m%d" % (sqn & MASK))
    return frame


def tsni(*records) -> bytes:
    return encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, [Tsni(list(records))]))


def parse(s: _Stream, *chunks: bytes) -> None:
    """One read holding `chunks` (frames)."""
    read = b"".join(chunks)
    assert s._parse(read) == len(read)


def expire(s: _Stream) -> None:
    """The timers of every open window fire."""
    for tidx, window in list(s.windows.items()):
        window.timer.callback(*window.timer.args)


# fragmented messages -----------------------------------------------------------------------------
# Regression: a bug at 57ea66b (fixed in 4ff1282): a fragmented message whose first fragment came before the
#   gap (first_sqn < window base) is delivered after later messages
def test_a_fragmented_message_whose_middle_fragment_is_late_comes_before_the_messages_after_it():
    s, subs = _new()
    sub = subs[1]
    big = bytes(range(256)) * 4
    pieces = frames_of(1, 10, big, datagram_max=300)       # sqns 10, 11, 12, 13 (4 fragments)
    assert len(pieces) == 4
    parse(s, data(1, 9))
    parse(s, pieces[0])
    parse(s, pieces[2], pieces[3])                         # 11 late: a window opens at 11
    parse(s, data(1, 14))                                  # after the fragmented message
    assert sub.kinds == [("msg", 9)]
    parse(s, pieces[1])                                    # the late fragment: the message is whole
    parse(s, data(1, 15))
    assert sub.kinds == [("msg", 9), ("msg", 10), ("msg", 14), ("msg", 15)], sub.kinds
    assert sub.seen[1][2] == big


# Regression: a bug at 57ea66b (fixed in 4ff1282): a fragmented message completed by its late last fragment is
#   delivered after the messages that followed it
def test_a_fragmented_message_whose_last_fragment_is_late_comes_in_its_place():
    s, subs = _new()
    sub = subs[1]
    pieces = frames_of(1, 20, b"x" * 500, datagram_max=300)   # 20, 21
    assert len(pieces) == 2
    parse(s, data(1, 19), pieces[0], data(1, 22), data(1, 23))   # 21 late
    parse(s, pieces[1])
    assert sub.kinds == [("msg", 19), ("msg", 20), ("msg", 22), ("msg", 23)], sub.kinds


def test_a_fragmented_message_wholly_inside_the_gap_fills_it_in_order():
    """The gap is a whole fragmented message (its first fragment is the window's base): fine."""
    s, subs = _new()
    sub = subs[1]
    pieces = frames_of(1, 5, b"y" * 700, datagram_max=300)    # 5, 6, 7
    assert len(pieces) == 3
    parse(s, data(1, 4), data(1, 8), data(1, 9))
    assert sub.kinds == [("msg", 4)]
    parse(s, pieces[2], pieces[0])
    assert sub.kinds == [("msg", 4)]                          # 6 still missing
    parse(s, pieces[1])
    assert sub.kinds == [("msg", 4), ("msg", 5), ("msg", 8), ("msg", 9)]
    assert sub.seen[1][2] == b"y" * 700
    assert not s.windows and s.counters["frames_late"] == 3 and s.counters["sequence_gaps"] == 0


def test_a_fragment_that_never_comes_is_declared_lost_and_its_message_never_delivered_half():
    s, subs = _new()
    sub = subs[1]
    pieces = frames_of(1, 5, b"z" * 700, datagram_max=300)    # 5, 6, 7: 6 never comes
    parse(s, data(1, 4), pieces[0], pieces[2], data(1, 8))
    expire(s)
    assert sub.kinds == [("msg", 4), ("gap", 6, 1), ("msg", 8)]
    assert all(len(e[2]) != 700 for e in sub.seen if e[0] == "msg")
    parse(s, pieces[1], data(1, 9))                           # too late: dropped, nothing half-made
    assert sub.kinds[-1] == ("msg", 9) and len(sub.seen) == 4


# requests -----------------------------------------------------------------------------------------
def test_requests_behind_a_gap_are_held_and_delivered_as_requests_in_their_place():
    s, subs = _new()
    sub = subs[1]
    frames = {n: data(1, n) for n in range(10)}
    for n in (4, 6):
        [frames[n]] = frames_of(1, n, b"ask%d" % n, origin=ORIGIN)
    parse(s, frames[0], frames[1], frames[2], frames[4])     # 3 late; the request 4 waits
    parse(s, frames[5], frames[6])
    assert sub.kinds == [("msg", 0), ("msg", 1), ("msg", 2)]
    parse(s, frames[3], frames[7])
    assert sub.kinds == [("msg", 0), ("msg", 1), ("msg", 2), ("msg", 3), ("req", 4), ("msg", 5), ("req", 6),
                         ("msg", 7)]
    assert [e[3] for e in sub.seen if e[0] == "req"] == [ORIGIN, ORIGIN]


def test_a_request_held_behind_a_gap_that_is_never_filled_is_still_delivered_after_the_loss():
    s, subs = _new()
    sub = subs[1]
    [ask] = frames_of(1, 3, b"ask", origin=ORIGIN)
    parse(s, data(1, 0), ask, data(1, 4))                    # 1, 2 never come
    expire(s)
    assert sub.kinds == [("msg", 0), ("gap", 1, 2), ("req", 3), ("msg", 4)]


# Regression: a bug at 57ea66b (fixed in 4ff1282): a fragmented request completed by a late fragment
#   (first_sqn before the window's base) is delivered after later messages
def test_a_fragmented_request_with_a_late_fragment_comes_in_its_place():
    s, subs = _new()
    sub = subs[1]
    pieces = frames_of(1, 4, b"Q" * 100, datagram_max=28 + 16 + 40, origin=ORIGIN)   # 4, 5, 6
    assert len(pieces) == 3
    parse(s, data(1, 3), pieces[0], pieces[2], data(1, 7))     # 5 late
    parse(s, pieces[1])
    assert sub.kinds == [("msg", 3), ("req", 4), ("msg", 7)], sub.kinds


# two topics on one stream ----------------------------------------------------------------------------
def test_a_topic_waiting_does_not_hold_up_another_topic_on_the_stream():
    s, subs = _new(tidxs=(1, 2))
    parse(s, data(1, 0), data(2, 0), data(1, 2), data(2, 1))      # topic 1 waits for 1
    for n in range(2, 50):
        parse(s, data(1, n + 1), data(2, n))                       # interleaved in every read
    assert subs[1].kinds == [("msg", 0)]
    assert subs[2].kinds == [("msg", n) for n in range(50)]        # untouched, all of it, at once
    assert set(s.windows) == {1}
    parse(s, data(2, 50), data(1, 1), data(2, 51))
    assert subs[1].kinds == [("msg", n) for n in range(51)]
    assert subs[2].kinds == [("msg", n) for n in range(52)]
    assert not s.windows and s.counters["sequence_gaps"] == 0


def test_two_topics_waiting_at_once_each_fill_and_expire_on_their_own():
    s, subs = _new(tidxs=(1, 2))
    parse(s, data(1, 0), data(2, 100), data(1, 3), data(2, 102))  # 1: 1, 2 missing; 2: 101 missing
    parse(s, data(2, 101))                                        # topic 2 fills
    assert 2 not in s.windows and 1 in s.windows
    assert subs[2].kinds == [("msg", 100), ("msg", 101), ("msg", 102)]
    parse(s, data(1, 1), data(2, 103))
    expire(s)                                                      # 2 never comes
    assert subs[1].kinds == [("msg", 0), ("msg", 1), ("gap", 2, 1), ("msg", 3)]
    assert subs[2].kinds[-1] == ("msg", 103)


# a subscription removed while waiting --------------------------------------------------------------
def test_removing_the_waiting_topics_subscription_cancels_its_wait_quietly():
    s, subs = _new(tidxs=(1, 2))
    parse(s, data(1, 0), data(1, 2))
    window = s.windows[1]
    s.unsubscribe(1, subs[1])
    assert window.timer.cancelled and 1 not in s.windows and not s.closed
    window.timer.callback(*window.timer.args)                      # a timer already due: no effect
    assert subs[1].kinds == [("msg", 0)]
    assert s.counters["sequence_gaps"] == 0


# Regression: a bug at 57ea66b (fixed in 4ff1282): unsubscribe() drops a waiting window but leaves
#   next_sqns[tidx] = -1; a re-added subscription is told a gap from -1
def test_a_subscription_added_again_after_being_removed_while_waiting_sees_no_false_gap():
    s, subs = _new(tidxs=(1, 2))                   # topic 2 keeps the stream open
    parse(s, data(1, 0), data(1, 2))
    s.unsubscribe(1, subs[1])
    again = _Sub()
    s.subscribe(1, again)
    parse(s, data(1, 3), data(1, 4))
    expire(s)
    # Nothing was lost after the new subscription came: it sees 3 and 4 at once, no gap.
    assert again.kinds == [("msg", 3), ("msg", 4)], again.kinds


# Regression: a bug at 57ea66b (fixed in 4ff1282): after unsubscribe() of a waiting topic (next_sqns left -1),
#   its next frames count a false gap of sqn+1 frames in the stream's counters
def test_frames_of_a_topic_whose_waiting_subscription_left_count_no_false_loss():
    s, subs = _new(tidxs=(1, 2))
    parse(s, data(1, 0), data(1, 2))
    s.unsubscribe(1, subs[1])
    parse(s, data(1, 3), data(1, 4))                # nobody here for topic 1 now
    assert s.counters["sequence_gaps"] == 0 and s.counters["frames_missing"] == 0, s.counters


def test_removing_one_of_two_subscriptions_of_a_waiting_topic_keeps_the_wait_for_the_other():
    s, subs = _new()
    other = _Sub()
    s.subscribe(1, other)
    parse(s, data(1, 0), data(1, 2))
    s.unsubscribe(1, subs[1])
    assert 1 in s.windows and not s.windows[1].timer.cancelled
    parse(s, data(1, 1))
    assert other.kinds == [("msg", 0), ("msg", 1), ("msg", 2)]
    assert subs[1].kinds == [("msg", 0)]


# Regression: a bug at 57ea66b (fixed in 4ff1282): a subscription that unsubscribes from its on_batch when its
#   gap fills makes _settle_windows -> _close_window raise KeyError (window gone)
def test_a_subscription_that_leaves_in_its_callback_when_its_gap_fills_does_not_break_the_read():
    s, subs = _new(tidxs=(1, 2))
    leaving = subs[1]

    def on_batch(messages, original=leaving.on_batch):
        original(messages)
        if any(entry[0] == 2 for entry in messages):
            s.unsubscribe(1, leaving)             # e.g. an application closing its receiver when done
    leaving.on_batch = on_batch
    parse(s, data(1, 0), data(1, 2))
    parse(s, data(2, 0), data(1, 1), data(2, 1))     # fills the gap: 1, 2 delivered, then it leaves
    assert leaving.kinds == [("msg", 0), ("msg", 1), ("msg", 2)]
    assert subs[2].kinds == [("msg", 0), ("msg", 1)]   # the other topic's messages of that read


# Regression: a bug at 57ea66b (fixed in 4ff1282): close() while two topics wait: a callback told of one
#   topic's loss that unsubscribes the other makes close() raise KeyError
def test_closing_with_two_waiting_topics_survives_a_callback_that_removes_the_other_subscription():
    s, subs = _new(tidxs=(1, 2))

    def on_gap(first, count, original=subs[1].on_gap):
        original(first, count)
        s.unsubscribe(2, subs[2])
    subs[1].on_gap = on_gap
    parse(s, data(1, 0), data(1, 2), data(2, 0), data(2, 2))
    s.close()
    assert s.closed and not s.windows and subs[1].eos
    assert subs[1].kinds == [("msg", 0), ("gap", 1, 1), ("msg", 2)]


class _Counted(tuple):
    """An entry of a window (sqn, payload) that counts how often it is looked into."""
    looks = 0

    def __getitem__(self, index):
        _Counted.looks += 1
        return tuple.__getitem__(self, index)


# Regression: a bug at 57ea66b (fixed in 4ff1282): ReorderWindow.take re-sorts and rescans every held entry on
#   each read: quadratic in the messages held behind a gap
def test_the_work_per_read_while_waiting_does_not_grow_with_what_is_held():
    from router.um.reorder_window import ReorderWindow
    window = ReorderWindow(1, 1)                  # 1 missing; 2, 3, ... come one read each
    reads = 3000
    _Counted.looks = 0
    for n in range(2, reads + 2):
        window.admit(n)
        assert window.take([_Counted((n, b""))]) == []
    # Linear work would look at each entry a few times; a sort of all held per read, ~reads**2 / 2.
    assert _Counted.looks <= 20 * reads, _Counted.looks


# closing while waiting -----------------------------------------------------------------------------
def test_closing_quietly_while_waiting_delivers_nothing_more_and_cancels_the_timer():
    s, subs = _new(tidxs=(1, 2))
    parse(s, data(1, 0), data(1, 2), data(1, 3), data(2, 0), data(2, 5))
    windows = dict(s.windows)
    assert set(windows) == {1, 2}
    s.close(notify=False)
    assert all(w.timer.cancelled for w in windows.values()) and not s.windows
    for tidx, window in windows.items():
        s._window_expired(tidx, window)                         # a stale timer: nothing happens
    assert subs[1].kinds == [("msg", 0)] and subs[2].kinds == [("msg", 0)]
    assert not subs[1].eos and not subs[2].eos
    assert s.counters["sequence_gaps"] == 0


def test_closing_while_waiting_tells_held_requests_and_losses_in_order_before_eos():
    s, subs = _new()
    sub = subs[1]
    [ask] = frames_of(1, 4, b"ask", origin=ORIGIN)
    parse(s, data(1, 0), data(1, 2), ask, data(1, 6))            # 1, 3, 5 missing
    s.close()
    assert sub.kinds == [("msg", 0), ("gap", 1, 1), ("msg", 2), ("gap", 3, 1), ("req", 4), ("gap", 5, 1),
                         ("msg", 6)]
    assert sub.eos


# stale timers ------------------------------------------------------------------------------------
def test_a_timer_of_a_window_that_closed_does_not_close_the_next_window_of_the_topic():
    s, subs = _new()
    sub = subs[1]
    parse(s, data(1, 0), data(1, 2))
    first = s.windows[1]
    parse(s, data(1, 1))                                       # filled: closed
    assert first.timer.cancelled and not s.windows
    parse(s, data(1, 5))                                       # a new gap: 3, 4
    second = s.windows[1]
    assert second is not first
    first.timer.callback(*first.timer.args)                    # the first one's timer fires anyway
    assert s.windows.get(1) is second
    assert sub.kinds == [("msg", 0), ("msg", 1), ("msg", 2)]
    parse(s, data(1, 3), data(1, 4))
    assert sub.kinds == [("msg", n) for n in range(6)] and s.counters["sequence_gaps"] == 0


def test_the_window_timer_is_armed_with_the_configured_timeout_per_gap():
    s, subs = _new(timeout=0.75)
    parse(s, data(1, 0), data(1, 2))
    window = s.windows[1]
    assert window.timer.callback == s._window_expired and window.timer.args == (1, window)
    assert not window.timer.cancelled
    expire(s)
    assert window.timer.cancelled or 1 not in s.windows
    assert subs[1].kinds == [("msg", 0), ("gap", 1, 1), ("msg", 2)]


# the 32-bit wrap --------------------------------------------------------------------------------
def test_a_gap_across_the_wrap_inside_a_window_is_filled_in_order():
    s, subs = _new()
    sub = subs[1]
    sqns = [(MASK - 2 + n) & MASK for n in range(8)]         # MASK-2 .. 4
    parse(s, data(1, sqns[0]), data(1, sqns[1]), data(1, sqns[4]), data(1, sqns[6]))
    parse(s, data(1, sqns[5]), data(1, sqns[2]))
    assert sub.kinds == [("msg", sqns[0]), ("msg", sqns[1]), ("msg", sqns[2])]
    parse(s, data(1, sqns[3]), data(1, sqns[7]))
    assert sub.kinds == [("msg", n) for n in sqns]
    assert not s.windows


def test_what_is_lost_across_the_wrap_is_told_with_32_bit_sequence_numbers():
    s, subs = _new()
    sub = subs[1]
    parse(s, data(1, MASK - 1), data(1, 2))                   # MASK, 0, 1 missing
    parse(s, data(1, 0))
    expire(s)
    assert sub.kinds == [("msg", MASK - 1), ("gap", MASK, 1), ("msg", 0), ("gap", 1, 1), ("msg", 2)]


# Regression: a bug at 57ea66b (fixed in 4ff1282): a gap right after the 32-bit wrap (the run's next sqn kept
#   as 2**32) is told as first=4294967296, not 0 (declared at once)
def test_a_long_jump_just_past_the_wrap_is_told_with_a_32_bit_first_sequence_number():
    s, subs = _new()
    sub = subs[1]
    parse(s, data(1, MASK - 1), data(1, MASK))                # the run ends past the wrap
    parse(s, data(1, MAX_WAITED + 5))                         # too long to wait for: declared at once
    gaps = [e for e in sub.kinds if e[0] == "gap"]
    assert gaps == [("gap", 0, MAX_WAITED + 5)], gaps


# Regression: a bug older than the option (already at 1a84481, still at 57ea66b; fixed in 4ff1282): without
#   the option, a gap right after the 32-bit wrap is told as first=4294967296 (next sqn not masked in
#   FrameStream._parse run)
def test_without_the_option_a_gap_just_past_the_wrap_is_told_with_a_32_bit_first_sequence_number():
    s, subs = _new(timeout=0)
    sub = subs[1]
    parse(s, data(1, MASK - 1), data(1, MASK))
    parse(s, data(1, 2))
    assert sub.kinds == [("msg", MASK - 1), ("msg", MASK), ("gap", 0, 2), ("msg", 2)], sub.kinds


def test_a_window_opened_just_past_the_wrap_fills_and_tells_losses_in_32_bits():
    s, subs = _new()
    sub = subs[1]
    parse(s, data(1, MASK - 1), data(1, MASK))
    parse(s, data(1, 3))                                      # 0, 1, 2 missing (the window's base past 2**32)
    parse(s, data(1, 1))
    expire(s)
    assert sub.kinds == [("msg", MASK - 1), ("msg", MASK), ("gap", 0, 1), ("msg", 1), ("gap", 2, 1), ("msg", 3)]


# TSNIs --------------------------------------------------------------------------------------------
def test_a_tsni_behind_what_the_waiting_topic_saw_changes_nothing():
    s, subs = _new()
    parse(s, data(1, 0), data(1, 3))
    parse(s, tsni((1, 2)))                                    # older than 3: nothing more is missing
    parse(s, data(1, 1), data(1, 2))
    assert subs[1].kinds == [("msg", n) for n in range(4)] and not s.windows


def test_a_tsni_showing_a_tail_too_long_to_wait_for_closes_the_window_at_once():
    s, subs = _new()
    parse(s, data(1, 0), data(1, 2))
    parse(s, tsni((1, 2 + MAX_WAITED + 10)))
    assert not s.windows
    assert subs[1].kinds == [("msg", 0), ("gap", 1, 1), ("msg", 2), ("gap", 3, MAX_WAITED + 10)]


def test_a_tsni_opens_a_wait_for_a_lost_tail_that_then_comes_late():
    s, subs = _new()
    parse(s, data(1, 0), data(1, 1))
    parse(s, tsni((1, 3)))                                    # 2 and 3 were sent: waited for
    assert 1 in s.windows and subs[1].kinds == [("msg", 0), ("msg", 1)]
    parse(s, data(1, 3), data(1, 2))
    assert subs[1].kinds == [("msg", n) for n in range(4)] and not s.windows


def test_a_tsni_for_another_topic_leaves_the_waiting_one_alone():
    s, subs = _new(tidxs=(1, 2))
    parse(s, data(1, 0), data(1, 2), data(2, 0))
    parse(s, tsni((2, 0)))
    assert set(s.windows) == {1}
    parse(s, data(1, 1))
    assert subs[1].kinds == [("msg", 0), ("msg", 1), ("msg", 2)] and not s.windows


# a topic index reused by a new source ------------------------------------------------------------
# Regression: a bug at 57ea66b (fixed in 4ff1282): while a window is open, frames far behind it (a new source
#   on a reused topic index) are dropped silently, neither delivered nor a gap
def test_a_new_source_on_a_reused_topic_index_while_waiting_is_followed_as_without_the_option():
    old = 5_000_000
    s, subs = _new()
    parse(s, data(1, old), data(1, old + 2))                   # the old source: a window at old+1
    for n in range(3):
        parse(s, data(1, n))                                   # a new source on the same index
    expire(s)
    parse(s, data(1, 3))
    # Without the option the new source's 0, 1, 2 are followed from there (the stream's rule for a
    # jump back of more than 2**20); with it they must not vanish without a trace.
    seen = [e for e in subs[1].kinds if not (e[0] == "msg" and e[1] >= old)]
    assert seen[-4:] == [("msg", 0), ("msg", 1), ("msg", 2), ("msg", 3)], subs[1].kinds


# many windows: a model check ----------------------------------------------------------------------
def _check_topic(events: list[tuple], sent: dict[int, bytes], came: list[int], no_expiry: bool,
                 dropped: set[int], kinds: dict[int, str]) -> None:
    """`came`: what arrived from the first arrival on, in sequence order. Every message from the
    first to the last that came is delivered once, in order, or told in exactly one gap; only ones
    that came are delivered, each with its own payload and as what it was (message or request)."""
    first, last = came[0], came[-1]
    covered, delivered = [], []
    for event in events:
        if event[0] == "gap":
            _, start, count = event
            covered.extend((start + n) & MASK for n in range(count))
        else:
            covered.append(event[1])
            delivered.append(event[1])
            assert event[2] == sent[event[1]], (event, sent[event[1]])
            assert event[0] == kinds[event[1]], event
    assert covered == [(first + n) & MASK for n in range(((last - first) & MASK) + 1)], \
        (covered[:20], first, last)
    assert set(delivered) <= set(came)
    if no_expiry:
        # No timer fired before the end: everything that came was delivered, only the dropped told.
        assert set(delivered) == set(came)
        assert set(covered) - set(delivered) <= dropped


def _model_run(start: int, count: int, rnd, drop_rate: float, delay_rate: float, max_delay: int,
               expire_midway: bool, request_rate: float) -> None:
    """Two topics of `count` messages each from `start` (near the wrap, too), interleaved on one
    stream; some dropped, some delayed, some requests; reads of 1-12 frames; timers fired now and
    then (`expire_midway`) and at the end; then every topic checked (_check_topic)."""
    s, subs = _new(tidxs=(1, 2))
    schedule, sent, arrived, dropped, kinds = [], {}, {}, {}, {}
    for tidx in (1, 2):
        sent[tidx], arrived[tidx], dropped[tidx], kinds[tidx] = {}, [], set(), {}
        base = (start + tidx * 7919) & MASK
        for n in range(count):
            sqn = (base + n) & MASK
            is_request = rnd.random() < request_rate
            payload = b"%d:%d" % (tidx, sqn)
            sent[tidx][sqn] = payload
            kinds[tidx][sqn] = "req" if is_request else "msg"
            if n > 0 and rnd.random() < drop_rate:
                dropped[tidx].add(sqn)
                continue
            delay = rnd.randint(1, max_delay) if n > 0 and rnd.random() < delay_rate else 0
            [frame] = frames_of(tidx, sqn, payload, origin=ORIGIN if is_request else None)
            schedule.append((n * 2 + tidx + delay * 2 + rnd.random(), tidx, sqn, frame))
    schedule.sort()
    position, expired = 0, False
    while position < len(schedule):
        size = rnd.randint(1, 12)
        chunk = schedule[position:position + size]
        position += size
        for _, tidx, sqn, _ in chunk:
            arrived[tidx].append(sqn)
        parse(s, *(frame for *_, frame in chunk))
        if expire_midway and s.windows and rnd.random() < 0.05:
            expire(s)
            expired = True
    expire(s)
    for tidx in (1, 2):
        first = arrived[tidx][0]             # the stream starts there; what is behind it is old
        came = sorted({n for n in arrived[tidx] if (n - first) & MASK < 1 << 31}, key=lambda n: (n - first) & MASK)
        _check_topic(subs[tidx].seen, sent[tidx], came, not expired, dropped[tidx], kinds[tidx])
    assert s.counters["frames_missing"] == sum(e[2] for sub in subs.values() for e in sub.seen if e[0] == "gap")
    assert s.counters["sequence_gaps"] == sum(1 for sub in subs.values() for e in sub.seen if e[0] == "gap")



@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example, HealthCheck.data_too_large])
@given(st.integers(0, MASK), st.integers(20, 3000), st.randoms(use_true_random=False),
       st.floats(0, 0.2), st.floats(0, 0.3), st.integers(1, 40), st.booleans(), st.floats(0, 0.05))
def test_random_drops_delays_and_expiries_over_two_topics_give_each_message_once_in_order_or_in_one_gap(
        start, count, rnd, drop_rate, delay_rate, max_delay, expire_midway, request_rate):
    _model_run(start, count, rnd, drop_rate, delay_rate, max_delay, expire_midway, request_rate)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("expire_midway", [False, True])
def test_thousands_of_messages_with_many_windows_opening_and_closing(seed, expire_midway):
    rnd = random.Random(seed)
    count = 20_000 if expire_midway else 6_000      # one long wait holds everything: kept short
    _model_run(MASK - 3000 + seed * 997, count, rnd, 0.01, 0.05, 25, expire_midway, 0.01)


# -- part 2: real contexts -----------------------------------------------------------------------------
OPTION = {"tcp": "transport_tcp_dro_loss_recovery_timeout", "lbtipc": "transport_lbtipc_dro_loss_recovery_timeout"}


class _Got:
    """A receiver's messages and events, and one list of both topics' arrivals in order."""

    def __init__(self, context: Context, topic: str, arrivals: list | None = None):
        from router.um.messages import UNRECOVERABLE_LOSS
        self._loss_kind = UNRECOVERABLE_LOSS
        self.topic = topic
        self.messages: list = []
        self.events: list[tuple] = []
        self.arrivals = arrivals if arrivals is not None else []
        self.after = None                  # called with each batch, after it is recorded
        self.receiver = context.receiver(topic, on_batch=self._batch, on_event=self._event)

    def _batch(self, messages) -> None:
        self.messages.extend(messages)
        self.arrivals.extend((self.topic, m.sequence_number) for m in messages)
        if self.after is not None:
            self.after(messages)

    def _event(self, event) -> None:
        self.events.append((event.kind, event.sequence_number, event.count, len(self.messages)))

    @property
    def sqns(self) -> list[int]:
        return [m.sequence_number for m in self.messages]

    @property
    def losses(self) -> list[tuple]:
        return [(sqn, count, before) for kind, sqn, count, before in self.events if kind == self._loss_kind]

    def began(self) -> bool:
        return any(e[0] == "BOS" for e in self.events)

    def stream(self):
        [joined] = self.receiver.joined.values()
        return joined.client


@pytest.mark.integration
@pytest.mark.parametrize("transport", ["tcp", "lbtipc"])
def test_a_waiting_topic_does_not_hold_up_another_topic_on_the_same_session(tmp_path, transport):
    domain = new_domain(tmp_path)
    count = 60
    with Context(**domain.overrides(), transport=transport) as sending, \
            Context(**domain.overrides(), **{OPTION[transport]: 60_000}) as receiving:
        a, b = sending.source(f"adv.two.a.{transport}"), sending.source(f"adv.two.b.{transport}")
        arrivals: list = []
        got_a = _Got(receiving, f"adv.two.a.{transport}", arrivals)
        got_b = _Got(receiving, f"adv.two.b.{transport}", arrivals)
        wait_for(lambda: got_a.began() and got_b.began() and a.receiver_count >= 1 and b.receiver_count >= 1, 15,
                 message="both receivers joined")
        stream = got_a.stream()
        assert got_b.stream() is stream                         # one session, one stream
        Late(stream, a.index, {10, 11, 12}, release=(b.index, count))
        for n in range(count):
            a.send(b"a%06d" % n, flush=True)
            b.send(b"b%06d" % n, flush=True)
        # B flows while A waits (60 s): all of B, and of A only what came before its gap.
        wait_for(lambda: len(got_b.messages) >= count, 20, message="all of B while A waits")
        wait_for(lambda: stream.counters["frames"] >= 2 * count - 3, 10, message="every frame sent read")
        assert got_a.sqns == list(range(10)) and a.index in stream.windows
        b.send(b"b%06d" % count, flush=True)                    # A's late ones come after this one
        wait_for(lambda: len(got_a.messages) >= count, 20, message="A complete")
        counters = dict(stream.counters)
    assert got_a.sqns == list(range(count)) and got_b.sqns == list(range(count + 1))
    assert [m.data for m in got_a.messages] == [b"a%06d" % n for n in range(count)]
    assert got_a.losses == got_b.losses == []
    assert counters["gaps_waited"] == 1 and counters["frames_late"] == 3 and counters["sequence_gaps"] == 0


# Regression: a bug at 57ea66b (fixed in 4ff1282): a receiver re-created on a topic whose wait was cut short
#   by its receiver's deletion is told a loss from 0xFFFFFFFF (next_sqns left -1)
@pytest.mark.integration
def test_a_receiver_recreated_while_its_topic_waited_gets_new_messages_without_a_false_loss(tmp_path):
    domain = new_domain(tmp_path)
    with Context(**domain.overrides(), transport="tcp") as sending, \
            Context(**domain.overrides(), transport_tcp_dro_loss_recovery_timeout=3_000) as receiving:
        a, b = sending.source("adv.again.a"), sending.source("adv.again.b")
        got_a, got_b = _Got(receiving, "adv.again.a"), _Got(receiving, "adv.again.b")
        wait_for(lambda: got_a.began() and got_b.began() and a.receiver_count >= 1 and b.receiver_count >= 1, 15,
                 message="both receivers joined")
        stream = got_a.stream()
        Late(stream, a.index, {5}, release=None)            # 5 never comes: A waits
        for n in range(10):
            a.send(b"a%06d" % n, flush=True)
        wait_for(lambda: a.index in stream.windows and len(got_a.messages) == 5, 10, message="A waiting")
        got_a.receiver.close()
        wait_for(lambda: a.index not in stream.windows and a.index not in stream.subscriptions, 10,
                 message="A's receiver gone")
        again = _Got(receiving, "adv.again.a")
        wait_for(lambda: again.began(), 15, message="A's receiver again")
        for n in range(10, 20):
            a.send(b"a%06d" % n, flush=True)
        wait_for(lambda: len(again.messages) >= 10, 15, message="the new messages")
        wait_for(lambda: again.losses or stream.windows.get(a.index) is None, 5, message="no wait left")
    assert again.sqns == list(range(10, 20))
    assert again.losses == [], again.losses


# Regression: a bug at 57ea66b (fixed in 4ff1282): a receiver closing itself on a message delivered when its
#   gap fills makes _parse raise (KeyError); another topic's messages of that read are lost silently (no loss
#   told)
@pytest.mark.integration
def test_a_receiver_that_closes_itself_when_its_gap_fills_costs_another_topic_nothing(tmp_path):
    domain = new_domain(tmp_path)
    with Context(**domain.overrides(), transport="tcp") as sending, \
            Context(**domain.overrides(), transport_tcp_dro_loss_recovery_timeout=60_000) as receiving:
        a, b = sending.source("adv.quit.a"), sending.source("adv.quit.b")
        got_b = _Got(receiving, "adv.quit.b")
        got_a = _Got(receiving, "adv.quit.a")
        # An application done at message 12 closes its receiver (on the context's thread).
        got_a.after = lambda messages: got_a.receiver.close() if any(
            m.sequence_number == 12 for m in messages) else None
        wait_for(lambda: got_a.began() and got_b.began() and a.receiver_count >= 1 and b.receiver_count >= 1, 15,
                 message="both receivers joined")
        stream = got_a.stream()
        Late(stream, a.index, {10}, release=(b.index, 5))    # A's 10 comes in the read with B's 5
        for n in range(20):
            a.send(b"a%06d" % n, flush=True)
        wait_for(lambda: len(got_a.messages) >= 10 and a.index in stream.windows, 10, message="A waiting")
        for n in range(20):
            b.send(b"b%06d" % n, flush=True)
        wait_for(lambda: stream.counters["frames"] >= 40, 10, message="every frame read")
        b.send(b"b%06d" % 20, flush=True)
        wait_for(lambda: 20 in got_b.sqns, 10, message="B's last")
    assert got_a.sqns[:13] == list(range(13))
    assert got_b.sqns == list(range(21)) and got_b.losses == [], (got_b.sqns, got_b.events)


_OTR_RECEIVER = {"use_otr": True, "otr_request_initial_delay": 100, "otr_request_minimum_interval": 100,
                 "otr_request_maximum_interval": 400}


@pytest.mark.integration
def test_with_otr_what_the_wait_did_not_bring_is_recovered_from_the_source_in_order(tmp_path):
    domain = new_domain(tmp_path)
    count, late = 60, {10, 11, 12, 40}
    with Context(**domain.overrides(), transport="tcp", late_join=True) as sending, \
            Context(**domain.overrides(), transport_tcp_dro_loss_recovery_timeout=300, **_OTR_RECEIVER) as receiving:
        source = sending.source("adv.otr.never")
        got = _Got(receiving, "adv.otr.never")
        wait_for(lambda: got.began() and source.receiver_count >= 1, 15, message="joined")
        wait_for(lambda: all(j.late_join is None for j in list(got.receiver.joined.values())), 10,
                 message="late join (of nothing) done")
        stream = got.stream()
        Late(stream, source.index, late, release=None)     # never come on the transport
        for n in range(count):
            source.send(b"%06d" % n, flush=True)
        wait_for(lambda: len(got.messages) >= count, 20, message="every message, some recovered")
        counters = dict(stream.counters)
        otr = {k: v for k, v in receiving.counters().items() if k.startswith("otr_")}
    assert got.sqns == list(range(count))
    assert [m.data for m in got.messages] == [b"%06d" % n for n in range(count)]
    assert sorted(m.sequence_number for m in got.messages if getattr(m, "otr", False)) == sorted(late)
    assert got.losses == []
    assert counters["gaps_waited"] >= 1 and counters["frames_missing"] == len(late)
    assert otr["otr_messages_recovered"] == len(late)


@pytest.mark.integration
def test_with_otr_late_messages_within_the_wait_ask_the_source_for_nothing(tmp_path):
    domain = new_domain(tmp_path)
    count, late = 60, {10, 11, 12}
    with Context(**domain.overrides(), transport="tcp", late_join=True) as sending, \
            Context(**domain.overrides(), transport_tcp_dro_loss_recovery_timeout=30_000, **_OTR_RECEIVER) as receiving:
        source = sending.source("adv.otr.late")
        got = _Got(receiving, "adv.otr.late")
        wait_for(lambda: got.began() and source.receiver_count >= 1, 15, message="joined")
        wait_for(lambda: all(j.late_join is None for j in list(got.receiver.joined.values())), 10,
                 message="late join (of nothing) done")
        stream = got.stream()
        Late(stream, source.index, late, release=(source.index, 30))
        for n in range(count):
            source.send(b"%06d" % n, flush=True)
        wait_for(lambda: len(got.messages) >= count, 20, message="every message")
        counters = dict(stream.counters)
        otr = {k: v for k, v in receiving.counters().items() if k.startswith("otr_")}
    assert got.sqns == list(range(count))
    assert not any(getattr(m, "otr", False) for m in got.messages)
    assert got.losses == []
    assert counters["frames_late"] == len(late) and counters["frames_missing"] == 0
    assert otr["otr_requests_sent"] == 0 and otr["otr_messages_recovered"] == 0


@pytest.mark.integration
def test_with_otr_late_frames_after_the_recovery_are_not_delivered_twice(tmp_path):
    domain = new_domain(tmp_path)
    late = {10, 11}
    with Context(**domain.overrides(), transport="tcp", late_join=True) as sending, \
            Context(**domain.overrides(), transport_tcp_dro_loss_recovery_timeout=200, **_OTR_RECEIVER) as receiving:
        source = sending.source("adv.otr.twice")
        got = _Got(receiving, "adv.otr.twice")
        wait_for(lambda: got.began() and source.receiver_count >= 1, 15, message="joined")
        wait_for(lambda: all(j.late_join is None for j in list(got.receiver.joined.values())), 10,
                 message="late join (of nothing) done")
        stream = got.stream()
        Late(stream, source.index, late, release=(source.index, 35))
        for n in range(30):
            source.send(b"%06d" % n, flush=True)
        wait_for(lambda: len(got.messages) >= 30, 20, message="the first 30, two recovered")
        for n in range(30, 50):                               # the late 10 and 11 come after 35 now
            source.send(b"%06d" % n, flush=True)
        wait_for(lambda: len(got.messages) >= 50, 20, message="all 50")
        wait_for(lambda: stream.counters["frames"] >= 50, 10, message="every frame parsed")
    assert got.sqns == list(range(50))
    assert sorted(m.sequence_number for m in got.messages if getattr(m, "otr", False)) == sorted(late)
    assert got.losses == []


@pytest.mark.integration
@pytest.mark.parametrize("transport", ["tcp", "lbtipc"])
def test_a_tail_shown_lost_by_the_sources_tsni_is_waited_for_then_told_once(tmp_path, transport):
    """The last three messages never come; the idle source's TSNIs (every 200 ms) say they were
    sent: the receiver waits the timeout for them, then tells the loss once (later TSNIs, saying
    the same, tell nothing more)."""
    domain = new_domain(tmp_path)
    count, timeout_ms = 30, 600
    with Context(**domain.overrides(), transport=transport, transport_topic_sequence_number_info_interval=200) \
            as sending, Context(**domain.overrides(), **{OPTION[transport]: timeout_ms}) as receiving:
        source = sending.source(f"adv.tail.{transport}")
        got = _Got(receiving, f"adv.tail.{transport}")
        wait_for(lambda: got.began() and source.receiver_count >= 1, 15, message="joined")
        stream = got.stream()
        Late(stream, source.index, {count - 3, count - 2, count - 1}, release=None)
        for n in range(count):
            source.send(b"%06d" % n, flush=True)
        wait_for(lambda: got.losses, 15, message="the tail told lost")
        waited = stream.counters["gaps_waited"]
        wait_for(lambda: stream.counters["control_frames"] >= 4, 10, message="more TSNIs after it")
        losses, counters = list(got.losses), dict(stream.counters)
    assert got.sqns == list(range(count - 3))
    assert losses == [(count - 3, 3, count - 3)]
    assert waited == 1 and counters["gaps_waited"] == 1 and counters["frames_missing"] == 3
