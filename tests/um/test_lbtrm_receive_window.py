"""ReceiveWindow: an LBT-RM receiver's order, gap, NAK and loss bookkeeping for one session.

The window is pure logic, so every test drives it with explicit `now` values and a seeded rng:
no sockets, no clocks, no sleeps. What is checked, and why it matters to a receiver:

- delivery is in order and exactly once (the fast path, buffering behind a gap, duplicates);
- a gap is NAKed only after the random initial backoff, then every `nak_backoff`, and an NCF
  quiets it for `nak_suppress` (so receivers do not storm a source);
- loss is declared (and delivery moves on) for the reasons UM has: the source's trailing edge or
  an NCF "no retry" (`unrecovered_txw`), the NAK generation interval (`unrecovered_tmo`), and
  too much data waiting behind gaps (`max_buffered`);
- `next_deadline()` says when `due()` next has work (the receiver arms its timer with it);
- 32-bit sequence numbers wrap, a huge jump does not build a huge set, and the first datagram
  heard decides where the window starts;
- two hypothesis properties tie it together: with every NAK answered, everything sent is
  delivered once and in order; with some sqns never repaired, exactly those are lost;
- `take_next`, the receive path's shortcut for the next datagram in a steady session, takes only
  what data() would deliver at once, and leaves the window as data() would (a third property).

"""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.um.lbtrm_receive_window import MAX_GAP, MAX_LEAD, YOUNG_SESSION, ReceiveWindow
from router.um.wire.lbtrm import NCF_IGNORED, NCF_NO_RETRY, NCF_RX_DELAY, NCF_SHED

WRAP = 1 << 32
SEED = 7


def payload(sqn: int) -> bytes:
    """A datagram's payload is its (32-bit) sequence number, so order can be read off the output."""
    return (sqn % WRAP).to_bytes(4, "big")


def payloads(*sqns: int) -> list[bytes]:
    return [payload(sqn) for sqn in sqns]


def window(**options) -> ReceiveWindow:
    options.setdefault("rng", random.Random(SEED))
    return ReceiveWindow(**options)


def feed(w: ReceiveWindow, sqns, now: float = 0.0, **kwargs) -> list[bytes]:
    """Hand `sqns` to the window in that order; everything it delivers, concatenated."""
    out: list[bytes] = []
    for sqn in sqns:
        out += w.data(sqn % WRAP, payload(sqn), now, **kwargs)
    return out


def lost_counters(w: ReceiveWindow) -> tuple[int, int, int]:
    return w.counters["lost"], w.counters["unrecovered_txw"], w.counters["unrecovered_tmo"]


def window_with_gap_at_1(**options) -> ReceiveWindow:
    """Sqn 0 delivered and sqn 2 buffered at t=0: sqn 1 is missing."""
    w = window(**options)
    assert feed(w, [0, 2]) == payloads(0)
    assert set(w.missing) == {1}
    return w


# -- in order ------------------------------------------------------------------------------------

def test_in_order_datagrams_are_delivered_at_once_and_counted():
    w = window()
    for sqn in range(100, 110):
        assert w.data(sqn, payload(sqn), 0.0) == [payload(sqn)]
    assert w.expected == 110
    assert w.counters["msgs_rcved"] == 10
    assert w.counters["bytes_rcved"] == 40
    assert not w.missing and not w.buffered and w.buffered_bytes == 0
    assert w.next_deadline() is None
    assert w.due(100.0) == ([], [])
    assert lost_counters(w) == (0, 0, 0)


def test_payloads_of_different_sizes_are_counted_in_bytes():
    w = window()
    w.data(0, b"", 0.0)
    w.data(1, b"x" * 1000, 0.0)
    w.data(3, b"y" * 7, 0.0)            # buffered behind the gap at 2: received all the same
    assert w.counters["msgs_rcved"] == 3
    assert w.counters["bytes_rcved"] == 1007
    assert w.buffered_bytes == 7


def test_a_datagram_already_delivered_is_a_duplicate():
    w = window()
    feed(w, [0, 1, 2])
    assert w.data(1, payload(1), 0.0) == []
    assert w.data(2, payload(2), 0.0) == []
    assert w.counters["duplicate_data"] == 2
    assert w.counters["msgs_rcved"] == 3


