"""Message properties between a session's frames and a stream's subscriptions: what a source's
session writes (whole and fragmented) reaches an application with its properties and a router's
raw subscription byte for byte; a broken chain header or block is counted, never a crash."""
import struct

import pytest

from router.um.batching_session import BatchingSession
from router.um.frame_stream import FrameStream
from router.um.messages import Message
from router.um.wire.lbmc import MESSAGE_HEADER
from router.um.wire.lbmc_properties import Property, encode_properties

PROPERTIES = {"region": Property("string", "emea"), "priority": Property("short", 3),
              "urgent": Property("boolean", True)}


class _Capture(BatchingSession):
    def __init__(self, datagram_max_size: int = 8192):
        super().__init__(None, datagram_max_size=datagram_max_size, batching_minimum_length=1 << 30,
                         batching_interval=1.0, overflow="drop", max_queue=1 << 20)
        self.sent = bytearray()

    def _deliver(self, data):
        self.sent += data


class _Stream(FrameStream):
    def _close_transport(self):
        pass


class _App:
    def __init__(self):
        self.messages = []

    def on_batch(self, messages):
        self.messages += [Message("t", "src", sqn, payload) for sqn, payload in messages]


class _Raw:
    raw = True

    def __init__(self):
        self.frames = bytearray()

    def on_frames(self, frames, count, longest):
        self.frames += frames

    on_request_frames = on_frames


def _receive(data: bytes, subscription) -> _Stream:
    stream = _Stream(None, ("test",), lambda s: None)
    stream.subscribe(7, subscription)
    stream._parse(bytes(data))
    return stream


def _sent(*messages, datagram_max_size: int = 8192) -> bytes:
    session = _Capture(datagram_max_size)
    sqn = 0
    for data, properties in messages:
        if properties is None:
            sqn = session.send(7, sqn, data, flush=True)
        else:
            sqn = session.send_with_properties(7, sqn, data, encode_properties(properties), flush=True)
    return bytes(session.sent)


def test_messages_whole_and_fragmented_arrive_with_their_properties_and_others_without():
    big = bytes(range(256)) * 100                     # 25600 bytes: four fragments of 8192
    app = _App()
    stream = _receive(_sent((b"plain", None), (b"small", PROPERTIES), (big, PROPERTIES), (b"", PROPERTIES)), app)
    assert [(m.sequence_number, m.data, m.properties) for m in app.messages] == [
        (0, b"plain", None), (1, b"small", PROPERTIES), (2, big, PROPERTIES), (6, b"", PROPERTIES)]
    assert stream.counters["reassembled"] == 1 and stream.counters["malformed"] == 0


def test_a_routers_raw_subscription_gets_the_frames_as_they_were_sent():
    sent = _sent((b"x" * 30000, PROPERTIES), (b"y", PROPERTIES), (b"z", None))
    raw = _Raw()
    _receive(sent, raw)
    assert bytes(raw.frames) == sent


def _frame_with_block(block: bytes, chain_size_delta: int = 0) -> bytearray:
    frame = bytearray(_sent((b"data", {"k": Property("int", 1)})))
    good_block = encode_properties({"k": Property("int", 1)})
    frame[-len(good_block):] = block + bytes(len(good_block) - len(block))
    size = struct.unpack_from(">I", frame, MESSAGE_HEADER.size + 8)[0]
    struct.pack_into(">I", frame, MESSAGE_HEADER.size + 8, size + chain_size_delta)
    return frame


@pytest.mark.parametrize("block", [b"\x00" * 8, struct.pack("<IHBB", 0xABACDABA, 40, 0, 0),
                                   struct.pack("<IHBBIIII", 0xABACDABA, 1, 0, 0, 900, 900, 0, 4)])
def test_a_bad_properties_block_is_counted_and_the_message_delivered_without_it(block):
    app = _App()
    stream = _receive(_frame_with_block(block) + _sent((b"next", None))[:0], app)
    assert [(m.data, m.properties) for m in app.messages] == [(b"data", None)]
    assert stream.counters["malformed"] == 1 and not stream.closed


def test_a_chain_header_saying_more_properties_than_the_message_holds_drops_only_that_frame():
    frame = _frame_with_block(encode_properties({"k": Property("int", 1)}), chain_size_delta=1000)
    app = _App()
    stream = _receive(frame, app)
    assert app.messages == [] and stream.counters["malformed"] == 1 and not stream.closed


def test_a_chain_header_of_another_shape_drops_only_that_frame_and_the_stream_goes_on():
    frame = bytearray(_sent((b"data", PROPERTIES)))
    frame[MESSAGE_HEADER.size + 3] = 5                # first element: user data, not properties length
    after = _sent((b"a", None), (b"b", None))
    second = bytearray(after[len(after) // 2:])
    struct.pack_into(">I", second, 8, 1)              # the message after it, next in sequence
    app = _App()
    stream = _receive(bytes(frame) + bytes(second), app)
    assert [(m.sequence_number, m.data) for m in app.messages] == [(1, b"b")]
    assert stream.counters["malformed"] == 1 and not stream.closed
