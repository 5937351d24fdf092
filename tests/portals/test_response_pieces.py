"""Responses in pieces: over a peer link (router.portals.peer_responses) and between the portals'
rings (router.portals.egress_records.RingResponsePieces)."""
import pytest

from router.portals.egress_records import RingResponsePieces
from router.portals.peer_responses import ResponsePieces, is_response, response_frames, response_piece
from router.um.wire.lbmc import decode_lbmc
from router.worker.records import RecordError, decode_response_piece, encode_response_piece


def _messages(frames):
    return [decode_lbmc(frame, 0)[0] for frame in frames]


def test_a_response_larger_than_a_message_goes_in_numbered_pieces_that_come_together_once():
    data = bytes(range(256)) * 1000
    frames = response_frames(9, 100, "10.0.0.5", 14391, data)
    assert len(frames) == 4 and max(map(len, frames)) <= 65_000
    messages = _messages(frames)
    assert all(is_response(m) and m.tidx == 9 for m in messages)
    assert [m.sqn for m in messages] == [100, 101, 102, 103]
    assert {(response_piece(m).first_sqn, response_piece(m).length) for m in messages} == {(100, len(data))}
    given_up = []
    pieces = ResponsePieces(given_up.append)
    assert [pieces.add_piece(m, now=0.0) for m in messages[:-1]] == [None] * 3
    assert pieces.add_piece(messages[-1], now=0.0) == data
    assert not pieces.partial and not given_up
    [whole] = _messages(response_frames(9, 104, "10.0.0.5", 14391, b"small"))
    assert response_piece(whole) is None and whole.payload == b"small"


def test_pieces_that_stop_coming_are_given_up_and_said():
    given_up = []
    pieces = ResponsePieces(given_up.append)
    first, second = _messages(response_frames(3, 1, "10.0.0.5", 14391, bytes(100_000)))[:2]
    pieces.add_piece(first, now=0.0)
    pieces.give_up_all()                       # the link went down
    assert given_up == [len(first.payload)] and not pieces.partial
    pieces.add_piece(second, now=0.0)
    assert pieces.expire(now=pieces.timeout + 1) is None
    assert given_up == [len(first.payload), len(second.payload)] and pieces.waiting == 0


def test_a_response_above_the_um_maximum_is_refused():
    with pytest.raises(ValueError, match="larger than"):
        response_frames(1, 1, "10.0.0.5", 14391, bytes(64 * 1024 * 1024 + 1))


def test_ring_pieces_come_together_per_ring_and_a_gap_is_an_error():
    data = bytes(range(200)) * 50
    records = [decode_response_piece(encode_response_piece("10.0.0.1", 14392, 7, offset, len(data),
                                                           data[offset:offset + 3000]))
               for offset in range(0, len(data), 3000)]
    pieces = RingResponsePieces()
    assert [pieces.add(2, *r) for r in records[:-1]] == [None] * (len(records) - 1)
    assert pieces.add(2, *records[-1]) == ("10.0.0.1", 14392, 7, data)
    pieces.add(2, *records[0])
    with pytest.raises(RecordError, match="without the pieces before it"):
        pieces.add(2, *records[2])             # the second never came (a ring lapped, a worker restarted)
    assert not pieces.partial
    with pytest.raises(RecordError, match="beyond"):
        decode_response_piece(encode_response_piece("10.0.0.1", 14392, 7, 9000, 10_000, bytes(2000)))
