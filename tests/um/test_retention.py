"""A late-join source's retention (router.um.retention) on its own: what it keeps, and what that costs.

The size limit (`retransmit_retention_size_limit`) counts the frames' own bytes, as UM counts
them; the memory the retention takes must stay close to it even for the smallest messages, since
a router keeps its proxy sources' retention for months. What it keeps is checked against a model
of UM's rules (an ordered map of sequence number to frame, the oldest going first) over random
sequences of frames: sizes, numbers sent again or out of order, the 32-bit wrap, ages.
"""
from __future__ import annotations

import gc
import random
import sys
import time
import types
from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.um.retention import MAX_FRAME, Retention
from router.um.sequence_numbers import MASK


class Model:
    """UM's retention rules, plainly: by sequence number, oldest first; a number sent again
    replaces its frame (and is the newest); the oldest go while the size limit is passed or the
    oldest is older than the age threshold."""

    def __init__(self, size_limit: int, age_threshold: float = 0.0):
        self.size_limit, self.age_threshold = size_limit, age_threshold
        self.frames: OrderedDict[int, tuple[float, bytes]] = OrderedDict()
        self.bytes = 0
        self.counters = {"retained_frames": 0, "retention_dropped_frames": 0}

    def add(self, sqn: int, frame: bytes, now: float) -> None:
        old = self.frames.pop(sqn, None)
        if old is not None:
            self.bytes -= len(old[1])
        self.frames[sqn] = (now, bytes(frame))
        self.bytes += len(frame)
        self.counters["retained_frames"] += 1
        self.trim(now)

    def trim(self, now: float) -> None:
        while self.frames and (self.bytes > self.size_limit or (
                self.age_threshold and now - next(iter(self.frames.values()))[0] > self.age_threshold)):
            _, (_, frame) = self.frames.popitem(last=False)
            self.bytes -= len(frame)
            self.counters["retention_dropped_frames"] += 1

    def discard(self, sqn: int) -> bool:
        old = self.frames.pop(sqn, None)
        if old is not None:
            self.bytes -= len(old[1])
        return old is not None

    def bounds(self):
        return (next(iter(self.frames)), next(reversed(self.frames))) if self.frames else None


def _frame(sqn: int, length: int) -> bytes:
    return (sqn.to_bytes(4, "big") * (length // 4 + 1))[:length]


def _same(retention: Retention, model: Model, probes) -> None:
    assert retention.bounds() == model.bounds()
    assert retention.bytes == model.bytes
    assert retention.counters == model.counters
    for sqn in probes:
        kept = model.frames.get(sqn)
        assert retention.get(sqn) == (None if kept is None else kept[1]), sqn


# -- what is kept: as UM's rules say -----------------------------------------------------------------
_steps = st.lists(st.tuples(
    st.sampled_from(["next", "next", "next", "gap", "again", "back", "jump", "discard"]),
    st.integers(0, 300),                # frame length
    st.integers(0, 40)), min_size=1, max_size=400)


@settings(max_examples=300, deadline=None)
@given(steps=_steps, size_limit=st.sampled_from([0, 50, 700, 3000, 20_000]), start=st.sampled_from([0, 5, MASK - 20]))
def test_it_keeps_what_ums_rules_keep_whatever_the_numbers(steps, size_limit, start):
    retention, model = Retention(size_limit), Model(size_limit)
    sqn, sent = start, []
    for action, length, amount in steps:
        if action == "next":
            sqn = (sqn + 1) & MASK
        elif action == "gap":
            sqn = (sqn + 2 + amount) & MASK             # a proxy source forwarding what came
        elif action == "again" and sent:
            sqn = sent[-1 - amount % len(sent)]          # a number sent again
        elif action == "back":
            sqn = (sqn - amount) & MASK
        elif action == "jump":
            sqn = (sqn + (1 << 31) + amount) & MASK
        elif action == "discard":
            victim = sent[-1 - amount % len(sent)] if sent else sqn
            assert retention.discard(victim) == model.discard(victim)
            continue
        retention.add(sqn, _frame(sqn, length), 0.0)
        model.add(sqn, _frame(sqn, length), 0.0)
        sent.append(sqn)
        _same(retention, model, sent[-5:])
    _same(retention, model, set(sent) | {(sqn + 1) & MASK})


@settings(max_examples=150, deadline=None)
@given(gaps=st.lists(st.tuples(st.integers(0, 30), st.floats(0, 2)), min_size=1, max_size=300),
       age=st.sampled_from([0.5, 3.0]), size_limit=st.sampled_from([400, 1_000_000]))
def test_frames_older_than_the_age_threshold_go_as_ums_rules_say(gaps, age, size_limit):
    retention, model = Retention(size_limit, age), Model(size_limit, age)
    # The frames are added at times that all lie in the past, more than `age` before now: the
    # questions below take the time from time.monotonic(), which starts near zero at boot.
    sqn, now = 100, time.monotonic() - sum(later for _, later in gaps) - age - 1.0
    for length, later in gaps:
        sqn, now = sqn + 1, now + later
        retention.add(sqn, _frame(sqn, length), now)
        model.add(sqn, _frame(sqn, length), now)
        assert retention.bytes == model.bytes and retention.counters == model.counters
    # Asked much later: everything aged out.
    assert retention.bounds() is None and retention.get(sqn) is None


def test_a_long_run_through_the_wrap_with_numbers_sent_again_stays_as_ums_rules_say():
    rng = random.Random(7)
    retention, model = Retention(50_000), Model(50_000)
    sqn = MASK - 3000
    for n in range(40_000):
        pick = rng.random()
        if pick < 0.01:
            number = (sqn - rng.randrange(1, 3000)) & MASK         # sent again, kept or not
        else:
            sqn = (sqn + (1 if pick < 0.95 else rng.randrange(2, 50))) & MASK
            number = sqn
        length = rng.choice((16, 20, 40, 200, 1400))
        retention.add(number, _frame(number, length), 0.0)
        model.add(number, _frame(number, length), 0.0)
        if n % 997 == 0:
            _same(retention, model, [(sqn - k) & MASK for k in range(0, 4000, 7)])
    _same(retention, model, [(sqn - k) & MASK for k in range(4000)])


def test_a_frame_longer_than_lbmc_allows_is_refused_with_a_clear_error():
    retention = Retention(1 << 20)
    with pytest.raises(ValueError, match="at most 65535"):
        retention.add(1, bytes(MAX_FRAME + 1))
    assert retention.bounds() is None and retention.counters["retained_frames"] == 0


# -- what it costs ------------------------------------------------------------------------------------
def _footprint(root) -> int:
    """The bytes of every object `root` holds, directly or not (classes, modules and functions
    aside): what it takes of the process's memory."""
    seen, todo, total = set(), [root], 0
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, types.FunctionType)):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        todo.extend(gc.get_referents(obj))
    return total


