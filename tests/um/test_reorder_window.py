"""Waiting out a gap on a TCP or LBT-IPC stream (transport_*_dro_loss_recovery_timeout): late
messages fill it and everything is delivered in order; what never comes is declared lost in its
place when the wait is over. Pure logic: the stream is fed frames by hand and its timers are
fired by hand (the integration tests in test_dro_loss_recovery.py run it over real sockets)."""
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from router.um.frame_stream import FrameStream, run_payloads
from router.um.loop import EventLoop
from router.um.reorder_window import MASK, MAX_WAITED, ReorderWindow, distance
from router.um.wire.lbmc import LBMC_TYPE_CONTROL, LBMC_TYPE_MESSAGE, MESSAGE_HEADER, NHDR_DATA, LbmcMessage, encode_lbmc
from router.um.wire.lbmc_tsni import Tsni


class _Stream(FrameStream):
    def _close_transport(self):
        pass


class _Sub:
    """What an application receiver sees: ("msg", sqn) and ("gap", first, count), in order."""

    def __init__(self):
        self.seen: list[tuple] = []
        self.eos = False

    def on_run(self, data, first, count, length):
        self.on_batch(run_payloads(data, first, count, length))

    def on_batch(self, messages):
        self.seen += [("msg", sqn) for sqn, *_ in messages]

    def on_gap(self, first, count):
        self.seen.append(("gap", first, count))

    def on_eos(self):
        self.eos = True


def frame(sqn: int, tidx: int = 1) -> bytes:
    return MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, 20, tidx, sqn & MASK) + b"%08d" % (sqn % 10**8)


def stream(timeout: float) -> tuple[_Stream, _Sub, EventLoop]:
    loop = EventLoop("test")
    s = _Stream(loop, ("test",), lambda _: None)
    s.loss_recovery_timeout = timeout
    sub = _Sub()
    s.subscribe(1, sub)
    return s, sub, loop


def feed(s: _Stream, sqns, per_read: int = 1) -> None:
    sqns = list(sqns)
    for start in range(0, len(sqns), per_read):
        data = b"".join(frame(n) for n in sqns[start:start + per_read])
        assert s._parse(data) == len(data)


def expire(s: _Stream) -> None:
    for tidx, window in list(s.windows.items()):
        s._window_expired(tidx, window)


def test_without_the_option_a_gap_is_lost_at_once_and_the_late_messages_are_dropped():
    s, sub, _ = stream(0)
    feed(s, [0, 1, 2, 5, 6, 3, 4, 7])
    assert sub.seen == [("msg", 0), ("msg", 1), ("msg", 2), ("gap", 3, 2), ("msg", 5), ("msg", 6), ("msg", 7)]
    assert s.counters["sequence_gaps"] == 1 and s.counters["frames_missing"] == 2 and not s.windows


def test_late_messages_within_the_wait_fill_the_gap_and_all_come_in_order():
    s, sub, _ = stream(5.0)
    feed(s, [0, 1, 2, 5, 6])
    assert sub.seen == [("msg", 0), ("msg", 1), ("msg", 2)]          # 5 and 6 wait behind the gap
    feed(s, [3])
    assert sub.seen[-1] == ("msg", 3) and len(sub.seen) == 4           # 4 still missing
    feed(s, [4, 7, 8])
    assert sub.seen == [("msg", n) for n in range(9)]
    assert not s.windows and s.counters["frames_late"] == 2 and s.counters["gaps_waited"] == 1
    assert s.counters["sequence_gaps"] == 0 and s.counters["frames_missing"] == 0
    feed(s, [9, 10])                                                   # followed in runs again
    assert sub.seen[-1] == ("msg", 10)


def test_what_never_comes_is_declared_lost_in_its_place_when_the_wait_is_over():
    s, sub, _ = stream(5.0)
    feed(s, [0, 3, 4, 7, 1, 9])                         # 2, 5, 6 and 8 never come
    assert sub.seen == [("msg", 0), ("msg", 1)]
    expire(s)
    assert sub.seen == [("msg", 0), ("msg", 1), ("gap", 2, 1), ("msg", 3), ("msg", 4), ("gap", 5, 2),
                        ("msg", 7), ("gap", 8, 1), ("msg", 9)]
    assert s.counters["sequence_gaps"] == 3 and s.counters["frames_missing"] == 4
    feed(s, [2, 8, 10])                                 # too late: dropped; the stream goes on
    assert sub.seen[-1] == ("msg", 10) and sub.seen.count(("msg", 2)) == 0