# -- a gap: NAKs, backoff, repair ----------------------------------------------------------------

def test_datagrams_after_a_gap_wait_until_a_retransmission_fills_it():
    w = window()
    assert feed(w, [0, 2, 3, 4]) == payloads(0)
    assert sorted(w.buffered) == [2, 3, 4] and w.buffered_bytes == 12
    assert w.data(1, payload(1), 0.1, retransmission=True) == payloads(1, 2, 3, 4)
    assert w.expected == 5 and not w.buffered and w.buffered_bytes == 0 and not w.missing
    assert w.counters["retransmissions_rcved"] == 1
    assert w.counters["msgs_rcved"] == 5
    assert lost_counters(w) == (0, 0, 0)
    assert w.data(5, payload(5), 0.2) == payloads(5)      # back on the fast path


def test_a_gap_is_naked_after_the_initial_backoff_then_every_nak_backoff():
    w = window_with_gap_at_1(nak_initial_backoff=0.05, nak_backoff=0.2)
    first = w.next_deadline()
    assert 0.0 <= first <= 0.05
    assert w.due(first - 1e-6) == ([], [])           # not before the backoff
    assert w.due(first) == ([1], [])
    assert w.due(first + 0.1) == ([], [])            # not again before nak_backoff
    assert w.next_deadline() == first + 0.2
    assert w.due(first + 0.2) == ([1], [])
    assert w.due(first + 0.4) == ([1], [])
    assert w.counters["naks_sent"] == 3


def test_the_initial_backoff_is_drawn_from_the_rng():
    deadlines = set()
    for seed in range(20):
        w = window_with_gap_at_1(rng=random.Random(seed), nak_initial_backoff=0.05)
        deadline = w.next_deadline()
        assert 0.0 <= deadline <= 0.05
        deadlines.add(deadline)
        again = window_with_gap_at_1(rng=random.Random(seed), nak_initial_backoff=0.05)
        assert again.next_deadline() == deadline       # seeded: reproducible
    assert len(deadlines) > 10                          # and random: receivers do not NAK in step


def test_one_gap_of_several_sqns_is_naked_together():
    w = window()
    feed(w, [10, 15])
    naks, _ = w.due(w.next_deadline())
    assert sorted(naks) == [11, 12, 13, 14]
    assert w.counters["naks_sent"] == 4


def test_duplicates_of_buffered_and_retransmitted_datagrams_are_counted_and_dropped():
    w = window()
    feed(w, [0, 2])
    assert w.data(2, payload(2), 0.0) == []                               # already buffered
    assert w.data(1, payload(1), 0.1, retransmission=True) == payloads(1, 2)
    assert w.data(1, payload(1), 0.2) == []                               # the original, late
    assert w.counters["duplicate_data"] == 2
    assert w.counters["msgs_rcved"] == 3


def test_a_repaired_sqn_is_no_longer_naked():
    w = window_with_gap_at_1()
    w.due(w.next_deadline())
    w.data(1, payload(1), 0.1, retransmission=True)
    assert w.next_deadline() is None
    assert w.due(5.0) == ([], [])


# -- the source's transmission window: SM and NCF trail ------------------------------------------

def test_an_sm_whose_lead_is_beyond_what_arrived_reveals_tail_loss():
    w = window()
    feed(w, [0, 1, 2])
    assert w.sm(5, 0, 0.0) == []
    assert sorted(w.missing) == [3, 4, 5]
    naks, _ = w.due(w.next_deadline())
    assert sorted(naks) == [3, 4, 5]
    assert feed(w, [3, 4, 5], now=0.1, retransmission=True) == payloads(3, 4, 5)
    assert lost_counters(w) == (0, 0, 0)


def test_an_sm_lead_already_received_changes_nothing():
    w = window()
    feed(w, [0, 1, 2])
    assert w.sm(2, 0, 0.0) == [] and w.sm(1, 0, 0.0) == []
    assert not w.missing and w.next_deadline() is None


