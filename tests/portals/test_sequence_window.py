"""Duplicate detection by topic sequence number (router.portals.sequence_window, the DRO's
<sqn-window>): checked against a model that takes one number at a time, and on the cases a
path change makes."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from router.portals.sequence_window import SequenceWindow
from router.um.sequence_numbers import MASK, distance
from router.um.wire.lbmc import LBMC_TYPE_MESSAGE, MESSAGE_HEADER, NHDR_DATA


def frames_of(sqns, size: int = 40, sizes=None) -> bytes:
    sizes = sizes or [size] * len(sqns)
    return b"".join(MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, length, 3, sqn & MASK) + bytes(length - 12)
                    for sqn, length in zip(sqns, sizes))


def sqns_of(frames) -> list[int]:
    frames, out, position = bytes(frames), [], 0
    while position < len(frames):
        out.append(int.from_bytes(frames[position + 8:position + 12], "big"))
        position += (frames[position + 2] << 8) | frames[position + 3]
    return out


def admit(window: SequenceWindow, sqns, size: int = 40, sizes=None):
    frames = frames_of(sqns, size, sizes)
    kept, count, dropped, dropped_bytes = window.admit(frames, len(sqns), max(sizes or [size]))
    assert count == len(sqns_of(kept)) and dropped == len(sqns) - count
    assert dropped_bytes == len(frames) - len(kept)
    return sqns_of(kept)


class Model:
    """One number at a time: sent numbers kept in a set, the window's edges as the DRO slides them."""

    def __init__(self, size: int, increment: int):
        self.size, self.increment, self.high, self.low, self.sent = size, increment, None, 0, set()

    def take(self, sqn: int) -> bool:
        if self.high is None:
            self.low, self.high = sqn, sqn - 1
        number = self.high + distance(self.high & MASK, sqn)
        if number > self.high:
            self.high = number
            top = self.low + self.size - 1
            if number > top:
                self.low += -(-(number - top) // self.increment) * self.increment
        elif number < self.low or number in self.sent:
            return False
        self.sent.add(number)
        return True


def test_a_stream_in_sequence_passes_whole_and_as_it_came():
    window = SequenceWindow()
    frames = frames_of(range(100, 150))
    assert window.admit(frames, 50, 40) == (frames, 50, 0, 0)          # the same object: no copy
    assert window.admit(frames_of(range(150, 151)), 1, 40)[2:] == (0, 0)


def test_what_the_other_way_brings_again_is_dropped_and_what_it_alone_brings_passes():
    window = SequenceWindow()
    assert admit(window, range(0, 100)) == list(range(100))             # the old path
    assert admit(window, range(80, 120)) == list(range(100, 120))       # the new one overlaps it
    assert admit(window, [120, 121, 125, 126]) == [120, 121, 125, 126]  # 122-124 lost on this way
    assert admit(window, range(118, 128)) == [122, 123, 124, 127]       # ...brought by the other
    assert admit(window, range(122, 125)) == []                         # and never twice


def test_frames_of_different_sizes_and_a_memoryview_of_a_ring():
    window = SequenceWindow()
    sizes = [12, 40, 300, 13, 64]
    assert admit(window, range(5), sizes=sizes) == list(range(5))
    data = bytearray(frames_of([3, 4, 5, 6], sizes=[40, 300, 12, 99]))
    with memoryview(data) as view:
        kept, count, dropped, size = window.admit(view, 4, 300)
        assert (sqns_of(kept), count, dropped, size) == ([5, 6], 2, 2, 340)
        del kept


def test_below_the_window_is_taken_as_sent_and_the_edge_moves_by_increments():
    window = SequenceWindow(size=64, increment=16)
    assert admit(window, range(0, 10)) == list(range(10))
    assert admit(window, [70]) == [70]                  # the top passed: the low edge moves up 16
    assert window.low == 16
    assert admit(window, [15, 16, 40]) == [16, 40]      # 15 is below the window now; 16, 40 were gaps
    assert window.gaps == [[17, 40], [41, 70]]


def test_numbers_wrap_at_32_bits():
    window = SequenceWindow()
    top = MASK - 5
    assert admit(window, range(top, top + 10)) == [n & MASK for n in range(top, top + 10)]
    assert admit(window, range(top + 8, top + 14)) == [n & MASK for n in range(top + 10, top + 14)]


@settings(max_examples=300, deadline=None)
@given(start=st.sampled_from([0, 1000, MASK - 40]),
       records=st.lists(st.tuples(st.integers(-60, 40), st.integers(1, 40), st.booleans()), min_size=1, max_size=30),
       sizes=st.lists(st.sampled_from([12, 40, 77]), min_size=40, max_size=40),
       window_size=st.sampled_from([32, 64, 16384]))
def test_each_record_keeps_what_the_model_would_take_one_number_at_a_time(start, records, sizes, window_size):
    """Records as two ways deliver them: each a run from somewhere near the last number (back for
    an overlap, ahead for a gap), sometimes with a number skipped inside."""
    window, model = SequenceWindow(size=window_size, increment=window_size // 4), Model(window_size, window_size // 4)
    position = start
    for step, length, skip in records:
        first = position + step
        numbers = [first + k for k in range(length) if not (skip and k == length // 2 and length > 2)]
        expected = [n & MASK for n in numbers if model.take(n & MASK)]
        uniform = sizes[0] if len(set(sizes[:len(numbers)])) == 1 else None
        got = admit(window, numbers, sizes=None if uniform else sizes[:len(numbers)], size=uniform or 40)
        assert got == expected, (first, numbers)
        position = max(position, first + length)