def test_a_duplicate_while_waiting_is_dropped():
    s, sub, _ = stream(5.0)
    feed(s, [0, 2, 2, 0, 1, 3])
    assert sub.seen == [("msg", n) for n in range(4)]


def test_the_wait_is_a_timer_of_the_streams_loop_cancelled_when_the_gap_fills():
    s, sub, loop = stream(0.25)
    before = time.monotonic()
    feed(s, [0, 2])
    [window] = s.windows.values()
    assert window.timer.callback == s._window_expired and window.timer.args == (1, window)
    assert before + 0.25 <= window.timer.when <= time.monotonic() + 0.25
    feed(s, [1])
    assert window.timer.cancelled                      # filled: no loss declared later
    assert sub.seen == [("msg", 0), ("msg", 1), ("msg", 2)]


def test_a_stream_that_ends_while_waiting_delivers_what_it_held_and_tells_the_loss_before_eos():
    s, sub, _ = stream(5.0)
    feed(s, [0, 2, 3])
    s.close()
    assert sub.seen == [("msg", 0), ("gap", 1, 1), ("msg", 2), ("msg", 3)] and sub.eos


def test_a_jump_too_long_to_wait_for_is_declared_at_once():
    s, sub, _ = stream(5.0)
    feed(s, [0, MAX_WAITED + 2])
    assert sub.seen == [("msg", 0), ("gap", 1, MAX_WAITED + 1), ("msg", MAX_WAITED + 2)] and not s.windows
    feed(s, [MAX_WAITED + 4, MAX_WAITED + 3 + MAX_WAITED + 5])   # a short gap, then a long jump past it
    assert sub.seen[3:] == [("gap", MAX_WAITED + 3, 1), ("msg", MAX_WAITED + 4),
                            ("gap", MAX_WAITED + 5, MAX_WAITED + 3), ("msg", 2 * MAX_WAITED + 8)]
    assert not s.windows


def test_a_tsni_showing_a_lost_tail_while_waiting_is_waited_for_with_the_rest():
    s, sub, _ = stream(5.0)
    feed(s, [0, 2])
    control = encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, [Tsni([(1, 4)])]))     # the last one sent is 4
    assert s._parse(control) == len(control) and s.counters["control_frames"] == 1
    feed(s, [1, 3])
    assert sub.seen == [("msg", n) for n in range(4)]
    expire(s)
    assert sub.seen[-1] == ("gap", 4, 1)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, MASK), st.lists(st.integers(0, 40), min_size=1, max_size=40, unique=True),
       st.randoms(use_true_random=False), st.integers(1, 5), st.sets(st.integers(0, 40)))
def test_any_arrival_order_gives_each_message_once_in_order_with_losses_in_place(start, present, rnd, per_read,
                                                                                 dropped):
    """Messages start.. (across the 32-bit wrap, too) come in any order, some never: the
    application sees sequence order, every one that came (once), and each one that did not as
    part of a gap, before anything after it."""
    count = max(present) + 1
    came = [n for n in present if n not in dropped] or [present[0]]
    order = sorted(came)
    first = order[0]
    rest = order[1:]
    rnd.shuffle(rest)
    s, sub, _ = stream(5.0)
    feed(s, [(start + n) & MASK for n in [first] + rest], per_read)
    expire(s)
    seen = [(kind, (rest_[0] - start) & MASK, *rest_[1:]) for kind, *rest_ in sub.seen]
    offsets = []
    for item in seen:
        if item[0] == "msg":
            offsets.append(item[1])
        else:
            offsets.extend(range(item[1], item[1] + item[2]))
    assert offsets == list(range(first, max(came) + 1))              # in order, each once, nothing skipped
    assert [o for kind, o, *_ in seen if kind == "msg"] == sorted(came)
    assert count >= max(came) + 1


def test_window_distances_wrap():
    assert distance(MASK, 0) == 1 and distance(0, MASK) == -1
    w = ReorderWindow(MASK - 1, 3)                                     # MASK-1, MASK, 0 missing
    assert w.next == 1 and w.admit(MASK) and not w.admit(MASK) and w.admit(5)
    assert w.missing == {MASK - 1, 0, 1, 2, 3, 4} and w.next == 6