def test_an_sm_trail_above_a_missing_sqn_gives_it_up_and_delivery_moves_past():
    w = window_with_gap_at_1()
    assert w.sm(2, 2, 0.5) == payloads(2)
    assert w.expected == 3 and not w.missing and not w.given_up
    assert lost_counters(w) == (1, 1, 0)
    assert w.data(3, payload(3), 0.6) == payloads(3)


def test_an_sm_trail_gives_up_only_what_is_below_it():
    w = window()
    feed(w, [0, 4])                                    # 1, 2, 3 missing
    assert w.sm(4, 3, 0.5) == []                       # 1 and 2 gone, 3 still recoverable
    assert sorted(w.missing) == [3]
    assert lost_counters(w) == (2, 2, 0)
    assert w.data(3, payload(3), 0.6, retransmission=True) == payloads(3, 4)


def test_an_ncf_trail_above_a_missing_sqn_gives_it_up():
    w = window_with_gap_at_1()
    assert w.ncf([], NCF_IGNORED, 2, 0.5) == payloads(2)
    assert lost_counters(w) == (1, 1, 0)


def test_a_late_original_of_a_sqn_given_up_is_a_duplicate():
    w = window_with_gap_at_1()
    w.sm(2, 2, 0.5)
    assert w.data(1, payload(1), 0.6) == []
    assert w.counters["duplicate_data"] == 1


# -- NCF reasons ---------------------------------------------------------------------------------

def test_an_ncf_no_retry_gives_the_sqn_up_at_once():
    w = window_with_gap_at_1()
    w.ncf([1], NCF_NO_RETRY, 0, 0.01)
    assert not w.missing
    assert lost_counters(w) == (1, 1, 0)
    assert w.next_deadline() is None
    assert w.due(1.0)[0] == []                         # never NAKed again


def test_an_ncf_no_retry_releases_what_waited_behind_the_sqn():
    w = window_with_gap_at_1()
    assert w.ncf([1], NCF_NO_RETRY, 0, 0.01) == payloads(2)
    assert w.expected == 3 and not w.buffered


@pytest.mark.parametrize("reason, counter", [
    (NCF_IGNORED, "ncfs_ignored"),
    (NCF_SHED, "ncfs_shed"),
    (NCF_RX_DELAY, "ncfs_rx_delay"),
    (0x7, "ncfs_unknown"),
])
def test_an_ncf_postpones_the_next_nak_by_nak_suppress(reason, counter):
    w = window_with_gap_at_1(nak_backoff=0.2, nak_suppress=1.0)
    first = w.next_deadline()
    assert w.due(first) == ([1], [])
    ncf_at = first + 0.01
    assert w.ncf([1], reason, 0, ncf_at) == []
    assert w.counters[counter] == 1
    assert w.next_deadline() == ncf_at + 1.0
    assert w.due(first + 0.2) == ([], [])              # the backoff alone would have NAKed here
    assert w.due(ncf_at + 0.99) == ([], [])
    assert w.due(ncf_at + 1.0) == ([1], [])
    assert set(w.missing) == {1}
    assert lost_counters(w) == (0, 0, 0)


def test_an_ncf_for_sqns_not_missing_changes_nothing():
    w = window_with_gap_at_1()
    before = dict(w.counters)
    assert w.ncf([0, 2, 99], NCF_NO_RETRY, 0, 0.01) == []
    assert w.ncf([0, 2, 99], NCF_SHED, 0, 0.01) == []
    assert w.counters == before and set(w.missing) == {1}


def test_an_ncf_before_anything_was_heard_is_ignored():
    w = window()
    assert w.ncf([5], NCF_NO_RETRY, 3, 0.0) == []
    assert w.expected is None


# -- the NAK generation interval ------------------------------------------------------------------

def test_a_sqn_still_missing_after_nak_generation_is_given_up():
    w = window_with_gap_at_1(nak_backoff=0.25, nak_generation=2.0)
    now = 0.0
    while now < 2.0:
        naks, released = w.due(now)
        assert released == []
        now += 0.25
    assert set(w.missing) == {1}
    assert w.due(2.0) == ([], payloads(2))
    assert lost_counters(w) == (1, 0, 1)
    assert w.next_deadline() is None
    assert w.data(3, payload(3), 2.1) == payloads(3)


