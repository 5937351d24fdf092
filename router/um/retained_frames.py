"""Retained frames back into messages: what late join and off-transport recovery share.

A source's retention keeps the frames it sent; late join (router.um.late_join) and OTR
(router.um.otr) get them back as RETRANS frames and put them together again as the live stream
(router.um.frame_stream) does: a frame is a message's data, with an APPHDR_CHAIN header first when
the message has UM message properties (router.um.wire.lbmc_properties), or a request's (a REQUEST
header first, router.um.requests), and above the datagram size every frame of a message is a
fragment (a FRAG header after those). `read_retained` reads one frame into the piece of the
message it holds; `Reassembly` puts the pieces of each message together, keyed by the caller
(late join by the message's first sequence number, OTR by that number extended past the wrap).
A frame that cannot be read is counted and logged, never raised (the caller tells the
application it is lost, in its place); a message that cannot be whole is counted.
"""
from __future__ import annotations

import logging
from typing import NamedTuple

from router.um.frame_stream import MAX_REASSEMBLED
from router.um.messages import with_properties
from router.um.requests import (REQUEST_FRAME_MIN, REQUEST_HEADER_OFFSET, RequestOrigin, read_request,
                                request_frame_problem)
from router.um.sequence_numbers import distance
from router.um.wire.errors import WireError
from router.um.wire.lbmc import FRAG_HEADER, MESSAGE_HEADER, NHDR_APPHDR_CHAIN, NHDR_DATA, NHDR_FRAG, NHDR_REQUEST
from router.um.wire.lbmc_properties import APPHDR_CHAIN_SIZE, read_apphdr_chain

log = logging.getLogger(__name__)


class RetainedPiece(NamedTuple):
    """What one retained frame holds: bytes `offset`.. of the message whose first frame has
    sequence number `first` and whose payload (data, then any properties block) is `total` bytes.
    A frame that is a whole message is the one piece from 0 of its own length."""
    sqn: int
    first: int
    offset: int
    total: int
    piece: bytes
    properties_size: int            # the properties block ending the payload (0: none)
    origin: RequestOrigin | None    # a request's: who asked

    @property
    def whole(self) -> bool:
        return self.offset == 0 and len(self.piece) == self.total


def read_retained(frame) -> RetainedPiece:
    """The piece of a message that the retained (RETRANS) `frame` holds; WireError saying why
    when it holds none that can be put back together."""
    if len(frame) < MESSAGE_HEADER.size:
        raise WireError(f"retained frame of {len(frame)} bytes, shorter than its message header")
    _, next_hdr, length, _, sqn = MESSAGE_HEADER.unpack_from(frame)
    if not MESSAGE_HEADER.size <= length <= len(frame):
        raise WireError(f"retained frame says {length} bytes, has {len(frame)}")
    origin, properties_size, body = None, 0, MESSAGE_HEADER.size
    if next_hdr == NHDR_REQUEST:
        problem = request_frame_problem(frame, 0, length)
        if problem is not None:
            raise WireError(problem)
        origin, next_hdr, body = read_request(frame, 0), frame[REQUEST_HEADER_OFFSET], REQUEST_FRAME_MIN
    elif next_hdr == NHDR_APPHDR_CHAIN:
        next_hdr, properties_size = read_apphdr_chain(frame, body, length)
        body += APPHDR_CHAIN_SIZE
    if next_hdr == NHDR_DATA:
        piece = bytes(frame[body:length])
        return _checked(RetainedPiece(sqn, sqn, 0, len(piece), piece, properties_size, origin))
    if next_hdr != NHDR_FRAG:
        raise WireError(f"retained frame with header type 0x{next_hdr:02x}, not DATA or FRAG")
    if length < body + FRAG_HEADER.size:
        raise WireError("retained fragment shorter than its headers")
    after, _, _, first, offset, total = FRAG_HEADER.unpack_from(frame, body)
    piece = bytes(frame[body + FRAG_HEADER.size:length])
    if after != NHDR_DATA:
        raise WireError(f"retained fragment with header type 0x{after:02x} after FRAG, not DATA")
    if total > MAX_REASSEMBLED:
        raise WireError(f"retained fragment of a message of {total} bytes, above {MAX_REASSEMBLED}")
    if offset + len(piece) > total:
        raise WireError(f"retained fragment of {len(piece)} bytes at {offset} beyond its message's {total}")
    if not piece and total:
        raise WireError("retained fragment holding nothing of its message")
    if distance(first, sqn) < 0:
        raise WireError(f"retained fragment {sqn} of a message said to start after it, at {first}")
    return _checked(RetainedPiece(sqn, first, offset, total, piece, properties_size, origin))


