"""Duplicate detection by topic sequence number: the DRO's `<sqn-window size= increment=>`.

A source's messages can reach a portal's egress twice: when its path changes (a link comes back, a
cost changes) the new upstream stream can start before the old one has drained, and both feed the
one proxy source of that OTID (or the origin's stream over a peer link); a source whose transport
repeats what it sent does the same. Every frame carries the origin's topic sequence number (each
fragment its own), so the egress keeps, per originating source, which numbers of a window it has
sent: a frame whose number was sent already, or lies below the window, is dropped and counted as
the DRO counts "dropped (duplicate)".

The window is the DRO's: `size` numbers ending at the highest one sent, its low edge moving up by
whole `increment`s when the highest passes the top. Inside it the window keeps the numbers not
sent, which a stream's own order makes few: the gaps a stream left (lost upstream, or to come by
the other way) as intervals. So a record that carries on, in sequence, past the highest number
sent — the steady state — costs one check of its numbers (vectorised for a run of equal frames),
and only records that reach back below it, or skip numbers, are read frame by frame.
"""
from __future__ import annotations

import bisect

from router.um.frame_runs import MIN_RUN, consecutive_sequence_numbers
from router.um.sequence_numbers import MASK, distance
from router.um.wire.lbmc import MESSAGE_HEADER

_MESSAGE_SIZE = MESSAGE_HEADER.size     # ver_type, next_hdr, msglen, tidx, sqn
_SQN_AT = 8


def _sqn(frames, offset: int) -> int:
    return int.from_bytes(frames[offset + _SQN_AT:offset + _SQN_AT + 4], "big")


def _in_sequence(frames, count: int, longest: int, first: int) -> bool:
    """Whether the frames carry first, first + 1, ... each in turn: a stream's steady state, whose
    numbers can then be taken as one interval (marking a number sent that was not would drop
    its only copy later, so this is checked, not assumed)."""
    if count >= MIN_RUN and longest * count == len(frames):        # equal frames: one numpy pass
        return consecutive_sequence_numbers(frames, count, longest, first) == count
    position, expected, end = 0, first, len(frames)
    while position + _MESSAGE_SIZE <= end:
        length = (frames[position + 2] << 8) | frames[position + 3]
        if length < _MESSAGE_SIZE or _sqn(frames, position) != expected & MASK:
            return False
        expected += 1
        position += length
    return expected - first == count


class SequenceWindow:
    """The sequence numbers of one originating source that a portal has sent on (see above)."""

    __slots__ = ("size", "increment", "high", "low", "gaps")

    def __init__(self, size: int = 16384, increment: int = 2048):
        self.size, self.increment = size, increment
        self.high: int | None = None       # the highest number sent, unwrapped (counts past 2^32)
        self.low = 0                       # the window's low edge, unwrapped
        self.gaps: list[list[int]] = []    # [start, end) numbers inside the window not sent, in order

    @classmethod
    def configured(cls, sqn_window) -> "SequenceWindow":
        """A window as a portal's `<sqn-window>` (router.config.model.SqnWindow) says."""
        return cls(sqn_window.size, sqn_window.increment)

    def admit(self, frames, count: int, longest: int):
        """`count` whole LBMC MESSAGE frames of one stream, in its order; returns (frames to send,
        their count, frames dropped as duplicates, their bytes). Frames come back as they came
        when none is dropped."""
        if count <= 0 or len(frames) < _MESSAGE_SIZE:
            return frames, count, 0, 0
        first = _sqn(frames, 0)
        if self.high is None:                     # the first frame starts the window
            self.low, self.high = first, first - 1
        start = self.high + distance(self.high & MASK, first)
        if start > self.high and _in_sequence(frames, count, longest, first):
            self._advance(start, start + count - 1)
            return frames, count, 0, 0
        return self._admit_each(frames)

    def _advance(self, start: int, last: int) -> None:
        """Numbers start..last were sent, all above the highest: what lies between is a gap."""
        if start > self.high + 1:
            self.gaps.append([self.high + 1, start])
        self.high = last
        top = self.low + self.size - 1
        if last > top:
            steps = -(-(last - top) // self.increment)
            self.low += steps * self.increment
            gaps = self.gaps
            while gaps and gaps[0][1] <= self.low:
                gaps.pop(0)
            if gaps and gaps[0][0] < self.low:
                gaps[0][0] = self.low

    def _admit_each(self, frames):
        """A record reaching back below the highest number sent: frame by frame."""
        kept: list = []
        kept_count = dropped = dropped_bytes = 0
        position, end = 0, len(frames)
        view = memoryview(frames)
        while position + _MESSAGE_SIZE <= end:
            length = (frames[position + 2] << 8) | frames[position + 3]
            if length < _MESSAGE_SIZE or position + length > end:
                break
            number = self.high + distance(self.high & MASK, _sqn(frames, position))
            if number > self.high:
                self._advance(number, number)
                fresh = True
            else:
                fresh = self._fill(number)
            if fresh:
                kept.append(view[position:position + length])
                kept_count += 1
            else:
                dropped += 1
                dropped_bytes += length
            position += length
        if not dropped:
            return frames, kept_count, 0, 0
        return b"".join(kept), kept_count, dropped, dropped_bytes

    def _fill(self, number: int) -> bool:
        """Whether `number` (at most the highest) was not sent yet; if so it is now."""
        if number < self.low:
            return False                  # below the window: too old to tell, taken as sent
        gaps = self.gaps
        at = bisect.bisect_right(gaps, [number, float("inf")]) - 1
        if at < 0:
            return False
        start, stop = gaps[at]
        if not start <= number < stop:
            return False
        if stop - start == 1:
            del gaps[at]
        elif number == start:
            gaps[at][0] = number + 1
        elif number == stop - 1:
            gaps[at][1] = number
        else:
            gaps[at:at + 1] = [[start, number], [number + 1, stop]]
        return True