def test_next_deadline_is_exactly_when_due_next_has_work():
    """Walk the timer the way the receiver does: at each deadline `due` NAKs or gives up, and just
    before it does nothing. Gap seen at t=0 and binary fractions keep the float arithmetic exact."""
    w = window(nak_initial_backoff=0.05, nak_backoff=0.25, nak_suppress=0.5, nak_generation=2.0)
    feed(w, [0, 2, 5])                                  # 1, 3, 4 missing
    steps = 0
    while (deadline := w.next_deadline()) is not None:
        before = (w.counters["naks_sent"], w.counters["lost"])
        assert w.due(deadline - 1e-9) == ([], [])
        assert (w.counters["naks_sent"], w.counters["lost"]) == before
        naks, _ = w.due(deadline)
        assert naks or w.counters["lost"] > before[1]
        if steps == 1:
            w.ncf([3], NCF_SHED, 0, deadline)          # one sqn on a different schedule
        steps += 1
        assert steps < 100
    assert steps > 3
    assert lost_counters(w) == (3, 0, 3)
    assert w.expected == 6


def test_due_at_next_deadline_always_makes_progress():
    w = window(send_naks=False, nak_generation=0.3)
    feed(w, [0])
    w.data(2, payload(2), 0.4)                          # the gap is seen at t=0.4
    deadline = w.next_deadline()
    assert w.due(deadline) == ([], payloads(2))


def test_postponing_moves_every_nak_and_give_up_by_the_time_the_receiver_could_not_read():
    """While flow control keeps the socket unread, the repair of a gap waits unread in the kernel:
    the receiver postpones by that time, so NAKs and the give-up come as if it had not passed."""
    w = window_with_gap_at_1(nak_initial_backoff=0.0, nak_backoff=0.25, nak_generation=2.0)
    assert w.next_deadline() == 0.0
    w.postpone(8.0)                                     # 8 s unread
    assert w.next_deadline() == 8.0
    assert w.due(7.75) == ([], [])
    assert w.due(8.0) == ([1], [])
    assert w.due(9.75) == ([1], [])                     # 1.75 s of reading: not given up
    assert lost_counters(w) == (0, 0, 0)
    assert w.data(1, payload(1), 9.8, retransmission=True) == payloads(1, 2)
    assert w.next_deadline() is None and lost_counters(w) == (0, 0, 0)


def test_what_is_still_missing_after_a_postponed_nak_generation_is_given_up():
    w = window_with_gap_at_1(send_naks=False, nak_generation=2.0)
    w.postpone(0.5)
    assert w.next_deadline() == 2.5
    assert w.due(2.5) == ([], payloads(2))
    assert lost_counters(w) == (1, 0, 1)


# -- send_naks=False ------------------------------------------------------------------------------

def test_without_naks_nothing_is_naked_and_loss_is_declared_after_nak_generation():
    w = window_with_gap_at_1(send_naks=False, nak_generation=2.0)
    assert w.next_deadline() == 2.0
    for now in (0.0, 0.05, 0.5, 1.0, 1.99):
        assert w.due(now) == ([], [])
    assert w.due(2.0) == ([], payloads(2))
    assert w.counters["naks_sent"] == 0
    assert lost_counters(w) == (1, 0, 1)


def test_without_naks_a_retransmission_for_another_receiver_still_repairs():
    w = window_with_gap_at_1(send_naks=False)
    assert w.data(1, payload(1), 0.5, retransmission=True) == payloads(1, 2)
    assert w.next_deadline() is None and lost_counters(w) == (0, 0, 0)


# -- max_buffered ---------------------------------------------------------------------------------

