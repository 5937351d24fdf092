"""Runs of equal LBMC frames: how a router's readers skip walking a busy stream frame by frame.

A source sending one message size on one topic produces frames whose first 8 bytes (type, next
header, length, topic index) are all the same. Frame k's length places frame k+1, so if those 8
bytes repeat at every multiple of the first frame's length, that many whole frames of one topic
follow each other: one numpy comparison finds the run instead of a Python step per frame.
"""
from __future__ import annotations

import struct

import numpy as np

from router.um.wire.lbmc_constants import LBMC_TYPE_MESSAGE

_TIDX_SQN = struct.Struct(">II")
MIN_RUN = 8           # fewer frames than this are walked one by one: as cheap as numpy's set-up


def strided_column(buf, offset: int, count: int, stride: int, dtype) -> np.ndarray:
    """The `count` values of `dtype` at `offset`, `offset + stride`, ... of `buf`, in place: a
    strided view, so one comparison reads only those bytes (not whole frames, not a copy)."""
    return np.ndarray((count,), dtype=dtype, buffer=buf, offset=offset, strides=(stride,))


def equal_frames(buf, offset: int, end: int, length: int) -> int:
    """How many whole frames from `offset` (the first `length` bytes long, before `end`) begin with
    the first one's 8 bytes; 0 if fewer than MIN_RUN frames could fit."""
    count = (end - offset) // length
    if count < MIN_RUN or length < 8:
        return 0
    if buf[offset:offset + 8] != buf[offset + length:offset + length + 8]:
        return 1                    # a lone frame (a walk tries each): not worth numpy's set-up
    # Each frame's first 8 bytes as one 64-bit word: the first that differs ends the run (the
    # first word equals itself, so argmax is 0 only when none differs).
    heads = strided_column(buf, offset, count, length, np.uint64)
    first_different = int((heads != heads[0]).argmax())
    del heads                       # let go of `buf` (a reader's buffer) before anyone resizes it
    return first_different or count


def consecutive_sequence_numbers(buf, count: int, length: int, first: int) -> int:
    """Of `count` frames of `length` bytes at the start of `buf` (an equal_frames run), how many
    in a row carry the sequence numbers first, first + 1, ... (bytes 8-11, big-endian); the
    caller keeps the run below the 32-bit wrap."""
    sqns = strided_column(buf, 8, count, length, ">u4")
    differs = sqns != np.arange(first, first + count, dtype=np.int64)
    del sqns                        # let go of `buf`
    first_different = int(differs.argmax())
    return first_different if first_different or differs[0] else count


def whole_frames_within(buf, limit: int) -> int:
    """The length of the longest run of whole LBMC frames at the start of `buf` that fits in
    `limit` bytes (walking their lengths; a short or broken frame ends it): where to cut `buf`
    so that what is kept fits and no frame is sent half."""
    position, end = 0, min(limit, len(buf))
    while position + 4 <= end:
        length = (buf[position + 2] << 8) | buf[position + 3]
        if length < 4 or position + length > end:
            break
        position += length
    return position


def is_whole_frames(buf) -> bool:
    """Whether `buf` is whole LBMC frames end to end (a datagram's or a record's own framing, before
    it is parsed together with others): frames of one length are checked at once, else walked."""
    size = len(buf)
    if size < 4:
        return False
    length = (buf[2] << 8) | buf[3]
    if length == size:
        return True                 # one frame: a large message's fragment
    if length >= 4 and size % length == 0:
        # Equal lengths end to end (a busy topic's frames): each frame's length field, bytes 2
        # and 3, read as two strided slices compared in C (a quarter of numpy's set-up cost).
        count = size // length
        if buf[2::length] == bytes((buf[2],)) * count and buf[3::length] == bytes((buf[3],)) * count:
            return True
    return whole_frames_within(buf, size) == size


def datagram_cuts(buf, limit: int) -> tuple[list[tuple[int, int]], int, bool]:
    """Where a source cuts whole LBMC frames into datagrams of at most `limit` bytes: the
    (start, end) of each datagram in order, filled frame by frame until the next would not fit;
    how many frames were larger than `limit` (left out whole, never sent half); and whether a
    torn or broken frame ended the walk (what came before it is cut as usual). A run of equal
    frames (a busy topic's) is cut a datagram at a time, not a frame at a time."""
    spans: list[tuple[int, int]] = []
    end = len(buf)
    start = offset = oversize = 0
    broken = False
    while offset < end:
        if end - offset < 4:
            broken = True
            break
        length = (buf[offset + 2] << 8) | buf[offset + 3]
        if length < 4:
            broken = True
            break
        if length > limit:
            if offset > start:
                spans.append((start, offset))
            oversize += 1
            offset += length
            start = offset
            continue
        run = equal_frames(buf, offset, end, length) if end - offset >= MIN_RUN * length else 0
        if run > 1:
            fits = (limit - (offset - start)) // length     # more frames the open datagram takes
            if run > fits:
                offset += fits * length
                run -= fits
                spans.append((start, offset))
                start = offset
                per = limit // length
                while run > per:                            # full datagrams; the last stays open
                    offset += per * length
                    run -= per
                    spans.append((start, offset))
                    start = offset
            offset += run * length
            continue
        if offset + length - start > limit:
            spans.append((start, offset))
            start = offset
        offset += length
    stop = min(offset, end)
    if stop > start:
        spans.append((start, stop))
    return spans, oversize, broken


def frames_and_last_sequence_numbers(buf) -> tuple[int, dict[int, int]]:
    """How many LBMC frames `buf` holds, and the sequence number of the last MESSAGE frame of each
    topic index among them (walking their lengths; a short or broken tail ends it). For the rare
    paths that need them: a batch being dropped."""
    count, position, end = 0, 0, len(buf)
    last: dict[int, int] = {}
    while position + 4 <= end:
        length = (buf[position + 2] << 8) | buf[position + 3]
        if length < 4 or position + length > end:
            break
        if buf[position] == LBMC_TYPE_MESSAGE and length >= 12:
            tidx, sqn = _TIDX_SQN.unpack_from(buf, position + 4)
            last[tidx] = sqn
        position += length
        count += 1
    return count, last
