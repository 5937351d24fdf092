"""Splitting a read into the runs of frames each raw (router) subscription gets (the
frame-by-frame walk and the fast path for a read of equal frames must agree), and partial
messages that can no longer complete being expired."""
import time

from hypothesis import given
from hypothesis import strategies as st

from router.um.frame_stream import FrameStream
from router.um.wire.lbmc import (FRAG_HEADER, LBMC_TYPE_CONTROL, LBMC_TYPE_MESSAGE, MESSAGE_HEADER, NHDR_DATA,
                                 NHDR_FRAG, LbmcMessage, Tsni, encode_lbmc)


class _Raw:
    raw = True

    def __init__(self):
        self.frames = bytearray()
        self.count = 0
        self.told: list[tuple[int, int]] = []         # (frames received by then, last sqn)

    def on_frames(self, frames, count, longest):
        self.frames += frames
        self.count += count

    def on_sequence_info(self, sqn):
        self.told.append((self.count, sqn))


class _Stream(FrameStream):
    def _close_transport(self):
        pass


def frame(tidx: int, sqn: int, length: int) -> bytes:
    return MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, length, tidx, sqn) + bytes([sqn & 0xFF]) * (length - 12)


def split(data: bytes, tidxs=(1, 2)) -> tuple[int, dict]:
    stream = _Stream(None, ("test",), lambda s: None)
    subs = {tidx: _Raw() for tidx in tidxs}
    for tidx, sub in subs.items():
        stream.subscribe(tidx, sub)
    buffer = bytearray(data)
    consumed = stream._parse(buffer, len(buffer), memoryview(buffer))
    return consumed, {tidx: (bytes(sub.frames), sub.count) for tidx, sub in subs.items()}


@given(st.integers(0, 100), st.lists(st.tuples(st.sampled_from([1, 2]), st.sampled_from([40, 64, 100])),
                                     max_size=200), st.integers(0, 30))
def test_every_raw_frame_reaches_its_topic_in_order_and_a_partial_one_waits(equal_first, rest, partial):
    frames = [(1, 64)] * equal_first + rest          # often a run of equal frames, then anything
    whole = [frame(tidx, n, length) for n, (tidx, length) in enumerate(frames)]
    tail = frame(1, 9999, 64)[:partial]
    consumed, got = split(b"".join(whole) + tail)
    assert consumed == sum(map(len, whole))
    for tidx in (1, 2):
        mine = [f for f, (t, _) in zip(whole, frames) if t == tidx]
        assert got[tidx] == (b"".join(mine), len(mine))


def test_a_read_of_equal_frames_is_one_run_and_what_follows_it_still_arrives():
    run = [frame(1, n, 64) for n in range(100)]
    after = [frame(2, 100, 64), frame(1, 101, 80)]
    consumed, got = split(b"".join(run + after))
    assert consumed == 64 * 101 + 80
    assert got[1] == (b"".join(run) + after[1], 101)
    assert got[2] == (after[0], 1)


def test_a_tsni_for_a_raw_topic_is_passed_on_after_the_frames_of_its_read():
    """A router passes the origin's TSNI on behind the stream's frames: the raw subscription is
    told after it got every frame of the read, and only for its own topic; a TSNI for a topic
    nobody subscribes to is nobody's."""
    tsni = encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, [Tsni([(1, 41), (2, 7), (9, 3)])]))
    stream = _Stream(None, ("test",), lambda s: None)
    subs = {tidx: _Raw() for tidx in (1, 2)}
    for tidx, sub in subs.items():
        stream.subscribe(tidx, sub)
    data = bytearray(frame(1, 40, 64) + tsni + frame(1, 41, 64) + frame(2, 7, 64))
    assert stream._parse(data, len(data), memoryview(data)) == len(data)
    assert subs[1].told == [(2, 41)] and subs[2].told == [(1, 7)]
    assert stream.counters["sequence_gaps"] == 0


class _Messages:
    def __init__(self):
        self.messages = []
        self.gaps = []

    def on_batch(self, messages):
        self.messages += messages

    def on_gap(self, first, count):
        self.gaps.append((first, count))


def _fragment(tidx: int, sqn: int, first: int, offset: int, total: int, piece: bytes) -> bytes:
    length = MESSAGE_HEADER.size + FRAG_HEADER.size + len(piece)
    return (MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_FRAG, length, tidx, sqn)
            + FRAG_HEADER.pack(NHDR_DATA, FRAG_HEADER.size, 0, first, offset, total) + piece)


def test_a_partial_message_older_than_the_cutoff_is_expired_and_counted_and_a_whole_one_still_arrives():
    stream = _Stream(None, ("test",), lambda s: None)
    sub = _Messages()
    stream.subscribe(1, sub)
    stream._parse(_fragment(1, 10, 10, 0, 8, b"abcd"))              # half of a message: its rest was lost
    assert len(stream.fragments) == 1
    assert stream.expire_fragments(time.monotonic() - 60) == 0      # young: it may still complete
    assert stream.expire_fragments(time.monotonic() + 1) == 1
    assert stream.counters["fragments_expired"] == 1 and not stream.fragments
    stream._parse(_fragment(1, 20, 20, 0, 8, b"wxyz") + _fragment(1, 21, 20, 4, 8, b"1234"))
    assert sub.messages == [(20, b"wxyz1234")]
    assert sub.gaps == [(11, 9)]                                     # the lost rest, and what came between