def test_the_oldest_gap_is_given_up_when_buffered_bytes_pass_max_buffered():
    w = window(max_buffered=25)
    w.data(0, b"a" * 10, 0.0)
    assert w.data(2, b"c" * 10, 0.0) == []
    assert w.data(3, b"d" * 10, 0.0) == []             # 20 bytes wait: within the bound
    assert w.data(4, b"e" * 10, 0.0) == [b"c" * 10, b"d" * 10, b"e" * 10]
    assert w.buffered_bytes == 0 and w.expected == 5
    assert lost_counters(w) == (1, 1, 0)


def test_only_as_many_gaps_as_needed_are_given_up_for_max_buffered():
    w = window(max_buffered=25)
    w.data(0, b"a" * 10, 0.0)
    w.data(2, b"c" * 10, 0.0)                          # gap at 1
    w.data(4, b"e" * 10, 0.0)                          # gap at 3: 20 bytes wait
    out = w.data(5, b"f" * 10, 0.0)                    # 30 bytes: over
    assert out == [b"c" * 10]                          # giving 1 up releases 2: 20 bytes left
    assert set(w.missing) == {3}
    assert lost_counters(w) == (1, 1, 0)


class _ScanCountingDict(dict):
    """A dict that counts the entries every walk over it visits."""

    visited = 0

    def __iter__(self):
        for key in super().__iter__():
            self.visited += 1
            yield key


def test_giving_up_a_long_gap_for_max_buffered_walks_it_once():
    """A receiver far behind has a gap of up to MAX_GAP numbers before what it buffers; when that
    passes max_buffered, the gap is given up oldest first, each found where delivery stopped. A
    search of the whole gap for each (quadratic: seconds with the receiver's loop blocked) is not
    done."""
    w = window(max_buffered=2500)
    w.missing = _ScanCountingDict()
    gap = 5000
    w.data(0, b"a" * 1000, 0.0)
    w.data(gap + 1, b"b" * 1000, 0.0)
    w.data(gap + 2, b"c" * 1000, 0.0)
    assert len(w.missing) == gap and w.missing.visited == 0
    out = w.data(gap + 3, b"d" * 1000, 0.0)            # 3000 bytes wait: the whole gap goes
    assert out == [b"b" * 1000, b"c" * 1000, b"d" * 1000]
    assert lost_counters(w) == (gap, gap, 0) and not w.missing and w.expected == gap + 4
    assert w.missing.visited <= gap


# -- 32-bit wrap-around ---------------------------------------------------------------------------

def test_sqns_crossing_the_32_bit_wrap_are_delivered_in_order():
    w = window()
    sqns = [WRAP - 3 + i for i in range(6)]             # ..., 0xFFFFFFFF, 0, 1, 2
    assert feed(w, sqns) == payloads(*sqns)
    assert not w.missing and not w.buffered


def test_a_gap_across_the_wrap_is_naked_with_32_bit_sqns():
    w = window()
    feed(w, [WRAP - 2, WRAP + 1])                       # 0xFFFFFFFE then 1
    naks, _ = w.due(w.next_deadline())
    assert sorted(naks) == [0, WRAP - 1]
    assert all(0 <= sqn < WRAP for sqn in naks)
    assert w.data(0, payload(0), 0.1) == []
    assert w.data(WRAP - 1, payload(WRAP - 1), 0.1) == payloads(WRAP - 1, 0, 1)


def test_sm_and_ncf_sqns_are_read_across_the_wrap():
    w = window()
    feed(w, [WRAP - 2])
    w.sm(1, WRAP - 2, 0.0)                              # lead 1: 0xFFFFFFFF, 0, 1 were sent
    assert sorted(w.missing) == [WRAP - 1, WRAP, WRAP + 1]
    w.ncf([0], NCF_NO_RETRY, WRAP - 2, 0.0)             # 0 gone
    assert w.sm(1, 0, 0.1) == []                        # trail 0: 0xFFFFFFFF gone; 1 left
    assert sorted(sqn % WRAP for sqn in w.missing) == [1]
    assert w.data(1, payload(1), 0.2) == payloads(1)
    assert lost_counters(w) == (2, 2, 0)


# -- a huge jump ----------------------------------------------------------------------------------

