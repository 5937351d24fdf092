"""A request port's connection (router/um/request_port.py) putting responses in pieces back together:
a response is delivered once every byte of it came, and a stream that contradicts itself is closed."""
import pytest

from router.um.request_port import MalformedResponse, UimConnection
from router.um.requests import message_frames


def response_frames(qidx: int, sqn: int, payload: bytes, max_size: int) -> list[bytes]:
    return [head + bytes(piece) for head, piece in message_frames(qidx, sqn, payload, max_size)]


def connection():
    delivered = []
    counters = {"response_frames_unknown": 0}
    return UimConnection(None, ("10.0.0.9", 40000), lambda qidx, data, source: delivered.append((qidx, data)),
                         counters), delivered


def test_a_piece_that_comes_twice_does_not_complete_a_response():
    conn, delivered = connection()
    body = bytes(range(256)) * 40                                  # 10,240 bytes: three pieces of 4 KB
    pieces = response_frames(7, 0, body, 4096)
    assert len(pieces) == 3
    conn.take(pieces[0] + pieces[0] + pieces[1])
    assert delivered == []                                         # the last third never came
    conn.take(pieces[2])
    assert delivered == [(7, body)] and not conn.partial and conn.partial_bytes == 0


def test_a_piece_of_another_length_under_the_same_key_breaks_the_stream():
    conn, delivered = connection()
    first = response_frames(7, 0, b"a" * 10_000, 4096)[0]
    other = response_frames(7, 0, b"b" * 9_000, 4096)[1]          # same (qidx, first_sqn), 9,000 bytes long
    conn.take(first)
    with pytest.raises(MalformedResponse, match="9000-byte response where one of 10000 bytes"):
        conn.take(other)
    assert delivered == []
