"""Walking LBMC frames by their lengths (router.um.frame_runs), without a network."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from router.um.frame_runs import (MIN_RUN, consecutive_sequence_numbers, datagram_cuts, equal_frames,
                                  is_whole_frames, whole_frames_within)
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


def test_is_whole_frames_says_whether_frames_tile_the_buffer_end_to_end():
    run = b"".join(_frame(n, 64) for n in range(MIN_RUN * 4))            # equal frames: numpy finds them
    assert is_whole_frames(run) and is_whole_frames(memoryview(run))
    assert not is_whole_frames(run[:-1]) and not is_whole_frames(run + b"\x00")
    mixed = run + _frame(99, 100) + run                                 # a run, then walked
    assert is_whole_frames(mixed) and not is_whole_frames(mixed[:-10])
    assert is_whole_frames(_frame(0, 8000))                             # one frame alone
    broken = bytearray(_frame(0, 8000))
    broken[2:4] = (8100).to_bytes(2, "big")                             # says more than there is
    assert not is_whole_frames(broken)
    assert not is_whole_frames(b"") and not is_whole_frames(b"\x00\x00")


def test_consecutive_sequence_numbers_counts_the_frames_in_sequence_from_the_first():
    sqns = [5, 6, 7, 8, 10, 11]
    data = b"".join(_frame(n, 40) for n in sqns)
    assert consecutive_sequence_numbers(data, len(sqns), 40, 5) == 4
    assert consecutive_sequence_numbers(data, 4, 40, 5) == 4
    assert consecutive_sequence_numbers(data, len(sqns), 40, 4) == 0
    high = [0xFFFFFFF0 + n for n in range(8)]
    assert consecutive_sequence_numbers(b"".join(_frame(n, 40) for n in high), 8, 40, 0xFFFFFFF0) == 8


def _equal_frames_by_walking(buf, offset: int, end: int, length: int) -> int:
    """What equal_frames answers, one frame at a time (the reference its strided view must match)."""
    count = (end - offset) // length
    if count < MIN_RUN or length < 8:
        return 0
    head = bytes(buf[offset:offset + 8])
    for k in range(count):
        if bytes(buf[offset + k * length:offset + k * length + 8]) != head:
            return k
    return count


def test_equal_frames_counts_the_frames_whose_first_8_bytes_repeat():
    run = b"".join(_frame(n, 40) for n in range(20))          # sequence numbers differ: bytes 8-11
    assert equal_frames(run, 0, len(run), 40) == 20
    assert equal_frames(run, 0, len(run) - 1, 40) == 19         # the last frame is not whole
    assert equal_frames(run, 40, len(run), 40) == 19            # from an offset (not 8-aligned below)
    for byte in range(8):                                       # any one of the 8 bytes ends the run
        changed = bytearray(run)
        changed[13 * 40 + byte] ^= 0xFF
        assert equal_frames(changed, 0, len(changed), 40) == 13, byte
    second = bytearray(run)
    second[40 + 3] ^= 1                                         # the second frame's length differs
    assert equal_frames(second, 0, len(second), 40) == 1
    assert equal_frames(run, 0, (MIN_RUN - 1) * 40, 40) == 0    # too few frames to be worth it
    assert equal_frames(run, 0, len(run), 7) == 0               # shorter than the 8 bytes compared


def test_equal_frames_reads_any_buffer_and_lets_go_of_it():
    run = bytearray(b"\x00" * 3 + b"".join(_frame(n, 33) for n in range(MIN_RUN + 5)))   # odd offset and length
    assert equal_frames(bytes(run), 3, len(run), 33) == MIN_RUN + 5
    assert equal_frames(run, 3, len(run), 33) == MIN_RUN + 5
    run += b"more"            # a reader's buffer grows after a run was found: no view holds it
    with memoryview(run) as view:
        assert equal_frames(view, 3, len(run), 33) == MIN_RUN + 5
        assert consecutive_sequence_numbers(view[3:], MIN_RUN + 5, 33, 0) == MIN_RUN + 5
    run += b"again"


@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.sampled_from([12, 13, 40, 76]), min_size=1, max_size=60),
       topics=st.lists(st.sampled_from([1, 2]), min_size=60, max_size=60),
       offset=st.integers(0, 9), start=st.integers(0, 5))
def test_equal_frames_agrees_with_a_walk(lengths, topics, offset, start):
    frames = b"".join(MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, size, topic, k) + bytes(size - 12)
                      for k, (size, topic) in enumerate(zip(lengths, topics)))
    buf = bytes(offset) + frames
    first = offset + sum(lengths[:start]) if start < len(lengths) else offset
    if start < len(lengths):
        length = lengths[start]
        assert equal_frames(buf, first, len(buf), length) == _equal_frames_by_walking(buf, first, len(buf), length)


def _cuts_frame_by_frame(buf, limit):
    """The reference: a source filling each datagram frame by frame until the next would not fit."""
    spans, end, start, offset, oversize, broken = [], len(buf), 0, 0, 0, False
    while offset < end:
        length = (buf[offset + 2] << 8) | buf[offset + 3] if end - offset >= 4 else 0
        if length < 4:
            broken = True
            break
        if length > limit:
            if offset > start:
                spans.append((start, offset))
            oversize, offset = oversize + 1, offset + length
            start = offset
            continue
        if offset + length - start > limit:
            spans.append((start, offset))
            start = offset
        offset += length
    if min(offset, end) > start:
        spans.append((start, min(offset, end)))
    return spans, oversize, broken


def test_datagram_cuts_fill_each_datagram_and_leave_oversized_frames_out():
    run = b"".join(_frame(n, 100) for n in range(25))              # 2,500 bytes of equal frames
    assert datagram_cuts(run, 1000) == ([(0, 1000), (1000, 2000), (2000, 2500)], 0, False)
    assert datagram_cuts(run, 1050) == ([(0, 1000), (1000, 2000), (2000, 2500)], 0, False)
    mixed = _frame(0, 300) + run + _frame(1, 5000) + _frame(2, 60)
    assert datagram_cuts(mixed, 1000) == ([(0, 1000), (1000, 2000), (2000, 2800), (7800, 7860)], 1, False)
    assert datagram_cuts(run + b"\x01\x00", 1000) == ([(0, 1000), (1000, 2000), (2000, 2500)], 0, True)


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.tuples(st.sampled_from([12, 40, 64, 100, 700, 3000]), st.integers(1, 40)),
                       min_size=1, max_size=12),
       limit=st.sampled_from([500, 1400, 2048, 8192]), tail=st.sampled_from([b"", b"\x01\x00", b"\x00\x00\x00\x02"]))
def test_datagram_cuts_agree_with_cutting_frame_by_frame(pieces, limit, tail):
    """Runs of equal frames (cut a datagram at a time) between others, frames larger than the
    limit, a torn tail: the same datagrams as a frame-by-frame walk."""
    buf = b"".join(_frame(n, size) for size, count in pieces for n in range(count)) + tail
    assert datagram_cuts(buf, limit) == _cuts_frame_by_frame(buf, limit)
    assert datagram_cuts(memoryview(buf), limit) == _cuts_frame_by_frame(buf, limit)