def test_a_jump_past_max_gap_gives_the_older_part_up_at_once():
    w = window()
    feed(w, [0])
    far = 1 << 30
    assert w.data(far, payload(far), 0.0) == []
    assert len(w.missing) == MAX_GAP                    # not a billion entries
    assert min(w.missing) == far - MAX_GAP
    skipped = far - 1 - MAX_GAP
    assert lost_counters(w) == (skipped, skipped, 0)
    naks, _ = w.due(w.next_deadline())
    assert len(naks) == MAX_GAP and min(naks) == far - MAX_GAP
    # The recent part goes too (the source's trail passed it); delivery continues after the jump.
    assert w.sm(far, far, 0.5) == payloads(far)
    assert w.counters["lost"] == far - 1
    assert not w.missing and not w.jumps and not w.given_up
    assert w.data(far + 1, payload(far + 1), 0.6) == payloads(far + 1)


def test_a_jump_past_max_gap_whose_recent_part_is_repaired():
    w = window()
    feed(w, [0])
    far = MAX_GAP + 100
    w.data(far, payload(far), 0.0)
    assert min(w.missing) == far - MAX_GAP
    out = feed(w, range(far - MAX_GAP, far), now=0.1, retransmission=True)
    assert out == payloads(*range(far - MAX_GAP, far + 1))
    assert w.counters["lost"] == 99
    assert w.expected == far + 1 and not w.jumps


def test_a_lead_is_believable_up_to_max_lead_past_the_highest_known_across_the_wrap_too():
    w = window()
    assert w.believable(12345)                          # nothing heard: anything may start it
    start = WRAP - 10
    feed(w, [start, start + 2])                         # the highest known is start + 2
    assert w.believable((start + 2 + MAX_LEAD) % WRAP)
    assert not w.believable((start + 3 + MAX_LEAD) % WRAP)
    assert not w.believable((start + (1 << 31) - 1) % WRAP)
    assert w.believable(start - 5)                      # behind: a duplicate, the window's to count


def test_a_late_datagram_inside_a_jumped_range_is_not_left_buffered():
    w = window()
    feed(w, [0, 5])                                     # 1..4 missing
    far = 6 + MAX_GAP + 100
    w.data(far, payload(far), 0.0)                      # 6..105 given up by the jump
    w.data(10, payload(10), 0.0)                        # a late original from the jumped range
    w.sm(far, far, 1.0)                                 # delivery moves past everything
    assert w.expected == far + 1
    assert not w.buffered and w.buffered_bytes == 0


# -- the first datagram heard ---------------------------------------------------------------------

def test_the_first_data_starts_the_window_there():
    w = window()
    assert w.data(1000, payload(1000), 0.0) == payloads(1000)
    assert w.expected == 1001 and not w.missing
    assert w.data(999, payload(999), 0.0) == []         # before the receiver joined: not recovered
    assert w.counters["duplicate_data"] == 1


def test_the_first_data_with_an_old_trail_starts_there_too():
    w = window()
    sqn = 100 + YOUNG_SESSION + 1
    assert w.data(sqn, payload(sqn), 0.0, trail=100) == payloads(sqn)
    assert not w.missing


def test_a_retransmission_heard_first_does_not_start_the_window():
    """Retransmissions are multicast to the whole group: a receiver that joins while another is
    repairing may hear one for an old datagram before any new one. Started there, it would NAK
    everything sent since (a NAK storm, and a retransmission storm for every receiver), deliver
    what was sent before it joined, and count what it cannot get back as lost."""
    w = window()
    assert w.data(1000, payload(1000), 0.0, retransmission=True, trail=900) == []
    assert w.expected is None and not w.missing
    lead = 1000 + MAX_GAP + 5000
    assert w.data(lead, payload(lead), 0.1, trail=900) == payloads(lead)
    assert not w.missing and w.next_deadline() is None
    assert lost_counters(w) == (0, 0, 0)
    assert w.counters["retransmissions_rcved"] == 1


def test_an_sm_first_starts_the_window_after_its_lead():
    w = window()
    assert w.sm(50, 10, 0.0) == []
    assert w.expected == 51 and not w.missing
    assert w.data(51, payload(51), 0.0) == payloads(51)
    assert w.data(50, payload(50), 0.0) == []


