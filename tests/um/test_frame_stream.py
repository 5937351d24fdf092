"""Splitting a read into the runs of frames each raw (router) subscription gets, and into the
batches of messages an application's subscription gets (in both, the frame-by-frame walk and the
fast path for a read of equal frames must agree), and partial messages that can no longer
complete being expired."""
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.um.frame_stream import FrameStream, run_payloads
from router.um.messages import Message
from router.um.receiver import JoinedSource
from router.um.wire.lbmc import (FRAG_HEADER, LBMC_TYPE_CONTROL, LBMC_TYPE_MESSAGE, MESSAGE_HEADER,
                                 NHDR_APPHDR_CHAIN, NHDR_DATA, NHDR_FRAG, NHDR_REQUEST, LbmcMessage, Tsni, encode_lbmc)
from router.um.wire.lbmc_properties import apphdr_chain


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

    def on_run(self, data, first, count, length):
        self.messages += run_payloads(data, first, count, length)

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


class _Walked(_Stream):
    """The same stream without the fast path: every frame walked one by one."""

    def _uniform_batch(self, data, end):
        return 0, 0


def _received(stream_class, reads: list[bytes], first: dict[int, int]) -> tuple[dict, dict, int]:
    stream = stream_class(None, ("test",), lambda s: None)
    subs = {tidx: _Messages() for tidx in (1, 2)}
    for tidx, sub in subs.items():
        stream.subscribe(tidx, sub)
    stream._parse(b"".join(frame(tidx, sqn, 40) for tidx, sqn in first.items()))   # joined: in sequence
    for read in reads:
        assert stream._parse(read) == len(read)
    return ({t: s.messages for t, s in subs.items()}, {t: s.gaps for t, s in subs.items()},
            stream.counters["frames"])


@given(st.integers(0, 0xFFFFFFFF - 50), st.lists(st.tuples(st.sampled_from([1, 1, 1, 2]), st.sampled_from([0, 0, 0, 1, 3, -2]),
                                                          st.sampled_from([64, 64, 64, 100])), max_size=300),
       st.lists(st.integers(1, 300), max_size=8))
def test_an_applications_batches_are_the_same_with_and_without_the_fast_path(start, steps, cuts):
    """Runs of equal frames in sequence (the fast path), broken by jumps (gaps), old frames
    (dropped), other topics and other lengths, read in pieces: the same messages, the same gaps.
    Some start within 50 of the 32-bit wrap, where sequence numbers go on from 0."""
    sqns = {1: start, 2: 7}
    frames = []
    for tidx, step, length in [(1, 0, 64)] * 40 + steps:     # often a run of equal frames first
        sqns[tidx] = (sqns[tidx] + 1 + step) & 0xFFFFFFFF
        frames.append(frame(tidx, sqns[tidx], length))
    bounds = sorted({min(cut, len(frames)) for cut in cuts} | {0, len(frames)})
    reads = [b"".join(frames[a:b]) for a, b in zip(bounds, bounds[1:])]
    first = {1: start, 2: 7}
    assert _received(_Stream, reads, first) == _received(_Walked, reads, first)


def test_a_read_of_equal_frames_in_sequence_is_one_batch_and_a_jump_after_it_is_a_gap():
    stream = _Stream(None, ("test",), lambda s: None)
    sub = _Messages()
    stream.subscribe(1, sub)
    stream._parse(frame(1, 9, 64))
    stream._parse(b"".join(frame(1, n, 64) for n in range(10, 110)) + frame(1, 115, 64))
    assert [sqn for sqn, _ in sub.messages] == list(range(9, 110)) + [115]
    assert sub.messages[50] == (59, bytes([59]) * 52)
    assert sub.gaps == [(110, 5)]
    assert stream.counters["frames"] == 102


class _Application:
    """A receiver as a JoinedSource sees it: its topic, and one callback for each batch."""
    topic, raw, on_message = "t", False, None

    def __init__(self):
        self.messages = []
        self.on_batch = self.messages.extend


