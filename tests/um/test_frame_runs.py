"""Walking LBMC frames by their lengths (router.um.frame_runs), without a network."""
from __future__ import annotations

from router.um.frame_runs import consecutive_sequence_numbers, whole_frames_within
from router.um.wire.lbmc import LBMC_TYPE_MESSAGE, MESSAGE_HEADER, NHDR_DATA


def _frame(sqn: int, size: int) -> bytes:
    """One MESSAGE frame of `size` bytes, header included."""
    payload = bytes([sqn % 256]) * (size - MESSAGE_HEADER.size)
    return MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, size, 1, sqn) + payload


def test_whole_frames_within_cuts_after_the_last_frame_that_fits():
    frames = _frame(0, 100) + _frame(1, 50) + _frame(2, 200)            # ends at 100, 150, 350
    assert whole_frames_within(b"", 1000) == 0                          # empty
    assert whole_frames_within(frames, 350) == 350                      # an exact fit: all of it
    assert whole_frames_within(frames, 10_000) == 350                   # more room than data
    assert whole_frames_within(frames, 150) == 150                      # the limit at a frame's end
    assert whole_frames_within(frames, 349) == 150                      # the third straddles the limit
    assert whole_frames_within(frames, 120) == 100                      # the second does
    assert whole_frames_within(frames, 99) == 0                         # smaller than the first frame
    assert whole_frames_within(frames, 0) == 0


def test_whole_frames_within_stops_at_a_short_or_broken_frame():
    frames = _frame(0, 100) + _frame(1, 50)
    assert whole_frames_within(frames + _frame(2, 60)[:30], 1000) == 150        # a frame cut short
    assert whole_frames_within(frames + b"\x01\x00", 1000) == 150               # a tail shorter than a length
    assert whole_frames_within(frames + b"\x01\x00\x00\x02" + b"x" * 20, 1000) == 150     # a length below 4
    assert whole_frames_within(memoryview(frames)[100:], 60) == 50             # any buffer, from its start


def test_consecutive_sequence_numbers_counts_the_frames_in_sequence_from_the_first():
    sqns = [5, 6, 7, 8, 10, 11]
    data = b"".join(_frame(n, 40) for n in sqns)
    assert consecutive_sequence_numbers(data, len(sqns), 40, 5) == 4
    assert consecutive_sequence_numbers(data, 4, 40, 5) == 4
    assert consecutive_sequence_numbers(data, len(sqns), 40, 4) == 0
    high = [0xFFFFFFF0 + n for n in range(8)]
    assert consecutive_sequence_numbers(b"".join(_frame(n, 40) for n in high), 8, 40, 0xFFFFFFF0) == 8