def test_an_sm_first_with_lead_0xffffffff_starts_at_0():
    w = window()
    w.sm(WRAP - 1, WRAP - 1, 0.0)
    assert w.data(0, payload(0), 0.0) == payloads(0)


def test_a_young_session_starts_at_its_trail_so_a_lost_first_datagram_is_naked():
    w = window()
    assert w.data(3, payload(3), 0.0, trail=0) == []
    assert sorted(w.missing) == [0, 1, 2]
    naks, _ = w.due(w.next_deadline())
    assert sorted(naks) == [0, 1, 2]
    assert feed(w, [0, 1, 2], now=0.1, retransmission=True) == payloads(0, 1, 2, 3)


def test_a_young_session_at_the_edge_of_young_session():
    w = window()
    w.data(YOUNG_SESSION, payload(YOUNG_SESSION), 0.0, trail=0)
    assert sorted(w.missing) == list(range(YOUNG_SESSION))


def test_a_young_session_whose_trail_is_before_the_wrap():
    w = window()
    w.data(2, payload(2), 0.0, trail=WRAP - 2)
    naks, _ = w.due(w.next_deadline())
    assert sorted(naks) == [0, 1, WRAP - 2, WRAP - 1]
    assert feed(w, [WRAP - 2, WRAP - 1, WRAP, WRAP + 1], now=0.1) == payloads(WRAP - 2, WRAP - 1, 0, 1, 2)


# -- properties -----------------------------------------------------------------------------------

TICK = 0.001


