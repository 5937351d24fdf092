"""Retained frames back into messages (router.um.retained_frames), as late join and OTR read them:
every frame kind a source retains (data, data with properties, requests; whole or fragmented), and
what cannot be put back together counted, never raised."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.um.frame_stream import MAX_REASSEMBLED
from router.um.requests import RequestOrigin
from router.um.retained_frames import Reassembly, read_retained
from router.um.wire.lbmc import (FRAG_HEADER, LBMC_TYPE_RETRANS, MESSAGE_HEADER, NHDR_APPHDR_CHAIN, NHDR_DATA,
                                 NHDR_FRAG, NHDR_REQUEST)
from router.um.wire.lbmc_properties import Property, apphdr_chain, encode_properties
from tests.support.retransmissions import retrans_frames

TIDX = 7
ORIGIN = RequestOrigin("10.9.8.7", 14395, 42)
PROPERTIES = {"venue": Property("string", "XNAS"), "quantity": Property("int", 300)}
BLOCK = encode_properties(PROPERTIES)


def frames(sqn: int, payload: bytes, origin=None, properties_size: int = 0, datagram_max_size: int = 8192):
    return retrans_frames(TIDX, sqn, payload, origin=origin, properties_size=properties_size,
                          datagram_max_size=datagram_max_size)


def fragment(sqn: int, first: int, offset: int, total: int, piece: bytes, after: int = NHDR_DATA) -> bytes:
    return (MESSAGE_HEADER.pack(LBMC_TYPE_RETRANS, NHDR_FRAG, MESSAGE_HEADER.size + FRAG_HEADER.size + len(piece),
                                TIDX, sqn)
            + FRAG_HEADER.pack(after, FRAG_HEADER.size, 0, first, offset, total) + piece)


class Counted:
    def __init__(self):
        self.counters = {"incomplete": 0, "properties_malformed": 0}
        self.reassembly = Reassembly(self.counters, "incomplete", "properties_malformed")

    def feed(self, frames_in_order) -> list[tuple]:
        """Every frame read and folded in; the messages made whole."""
        out = []
        for frame in frames_in_order:
            piece = self.reassembly.read(frame)
            if piece is not None:
                message = self.reassembly.add(piece.first, piece)
                if message is not None:
                    out.append(message)
        return out


@pytest.fixture
def r():
    return Counted()


def test_a_data_frame_is_its_message(r):
    assert r.feed(frames(4, b"hello")) == [(4, b"hello")]
    assert r.counters == {"incomplete": 0, "properties_malformed": 0}


def test_a_message_with_properties_comes_back_with_them(r):
    [(sqn, data)] = r.feed(frames(4, b"hello" + BLOCK, properties_size=len(BLOCK)))
    assert (sqn, data, data.properties) == (4, b"hello", PROPERTIES)


def test_a_request_comes_back_with_who_asked(r):
    assert r.feed(frames(4, b"question", ORIGIN)) == [(4, b"question", ORIGIN)]


@pytest.mark.parametrize("kind", ["data", "properties", "request"])
def test_fragments_in_any_order_make_the_message_once_the_last_comes(r, kind):
    data = bytes(i % 251 for i in range(20_000))
    if kind == "properties":
        pieces = frames(10, data + BLOCK, properties_size=len(BLOCK))
    else:
        pieces = frames(10, data, ORIGIN if kind == "request" else None)
    assert len(pieces) == 3
    assert r.feed([pieces[2], pieces[0]]) == []
    [message] = r.feed([pieces[1]])
    assert message == ((10, data, ORIGIN) if kind == "request" else (10, data))
    if kind == "properties":
        assert message[1].properties == PROPERTIES
    assert r.reassembly.partial == {} and r.counters["incomplete"] == 0


def test_a_properties_block_that_cannot_be_read_leaves_the_data_without_it_counted(r):
    [(sqn, data)] = r.feed(frames(4, b"data" + bytes(24), properties_size=24))
    assert (sqn, data, getattr(data, "properties", None)) == (4, b"data", None)
    assert r.counters == {"incomplete": 0, "properties_malformed": 1}


def _with_header(next_hdr: int, rest: bytes, sqn: int = 4) -> bytes:
    return MESSAGE_HEADER.pack(LBMC_TYPE_RETRANS, next_hdr, MESSAGE_HEADER.size + len(rest), TIDX, sqn) + rest


MALFORMED = {
    "shorter than a message header": b"\x03\x01\x00\x08",
    "longer than it is": MESSAGE_HEADER.pack(LBMC_TYPE_RETRANS, NHDR_DATA, 200, TIDX, 4) + b"data",
    "an unknown header": _with_header(0x7F, b"what"),
    "a fragment shorter than its headers": _with_header(NHDR_FRAG, bytes(6)),
    "a fragment not of data": fragment(4, 4, 0, 10, b"0123456789", after=0x7F),
    "a fragment beyond its message": fragment(5, 4, 8, 10, b"0123"),
    "a message larger than any reassembly": fragment(4, 4, 0, MAX_REASSEMBLED + 1, bytes(100)),
    "a fragment before its first": fragment(4, 9, 0, 20, bytes(10)),
    "an empty fragment": fragment(4, 4, 0, 20, b""),
    "a chain that is not a properties length": _with_header(NHDR_APPHDR_CHAIN, bytes(12) + b"data"),
    "a request header of the wrong length": _with_header(NHDR_REQUEST, bytes(16) + b"data"),
    "a request header followed by neither data nor fragment": _with_header(
        NHDR_REQUEST, bytes([0x7F, 16]) + bytes(14) + b"data"),
    "properties chained to neither data nor fragment": _with_header(NHDR_APPHDR_CHAIN, apphdr_chain(0x7F, 4) + b"data"),
    "a properties block longer than its message": _with_header(
        NHDR_APPHDR_CHAIN, apphdr_chain(NHDR_DATA, 100) + b"data"),
    "a properties block longer than its fragmented message": _with_header(
        NHDR_APPHDR_CHAIN, apphdr_chain(NHDR_FRAG, 100) + FRAG_HEADER.pack(NHDR_DATA, FRAG_HEADER.size, 0, 4, 0, 20)
        + bytes(10)),
}


@pytest.mark.parametrize("frame", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_frame_that_cannot_be_put_back_together_is_counted_not_raised(r, frame):
    assert r.feed([frame]) == []
    assert r.counters["incomplete"] == 1 and r.reassembly.partial == {}


def test_fragments_that_disagree_on_their_message_s_length_give_it_up_counted(r):
    assert r.feed([fragment(10, 10, 0, 20, bytes(10)), fragment(11, 10, 10, 15, bytes(10))]) == []
    assert r.counters["incomplete"] == 1


def test_a_message_still_partial_when_nothing_more_can_come_is_given_up_counted(r):
    r.feed(frames(10, bytes(20_000))[:2])
    r.reassembly.drop_partial()
    assert r.reassembly.partial == {} and r.counters["incomplete"] == 1


@given(st.binary(max_size=120))
def test_whatever_a_frame_holds_reading_it_counts_or_gives_a_piece_never_raises(data):
    r = Counted()
    piece = r.reassembly.read(data)
    assert (piece is None) == (r.counters["incomplete"] == 1)
    if piece is not None:
        assert piece == read_retained(data) and piece.offset + len(piece.piece) <= piece.total