def _applications_messages(stream_class, read: bytes) -> list:
    stream = stream_class(None, ("test",), lambda s: None)
    application = _Application()
    stream.subscribe(1, JoinedSource(application, type("Candidate", (), {"source_string": "TCP:1.2.3.4:5[1]"})()))
    stream.next_sqns[1] = MESSAGE_HEADER.unpack_from(read)[4]       # joined before: the first is in sequence
    assert stream._parse(read) == len(read)
    return application.messages


@given(st.integers(0, 0xFFFFFFFF - 500), st.sampled_from([12, 13, 40, 76, 300, 8204]), st.integers(8, 500))
def test_a_joined_source_makes_the_same_messages_of_a_run_as_of_its_frames_walked_one_by_one(start, length, count):
    """A read of equal frames in sequence becomes the application's messages in one pass
    (JoinedSource.on_run): each a Message, with the payloads, numbers and source the walk gives."""
    read = b"".join(frame(1, start + n, length) for n in range(count))
    messages = _applications_messages(_Stream, read)
    assert messages == _applications_messages(_Walked, read)
    assert len(messages) == count and all(type(m) is Message for m in messages)
    assert messages[-1] == Message("t", "TCP:1.2.3.4:5[1]", start + count - 1,
                                   bytes([(start + count - 1) & 0xFF]) * (length - 12))


class _Loop:
    """What a stream asks of its loop: callbacks for later, run by the test."""

    def __init__(self):
        self.later = []

    def call_later(self, delay, callback, *args):
        self.later.append((callback, args))

    def run_later(self):
        while self.later:
            callback, args = self.later.pop(0)
            callback(*args)


class _Ending(_Messages):
    def __init__(self):
        super().__init__()
        self.ended = False

    def on_eos(self):
        self.ended = True


def _corrupt_after_good_frames(corruption: bytes, raw: bool):
    loop = _Loop()
    closed = []
    stream = _Stream(loop, ("test",), closed.append)
    sub = _Raw() if raw else _Ending()
    stream.subscribe(1, sub)
    good = [frame(1, n, 20 + n) for n in range(5)]          # lengths vary: walked frame by frame
    stream._parse(b"".join(good) + corruption + frame(1, 5, 30))
    return stream, sub, loop, closed, good


def test_the_messages_before_a_frame_of_length_zero_are_delivered_then_the_stream_ends():
    """A stream whose framing breaks (a frame saying it is 0 bytes long) cannot be read further:
    it is counted and ends, and the subscription gets its end; but the whole frames it brought
    before the break are the source's messages and are delivered first."""
    stream, sub, loop, closed, _ = _corrupt_after_good_frames(b"\x02\x00\x00\x00" + b"\xff" * 40, raw=False)
    assert [sqn for sqn, _ in sub.messages] == [0, 1, 2, 3, 4]
    assert sub.messages[4] == (4, bytes([4]) * 12)
    assert stream.counters["malformed"] == 1
    loop.run_later()
    assert sub.ended and closed == [stream]


def test_a_routers_frames_before_a_broken_fragment_go_on_before_the_stream_ends():
    """The same for a router's proxy receiver: a FRAG frame too short for its headers breaks the
    stream; the frames before it are forwarded."""
    broken = MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_FRAG, 16, 1, 5) + b"\x00" * 4
    stream, sub, loop, closed, good = _corrupt_after_good_frames(broken, raw=True)
    assert (bytes(sub.frames), sub.count) == (b"".join(good), 5)
    assert stream.counters["malformed"] == 1