@st.composite
def sessions(draw, unrepaired: bool):
    """(base, n, arrivals, never, sms): a source sends sqns base..base+n-1 (32-bit); the network
    delivers `arrivals` (indexes: a random subset, in a random order, with duplicates); the
    indexes in `never` are lost for good, never retransmitted; after the arrivals at the
    positions in `sms` a session message tells that the source sent all n (what the receiver has
    not seen yet is then missing, with nothing waiting behind it)."""
    n = draw(st.integers(1, 150))
    base = draw(st.one_of(st.sampled_from([0, 1, WRAP - 1, WRAP - 40]), st.integers(0, WRAP - 1)))
    never = draw(st.sets(st.integers(0, n - 1))) if unrepaired else set()
    sent = [i for i in range(n) if i not in never]
    if not sent:
        arrivals = []
    elif draw(st.booleans()):
        arrivals = draw(st.lists(st.sampled_from(sent), max_size=3 * n))    # chaos
    else:
        # A network's usual ways: mostly in order, some lost (and repaired), a few swapped.
        lost = draw(st.sets(st.sampled_from(sent), max_size=max(1, len(sent) // 4)))
        arrivals = [i for i in sent if i not in lost]
        for swap in draw(st.lists(st.integers(0, max(0, len(arrivals) - 2)), max_size=3)):
            arrivals[swap:swap + 2] = arrivals[swap:swap + 2][::-1]
    sms = draw(st.sets(st.integers(0, len(arrivals) - 1), max_size=3)) if arrivals else set()
    return base, n, arrivals, frozenset(never), frozenset(sms)


def simulate(base: int, n: int, arrivals, never, sms, seed: int,
             take_next_first: bool = False) -> tuple[ReceiveWindow, list[bytes]]:
    """Run the session through a window; NAKed sqns not in `never` are retransmitted at once.
    `take_next_first`: new DATA is offered to take_next before data(), as a receiver does."""
    w = ReceiveWindow(rng=random.Random(seed))
    out: list[bytes] = []

    def sqn(i):
        return (base + i) % WRAP

    def due(now):
        naks, released = w.due(now)
        out.extend(released)
        for nak in naks:
            i = (nak - base) % WRAP
            assert i < n, f"NAK for {nak:#x}, never sent"
            if i not in never:
                out.extend(w.data(nak, payload(nak), now, retransmission=True))

    w.sm((base - 1) % WRAP, (base - 1) % WRAP, 0.0)    # the receiver heard the source before it sent
    now = 0.0
    for position, i in enumerate(arrivals):
        if take_next_first and w.take_next(sqn(i), len(payload(sqn(i)))):
            out.append(payload(sqn(i)))
        else:
            out.extend(w.data(sqn(i), payload(sqn(i)), now))
        if position in sms:
            out.extend(w.sm(sqn(n - 1), base, now))
        now += TICK
        due(now)
    out.extend(w.sm(sqn(n - 1), base, now))             # reveals any tail loss
    while (deadline := w.next_deadline()) is not None:
        now = max(now + TICK, deadline)                  # a simulated clock always moves on
        due(now)
        assert now < 100.0, "the window never settles"
    return w, out


@settings(max_examples=200, deadline=None)
@given(sessions(unrepaired=False), st.integers(0, 1000))
def test_with_every_nak_answered_everything_is_delivered_once_in_order(session, seed):
    base, n, arrivals, never, sms = session
    w, out = simulate(base, n, arrivals, never, sms, seed)
    assert out == payloads(*(base + i for i in range(n)))
    assert lost_counters(w) == (0, 0, 0)
    assert not w.buffered and w.buffered_bytes == 0 and not w.given_up and not w.jumps
    assert w.counters["msgs_rcved"] == n
    assert w.counters["duplicate_data"] == len(arrivals) + w.counters["retransmissions_rcved"] - n


@settings(max_examples=200, deadline=None)
@given(sessions(unrepaired=True), st.integers(0, 1000))
def test_what_is_never_repaired_is_lost_and_the_rest_is_delivered_in_order(session, seed):
    base, n, arrivals, never, sms = session
    w, out = simulate(base, n, arrivals, never, sms, seed)
    assert out == payloads(*(base + i for i in range(n) if i not in never))
    assert w.counters["lost"] == len(never)
    assert w.counters["unrecovered_tmo"] == len(never)
    assert not w.buffered and w.buffered_bytes == 0 and not w.given_up and not w.jumps
    assert w.expected % WRAP == (base + n) % WRAP
    assert w.counters["msgs_rcved"] == n - len(never)


@settings(max_examples=300, deadline=None)
@given(st.booleans().flatmap(lambda unrepaired: sessions(unrepaired=unrepaired)), st.integers(0, 1000))
def test_offering_take_next_first_changes_nothing_data_alone_would_do(session, seed):
    base, n, arrivals, never, sms = session
    plain, out = simulate(base, n, arrivals, never, sms, seed)
    shortcut, shortcut_out = simulate(base, n, arrivals, never, sms, seed, take_next_first=True)
    assert shortcut_out == out
    assert shortcut.counters == plain.counters
    assert (shortcut.expected, shortcut.high, shortcut.missing, shortcut.given_up, shortcut.buffered,
            shortcut.jumps) == (plain.expected, plain.high, plain.missing, plain.given_up, plain.buffered,
                                plain.jumps)


def test_take_next_takes_the_next_datagram_only_while_nothing_is_missing_or_waiting():
    w = window()
    assert not w.take_next(5, 4)                            # where the window starts, data() decides
    assert feed(w, [5]) == payloads(5)
    assert w.take_next(6, 4) and w.take_next(7, 4)
    assert w.expected == 8 and w.high == 7 and w.counters["msgs_rcved"] == 3 and w.counters["bytes_rcved"] == 12
    assert not w.take_next(9, 4) and not w.take_next(7, 4)  # a gap, a duplicate: for data() to judge
    assert feed(w, [9], now=1.0) == [] and 8 in w.missing
    assert not w.take_next(10, 4)                            # 9 waits behind the gap at 8
    assert feed(w, [10, 8], now=1.0) == payloads(8, 9, 10)
    assert w.take_next(11, 4)                                # repaired: the shortcut again
    w.sm(13, 0, 2.0)                                         # a lost tail: 12 and 13 missing, none waiting
    assert not w.take_next(12, 4)
    assert feed(w, [12], now=2.0) == payloads(12) and w.missing.keys() == {13}
    w = window()
    feed(w, [WRAP - 1])
    assert w.take_next(0, 4) and w.expected == WRAP + 1     # across the 32-bit wrap
