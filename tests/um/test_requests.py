"""Requests on the wire (router/um/requests.py) and in a receiver's stream (frame_stream.py): the
REQUEST header read and patched in place, request frames as the codec decodes them, requests
delivered in sequence with data, and what a router's raw subscription is told."""
import pytest

from router.um.frame_runs import MIN_RUN
from router.um.frame_stream import FrameStream, run_payloads
from router.um.messages import Message, RequestMessage
from router.um.receiver import JoinedSource
from router.um.requests import (REQUEST_HEADER, REQUEST_HEADER_OFFSET, RequestOrigin, message_frames, read_request,
                                rewrite_request)
from router.um.wire.errors import WireError
from router.um.wire.lbmc import LBMC_TYPE_MESSAGE, MESSAGE_HEADER, NHDR_DATA, NHDR_REQUEST, split_lbmc_stream
from router.um.wire.lbmc_headers import Frag, Request

ASKER = RequestOrigin("10.0.0.7", 14391, 5)


def frames_of(tidx: int, sqn: int, payload: bytes, origin: RequestOrigin | None = None,
              max_size: int = 65535) -> bytes:
    return b"".join(head + bytes(piece) for head, piece in message_frames(tidx, sqn, payload, max_size, origin))


def data_frame(tidx: int, sqn: int, payload: bytes) -> bytes:
    return frames_of(tidx, sqn, payload)


def decode_all(frames: bytes) -> list:
    return split_lbmc_stream(frames)[0]


# -- the REQUEST header in place ---------------------------------------------------------------------
def test_read_and_rewrite_a_request_header_in_place():
    before = data_frame(3, 1, b"data")
    request = frames_of(3, 2, b"what is the price?", ASKER)
    buffer = bytearray(before + request)
    at = len(before)
    assert REQUEST_HEADER_OFFSET == 12 and REQUEST_HEADER.size == 16
    assert read_request(buffer, at) == ASKER
    rewrite_request(memoryview(buffer), at, 0xFFFF0001, 15001, "127.0.0.9")
    assert read_request(bytes(buffer), at) == RequestOrigin("127.0.0.9", 15001, 0xFFFF0001)
    # Only qidx, port and ipaddr changed: the frames still decode, everything else as it was.
    data, asked = decode_all(bytes(buffer))
    assert data.payload == b"data" and bytes(buffer[:at]) == before
    assert (asked.tidx, asked.sqn, asked.payload) == (3, 2, b"what is the price?")
    assert asked.headers == [Request(0, 0xFFFF0001, 15001, "127.0.0.9")]
    rewrite_request(buffer, at, ASKER.qidx, ASKER.port, ASKER.ipaddr)
    assert bytes(buffer) == before + request


@pytest.mark.parametrize("qidx, port, ipaddr", [(2**32, 1, "1.2.3.4"), (1, 70000, "1.2.3.4"), (1, 1, "host")])
def test_a_value_that_does_not_fit_the_header_is_a_wire_error(qidx, port, ipaddr):
    buffer = bytearray(frames_of(1, 1, b"x", ASKER))
    with pytest.raises(WireError):
        rewrite_request(buffer, 0, qidx, port, ipaddr)


def test_a_request_frame_is_request_then_data_and_a_big_one_is_request_frag_data_in_every_piece():
    (small,) = decode_all(frames_of(7, 40, b"ask", ASKER))
    assert (small.msg_type, small.tidx, small.sqn, small.payload) == (LBMC_TYPE_MESSAGE, 7, 40, b"ask")
    assert small.headers == [Request(0, 5, 14391, "10.0.0.7")]
    assert frames_of(7, 40, b"ask", ASKER)[1] == NHDR_REQUEST

    payload = bytes(range(256)) * 8
    pieces = decode_all(frames_of(7, 40, payload, ASKER, max_size=500))
    assert len(pieces) == 5 and [p.sqn for p in pieces] == [40, 41, 42, 43, 44]
    for piece in pieces:
        request, frag = piece.headers
        assert request == Request(0, 5, 14391, "10.0.0.7")
        assert isinstance(frag, Frag) and (frag.first_sqn, frag.length) == (40, len(payload))
    assert b"".join(p.payload for p in sorted(pieces, key=lambda p: p.headers[1].offset)) == payload


# -- requests in a receiver's stream ---------------------------------------------------------------
class _Stream(FrameStream):
    def _close_transport(self):
        pass


class _Application:
    """What an application subscription sees, in order."""

    raw = False

    def __init__(self):
        self.seen = []

    def on_run(self, data, first, count, length):
        self.on_batch(run_payloads(data, first, count, length))

    def on_batch(self, messages):
        self.seen += [("data", sqn, bytes(payload)) for sqn, payload in messages]

    def on_request(self, sqn, payload, origin):
        self.seen.append(("request", sqn, bytes(payload), origin))


class _Router:
    raw = True

    def __init__(self):
        self.plain, self.with_requests = [], []

    def on_frames(self, frames, count, longest):
        self.plain.append((bytes(frames), count))

    def on_request_frames(self, frames, count, longest):
        self.with_requests.append((bytes(frames), count))


def parse(data: bytes, subscription, tidx: int = 3) -> _Stream:
    stream = _Stream(None, ("test",), lambda s: None)
    stream.subscribe(tidx, subscription)
    buffer = bytearray(data)
    assert stream._parse(bytes(buffer), len(buffer), memoryview(buffer)) == len(buffer)
    return stream