class _InOrder:
    """An application's subscription recording what it is told, in order."""

    def __init__(self):
        self.told = []

    def on_batch(self, messages):
        self.told += [("message", sqn) for sqn, *_ in messages]

    def on_run(self, data, first, count, length):
        self.told += [("message", sqn) for sqn, _ in run_payloads(data, first, count, length)]

    def on_request(self, sqn, payload, origin):
        self.told.append(("request", sqn))

    def on_gap(self, first, count):
        self.told.append(("lost", first, count))


def _with_header(next_hdr: int, sqn: int, rest: bytes, tidx: int = 1) -> bytes:
    return MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, next_hdr, MESSAGE_HEADER.size + len(rest), tidx, sqn) + rest


# Frames whose length is sound but whose message cannot be read: dropped alone, the stream goes on.
UNREADABLE = {
    "a properties block longer than its message": lambda sqn: _with_header(
        NHDR_APPHDR_CHAIN, sqn, apphdr_chain(NHDR_DATA, 100) + b"data"),
    "a chain that is not a properties length": lambda sqn: _with_header(NHDR_APPHDR_CHAIN, sqn, bytes(12) + b"data"),
    "properties chained to neither data nor fragment": lambda sqn: _with_header(
        NHDR_APPHDR_CHAIN, sqn, apphdr_chain(0x7F, 4) + b"data"),
    "a request header of the wrong length": lambda sqn: _with_header(NHDR_REQUEST, sqn, bytes(16) + b"data"),
    "an unknown header": lambda sqn: _with_header(0x7F, sqn, b"what"),
}


@pytest.mark.parametrize("walked", [False, True], ids=["fast path", "walked"])
@pytest.mark.parametrize("unreadable", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_a_message_dropped_as_unreadable_is_told_lost_in_its_place(unreadable, walked):
    """Its sequence number was taken, so no gap would ever say it is missing: the application
    hears of it as a loss between the messages around it, and the stream goes on."""
    stream = (_Walked if walked else _Stream)(None, ("test",), lambda s: None)
    sub = _InOrder()
    stream.subscribe(1, sub)
    stream.next_sqns[1] = 0
    equal = b"".join(frame(1, n, 64) for n in range(40))            # a run first (the fast path)
    stream._parse(equal + unreadable(40) + frame(1, 41, 64) + unreadable(42) + frame(1, 43, 30))
    assert sub.told == ([("message", n) for n in range(40)] + [("lost", 40, 1), ("message", 41),
                                                                ("lost", 42, 1), ("message", 43)])
    assert stream.counters["frames_missing"] == 2
    assert stream.counters["malformed"] + stream.counters["unknown_frames"] == 2


def test_a_fragmented_message_whose_properties_cannot_fit_is_told_lost_for_every_fragment():
    chain = apphdr_chain(NHDR_FRAG, 100)
    fragments = [_with_header(NHDR_APPHDR_CHAIN, 10 + n, chain + FRAG_HEADER.pack(
        NHDR_DATA, FRAG_HEADER.size, 0, 10, 5 * n, 15) + bytes(5)) for n in range(3)]
    stream = _Stream(None, ("test",), lambda s: None)
    sub = _InOrder()
    stream.subscribe(1, sub)
    stream._parse(frame(1, 9, 40) + b"".join(fragments) + frame(1, 13, 40))
    assert sub.told == [("message", 9), ("lost", 10, 3), ("message", 13)]


def test_an_unreadable_message_inside_a_gap_waited_for_is_told_lost_in_order():
    """With a loss recovery wait the message stands where it belongs among the late ones."""
    loop = _Loop()
    stream = _Stream(loop, ("test",), lambda s: None)
    stream.loss_recovery_timeout = 1.0
    sub = _InOrder()
    stream.subscribe(1, sub)
    stream._parse(frame(1, 0, 40))
    stream._parse(frame(1, 3, 40))                          # 1 and 2 missing: waited for
    stream._parse(UNREADABLE["an unknown header"](2) + frame(1, 1, 40))
    assert sub.told == [("message", 0), ("message", 1), ("lost", 2, 1), ("message", 3)]
