"""Runs of equal LBMC frames: how a router's readers skip walking a busy stream frame by frame.

A source sending one message size on one topic produces frames whose first 8 bytes (type, next
header, length, topic index) are all the same. Frame k's length places frame k+1, so if those 8
bytes repeat at every multiple of the first frame's length, that many whole frames of one topic
follow each other: one numpy comparison finds the run instead of a Python step per frame.
"""
from __future__ import annotations

import numpy as np

MIN_RUN = 32          # fewer frames than this are walked one by one: as cheap as numpy's set-up


def equal_frames(buf, offset: int, end: int, length: int) -> int:
    """How many whole frames from `offset` (the first `length` bytes long, before `end`) begin with
    the first one's 8 bytes; 0 if fewer than MIN_RUN frames could fit."""
    count = (end - offset) // length
    if count < MIN_RUN or length < 8:
        return 0
    heads = np.frombuffer(buf, dtype=np.uint8, count=count * length, offset=offset).reshape(count, length)[:, :8]
    differs = (heads != heads[0]).any(axis=1)
    del heads                       # let go of `buf` (a reader's buffer) before anyone resizes it
    return int(differs.argmax()) if differs.any() else count