def _checked(piece: RetainedPiece) -> RetainedPiece:
    """A chain header claiming a properties block longer than the message leaves no way to know
    where its data ends: the frame is dropped, as the live stream drops it, and never delivered as
    data it does not hold."""
    if piece.properties_size > piece.total:
        raise WireError(f"properties block of {piece.properties_size} bytes in a message of {piece.total}")
    return piece


class Reassembly:
    """Retained pieces put together into messages, (sqn, data) or, for a request, (sqn, data,
    origin), the data with its properties when it has some. What is wrong is counted in
    `counters[incomplete]` (a frame that cannot be read, a message that cannot be whole) and
    `counters[properties_malformed]` (a block that cannot be read: the data comes without it,
    as the live stream delivers it)."""

    def __init__(self, counters: dict, incomplete: str, properties_malformed: str):
        self.counters, self.incomplete, self.properties_malformed = counters, incomplete, properties_malformed
        self.partial: dict[int, list] = {}        # key -> [payload, bytes received, first piece]

    def read(self, frame) -> RetainedPiece | None:
        """`read_retained`, a frame that cannot be read counted and logged (None)."""
        try:
            return read_retained(frame)
        except WireError as exc:
            count = self.counters[self.incomplete] = self.counters[self.incomplete] + 1
            if not count & (count - 1):       # the 1st, 2nd, 4th ...: a flood cannot flood the log
                log.warning("retained frame dropped (%s); %d so far (%s)", exc, count, self.incomplete)
            return None

    def add(self, key: int, piece: RetainedPiece) -> tuple | None:
        """Fold in `piece` of the message `key` names; the message once it is whole."""
        if piece.whole:
            return self._message(piece, piece.piece)
        entry = self.partial.get(key)
        if entry is None:
            entry = self.partial[key] = [bytearray(piece.total), 0, piece]
        elif piece.offset + len(piece.piece) > len(entry[0]):
            self.counters[self.incomplete] += 1   # its fragments disagree on its length
            del self.partial[key]
            return None
        entry[0][piece.offset:piece.offset + len(piece.piece)] = piece.piece
        entry[1] += len(piece.piece)
        if entry[1] < len(entry[0]):
            return None
        del self.partial[key]
        return self._message(entry[2], bytes(entry[0]))

    def drop_partial(self) -> None:
        """Give up the messages not whole (what they lack will not come): counted."""
        self.counters[self.incomplete] += len(self.partial)
        self.partial.clear()

    def forget(self) -> None:
        """Forget the messages not whole, uncounted: nobody waits for them any more (the
        recovery ended with its receiver or its source)."""
        self.partial.clear()

    def _message(self, piece: RetainedPiece, payload: bytes) -> tuple:
        if piece.origin is not None:
            return piece.first, payload, piece.origin
        return piece.first, self._data(payload, piece.properties_size)

    def _data(self, payload: bytes, properties_size: int) -> bytes:
        if not properties_size:
            return payload
        try:
            return with_properties(payload, properties_size)
        except WireError:
            self.counters[self.properties_malformed] += 1
            return payload[:len(payload) - properties_size]