@pytest.mark.parametrize("age_threshold", [0, 3600])
def test_a_million_small_messages_take_at_most_twice_the_size_limit(age_threshold):
    """20-byte frames (4-byte messages) filling a 20 MB limit: a Python object per frame took
    more than 11 times the limit (228 MB)."""
    limit, now = 20_000_000, time.monotonic()
    retention = Retention(limit, age_threshold)
    for sqn in range(1_000_000):
        retention.add(sqn, _frame(sqn, 20), now)
    assert retention.bytes == limit and retention.counters["retention_dropped_frames"] == 0
    taken = _footprint(retention)
    assert taken <= 2 * limit, f"{taken / 1e6:.1f} MB for {limit / 1e6:.0f} MB of frames"
    assert retention.get(0) == _frame(0, 20) and retention.get(999_999) == _frame(999_999, 20)


def test_a_full_retention_sending_on_for_long_takes_no_more():
    """Three times the limit more sent through it: the oldest go, its memory stays as it was."""
    limit = 2_000_000
    retention = Retention(limit)
    for sqn in range(100_000):
        retention.add(sqn, _frame(sqn, 20), 0.0)
    full = _footprint(retention)
    for sqn in range(100_000, 400_000):
        retention.add(sqn, _frame(sqn, 20 if sqn % 3 else 36), 0.0)
    assert full <= 2 * limit and _footprint(retention) <= full + limit // 100
    assert retention.bytes <= limit and retention.bounds()[1] == 399_999


def test_what_goes_by_age_gives_its_memory_back():
    retention = Retention(20_000_000, 1.0)
    for sqn in range(200_000):
        retention.add(sqn, _frame(sqn, 100), 0.0)
    assert _footprint(retention) >= 20_000_000
    retention.add(200_000, _frame(200_000, 100), 10.0)      # the rest are older than a second
    assert retention.bounds() is None or retention.bounds() == (200_000, 200_000)
    assert _footprint(retention) < 100_000


def test_a_number_sent_again_from_long_ago_leaves_the_frames_after_it_as_compact():
    """A frame numbered before everything kept (a number sent again) is kept as the newest, as
    UM keeps it; the frames that follow, numbered on from the others, are kept and found as
    compactly as before it."""
    limit = 2_000_000
    retention = Retention(limit)
    for sqn in range(1000, 151_000):
        retention.add(sqn, _frame(sqn, 20), 0.0)
    before = _footprint(retention)
    retention.add(5, _frame(5, 20), 0.0)
    assert retention.bounds() == (51_001, 5) and retention.get(5) == _frame(5, 20)
    for sqn in range(151_000, 351_000):
        retention.add(sqn, _frame(sqn, 20), 0.0)
    assert _footprint(retention) <= before + limit // 100
    assert retention.bounds() == (251_000, 350_999) and retention.get(5) is None
    assert retention.get(300_000) == _frame(300_000, 20)


def test_numbers_sent_again_and_again_are_kept_once_each_and_take_no_more_room():
    """Ten numbers sent again in turn, 20,000 times: ten frames kept, the newest of each, and
    the room the replaced ones took is given back."""
    retention, model = Retention(1 << 20), Model(1 << 20)
    for n in range(20_000):
        sqn = (n * 7) % 10
        retention.add(sqn, _frame(n, 40), 0.0)
        model.add(sqn, _frame(n, 40), 0.0)
    _same(retention, model, range(12))
    assert _footprint(retention) < 20_000