def test_requests_arrive_in_sequence_with_the_data_around_them():
    big = bytes(range(200)) * 10
    read = (data_frame(3, 1, b"one") + frames_of(3, 2, b"ask", ASKER) + data_frame(3, 3, b"three")
            + data_frame(9, 1, b"other topic") + frames_of(3, 4, big, ASKER._replace(qidx=6), max_size=600)
            + data_frame(3, 8, b"after"))
    app = _Application()
    parse(read, app)
    assert app.seen == [("data", 1, b"one"), ("request", 2, b"ask", ASKER), ("data", 3, b"three"),
                        ("request", 4, big, ASKER._replace(qidx=6)), ("data", 8, b"after")]


def test_a_joined_source_hands_requests_to_the_application_as_request_messages():
    class Receiver:
        topic, raw, context = "t", False, object()
        on_batch = None

        def __init__(self):
            self.got = []
            self.on_message = self.got.append

    receiver = Receiver()
    joined = JoinedSource(receiver, type("Candidate", (), {"source_string": "TCP:1.2.3.4:5[3]"})())
    parse(data_frame(3, 1, b"plain") + frames_of(3, 2, b"ask", ASKER), joined)
    plain, request = receiver.got
    assert type(plain) is Message and not isinstance(plain, RequestMessage)
    assert isinstance(request, RequestMessage)
    assert (request.topic, request.source, request.sequence_number, request.data, request.origin) == \
        ("t", "TCP:1.2.3.4:5[3]", 2, b"ask", ASKER)
    assert request.context is receiver.context


def _with_request_header(frame: bytes, offset: int, value: int) -> bytes:
    patched = bytearray(frame)
    patched[offset] = value
    return bytes(patched)


@pytest.mark.parametrize("bad", [
    _with_request_header(frames_of(3, 2, b"ask", ASKER), REQUEST_HEADER_OFFSET + 1, 15),     # hdr_len 15
    _with_request_header(frames_of(3, 2, b"ask", ASKER), REQUEST_HEADER_OFFSET, 0x05),       # -> TOPICNAME
    MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_REQUEST, 20, 3, 2) + bytes(8),              # header cut short
    _with_request_header(frames_of(3, 2, b"", ASKER), REQUEST_HEADER_OFFSET, 0x01),          # FRAG, no room
], ids=["hdr_len", "chain", "short", "frag"])
def test_a_malformed_request_is_counted_and_dropped_and_the_stream_goes_on(bad, caplog):
    read = data_frame(3, 1, b"before") + bad + data_frame(3, 3, b"after")
    app, router = _Application(), _Router()
    stream = parse(read, app)
    assert app.seen == [("data", 1, b"before"), ("data", 3, b"after")]
    assert stream.counters["malformed"] == 1 and not stream.closed
    assert "malformed" in caplog.text
    raw = parse(read, router)
    assert raw.counters["malformed"] == 1 and not raw.closed
    assert router.plain == [(data_frame(3, 1, b"before") + data_frame(3, 3, b"after"), 2)]
    assert router.with_requests == []


def test_a_raw_run_holding_a_request_goes_to_on_request_frames_untouched():
    read = data_frame(3, 1, b"one") + frames_of(3, 2, b"ask", ASKER) + data_frame(3, 3, b"three")
    router = _Router()
    parse(read, router)
    assert router.plain == [] and router.with_requests == [(read, 3)]


def test_the_equal_frame_fast_path_never_takes_a_request():
    equal = [data_frame(3, n, b"x" * 52) for n in range(MIN_RUN + 10)]
    request = frames_of(3, 100, b"y" * 36, ASKER)          # the same length as the data frames
    assert len(request) == len(equal[0])
    router = _Router()
    parse(b"".join(equal) + request, router)
    assert router.plain == [(b"".join(equal), len(equal))]
    assert router.with_requests == [(request, 1)]

    requests = [frames_of(3, n, b"y" * 36, ASKER) for n in range(MIN_RUN + 10)]
    router = _Router()
    parse(b"".join(requests), router)
    assert router.plain == [] and router.with_requests == [(b"".join(requests), len(requests))]


def test_a_joined_source_forwards_request_frames_to_forward_requests_or_else_to_forward():
    receiver = type("Receiver", (), {"topic": "t", "raw": True, "on_message": None, "on_batch": None})()
    joined = JoinedSource(receiver, type("Candidate", (), {"source_string": "s"})())
    plain, requests = [], []
    joined.forward = lambda frames, count, longest: plain.append(count)
    joined.on_request_frames(b"f", 2, 40)
    assert plain == [2]
    joined.forward_requests = lambda frames, count, longest: requests.append(count)
    joined.on_request_frames(b"f", 3, 40)
    joined.on_frames(b"f", 4, 40)
    assert (plain, requests) == ([2, 4], [3])


def test_the_request_header_is_what_the_dissector_names():
    header = frames_of(1, 1, b"", ASKER)[REQUEST_HEADER_OFFSET:REQUEST_HEADER_OFFSET + 16]
    next_hdr, hdr_len, _, transport, qidx, port, _, ipaddr = REQUEST_HEADER.unpack(header)
    assert (next_hdr, hdr_len, transport, qidx, port, ipaddr) == (NHDR_DATA, 16, 0, 5, 14391, 0x0A000007)
