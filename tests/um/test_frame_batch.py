"""Gathering whole-frame pieces to parse at once (router.um.frame_batch), without a network."""
from __future__ import annotations

from router.um.frame_batch import FrameBatch
from router.um.wire.lbmc import LBMC_TYPE_MESSAGE, MESSAGE_HEADER, NHDR_DATA


def _frame(sqn: int, size: int) -> bytes:
    return MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, size, 1, sqn) + bytes([sqn % 256]) * (size - 12)


class _Stream:
    """What a batch needs of its stream: whether it is closed, its counters, its parse."""

    def __init__(self):
        self.closed = False
        self.counters = {"bytes": 0}
        self.parsed: list[bytes] = []

    def parse_reused(self, buffer, size, view):
        self.parsed.append(bytes(view[:size]))
        return size


def test_pieces_are_parsed_together_in_order_when_asked():
    stream = _Stream()
    batch = FrameBatch(stream, capacity=1000)
    pieces = [_frame(0, 100), _frame(1, 200) + _frame(2, 50), _frame(3, 300)]
    assert all(batch.add(piece) for piece in pieces)
    assert stream.parsed == []                                   # nothing until the read ends
    batch.parse()
    assert stream.parsed == [b"".join(pieces)] and stream.counters["bytes"] == 650
    batch.parse()                                                # nothing gathered: nothing parsed
    assert len(stream.parsed) == 1


def test_a_piece_that_does_not_fit_parses_what_was_gathered_first():
    stream = _Stream()
    batch = FrameBatch(stream, capacity=1000)
    assert batch.add(_frame(0, 600))
    assert batch.add(_frame(1, 600))                             # no room: the first is parsed, then taken
    assert stream.parsed == [_frame(0, 600)]
    batch.parse()
    assert stream.parsed == [_frame(0, 600), _frame(1, 600)]


def test_a_piece_not_whole_frames_or_larger_than_the_batch_is_left_to_the_caller():
    stream = _Stream()
    batch = FrameBatch(stream, capacity=1000)
    assert batch.add(_frame(0, 100))
    assert not batch.add(_frame(1, 100)[:-1])                    # cut short
    assert not batch.add(_frame(2, 100) + b"\x00\x00")           # a tail that is no frame
    assert not batch.add(b"")
    assert batch.size == 100                                     # what was gathered stays, in order
    stream.closed = True                                         # a closed stream parses nothing more
    batch.parse()
    assert stream.parsed == [] and batch.size == 0
    big = FrameBatch(_Stream(), capacity=1000)
    assert not big.add(_frame(0, 1200))
