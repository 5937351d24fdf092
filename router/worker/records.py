"""What workers put in the shared-memory rings: stream advertisements, data fragments, end of stream.

An ingress portal gives each source it receives a stream id and announces it in-band (ADVERT)
before any of its data, so an egress portal never sees data for a source it has not heard of.

Data travels as the LBMC frames themselves: one FRAMES record carries every frame of one stream
that one read from the source produced, byte for byte (the source's sequence numbers and
fragment headers unchanged: the DRO forwards fragments, it does not reassemble). The egress proxy
source advertises the origin's topic index when it can, so it appends the frames to its batch
without touching them; otherwise it rewrites the 4-byte index of each frame (`frame_offsets`).
A frame larger than the egress datagram size is dropped and counted.

    ADVERT  msgpack [stream_id, topic, otid, cost, hop_count, origin_domain_id, source,
                     origin_portal, origin_index]
    FRAMES  <III    stream_id, frame count, longest frame
                    the frame bytes (each frame's length is in its own header)
    EOS     <I      stream_id
    REQUEST_FRAMES  as FRAMES, for a read that holds at least one request frame: the egress
                    rewrites each request's REQUEST header to its own request port (a proxy
                    request), which plain FRAMES never need
    RESPONSE >IHI   requester ip, port, request index (as the requester sent them); the
                    response bytes. Written by the egress portal whose domain answered, addressed
                    to the portal the request came in by, which sends it on to the requester.
    RESPONSE_PIECE >IHIII  as RESPONSE, and the piece's offset and the whole response's length:
                    a response larger than a ring record may be (UM's go up to 64 MB) goes as
                    consecutive pieces, which the portal it is for puts back together.
    IMMEDIATE >IB   origin domain id, flags (1: has a topic); one multicast immediate message,
                    the LBMC message itself with ODOMAIN and CTXINST first in its header chain
                    (router.portals.immediate). Flooded to every other portal.
    LATE_JOIN <I    stream_id; an LBMC CONTROL message of late-join requests (LJI_REQ,
                    UME_RXREQ) a receiver sent a proxy source of that stream, as it sent them.
                    Written by the egress portal, addressed to the stream's ingress portal, which
                    asks the originating source (router.portals.late_join_relay).
    LATE_JOIN_ANSWER >IH  requester ip, port; the source's answers (UME_LJ_INFO, RETRANS frames)
                    as the requester must get them. Written back by the ingress portal.
    SEQUENCE_INFO <II  stream_id, sequence number: the origin's TSNI said this is the last it
                    sent (behind the frames before it). Egress proxy sources say it on in their
                    own TSNIs, so a tail lost anywhere on the way is told to the receivers.
    UNICAST         one unicast immediate message on its way to another domain, its LBMC frame
                    with DESTINATION first (router.portals.unicast_routing), addressed to the
                    portal that is the next hop toward that domain.

The ADVERT's last item says whether the origin offers late join (older writers leave it out).
"""
from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

import msgpack
import numpy as np

from router.um.wire._codec import TEXT_ERRORS

RECORD_ADVERT = 1
RECORD_FRAMES = 2
RECORD_EOS = 4
RECORD_REQUEST_FRAMES = 5
RECORD_RESPONSE = 6
RECORD_IMMEDIATE = 7
RECORD_LATE_JOIN = 8
RECORD_LATE_JOIN_ANSWER = 9
RECORD_SEQUENCE_INFO = 10
RECORD_UNICAST = 11
RECORD_RESPONSE_PIECE = 12

FRAMES_HEADER = struct.Struct("<III")
EOS_RECORD = struct.Struct("<I")
RESPONSE_HEADER = struct.Struct(">4sHI")     # requester ip (network order), port, request index
RESPONSE_PIECE_HEADER = struct.Struct(">4sHIII")  # as RESPONSE_HEADER; offset, whole length
IMMEDIATE_HEADER = struct.Struct(">IB")       # origin domain id, flags
IMMEDIATE_HAS_TOPIC = 0x01
LATE_JOIN_HEADER = struct.Struct("<I")        # stream id
ANSWER_HEADER = struct.Struct(">4sH")         # requester ip (network order), port
SEQUENCE_INFO_RECORD = struct.Struct("<II")   # stream id, the origin's last sequence number


class RecordError(ValueError):
    """A ring record that does not decode (a bug or a corrupted segment; counted, skipped)."""


@dataclass(frozen=True, slots=True)
class StreamAdvert:
    stream_id: int
    topic: str
    otid: bytes
    cost: int              # cost so far: the origin's advertised cost plus every portal crossed
    hop_count: int
    origin_domain_id: int
    source: str            # the source string seen at the ingress, for logs and monitoring
    origin_portal: str
    origin_index: int      # the topic index in the frames (the one the ingress joined)
    late_join: bool = False    # the origin offers late join: its ingress relays requests to it

    def encode(self) -> bytes:
        return msgpack.packb([self.stream_id, self.topic, self.otid, self.cost, self.hop_count,
                              self.origin_domain_id, self.source, self.origin_portal, self.origin_index,
                              self.late_join], use_bin_type=True,
                             unicode_errors=TEXT_ERRORS)

    @classmethod
    def decode(cls, data) -> "StreamAdvert":
        try:
            items = msgpack.unpackb(bytes(data), raw=False, unicode_errors=TEXT_ERRORS)
            advert = cls(*items)
        except Exception as err:    # msgpack raises several types for bad input
            raise RecordError(f"bad stream advertisement: {err}") from None
        if not isinstance(advert.topic, str) or not isinstance(advert.otid, bytes) or len(advert.otid) != 32:
            raise RecordError("bad stream advertisement: topic or OTID has the wrong type")
        return advert


def encode_frames(stream_id: int, frames: bytes, count: int, longest: int) -> bytes:
    return FRAMES_HEADER.pack(stream_id, count, longest) + frames


def decode_frames(payload) -> tuple[int, int, int, memoryview]:
    """(stream id, count, longest frame, frame bytes) of a FRAMES record."""
    if len(payload) < FRAMES_HEADER.size:
        raise RecordError(f"frames record of {len(payload)} bytes is shorter than its header")
    stream_id, count, longest = FRAMES_HEADER.unpack_from(payload)
    return stream_id, count, longest, payload[FRAMES_HEADER.size:]


def frame_offsets(frames) -> np.ndarray:
    """Where each LBMC frame starts (walking the msglen chain; only on the rare rewrite paths)."""
    offsets, position, end = [], 0, len(frames)
    while position + 4 <= end:
        offsets.append(position)
        length = (frames[position + 2] << 8) | frames[position + 3]
        if length < 4:
            raise RecordError(f"frame of length {length} at offset {position}")
        position += length
    return np.asarray(offsets, dtype=np.int64)


def decode_eos(payload) -> int:
    if len(payload) < EOS_RECORD.size:
        raise RecordError("end-of-stream record is too short")
    return EOS_RECORD.unpack_from(payload)[0]


def encode_response(ipaddr: str, port: int, qidx: int, data) -> bytes:
    return RESPONSE_HEADER.pack(socket.inet_aton(ipaddr), port, qidx) + bytes(data)


def decode_response(payload) -> tuple[str, int, int, bytes]:
    """(requester ip, port, request index, response bytes) of a RESPONSE record."""
    if len(payload) < RESPONSE_HEADER.size:
        raise RecordError(f"response record of {len(payload)} bytes is shorter than its header")
    raw_ip, port, qidx = RESPONSE_HEADER.unpack_from(payload)
    return socket.inet_ntoa(raw_ip), port, qidx, bytes(payload[RESPONSE_HEADER.size:])


def encode_response_piece(ipaddr: str, port: int, qidx: int, offset: int, total: int, piece) -> bytes:
    return RESPONSE_PIECE_HEADER.pack(socket.inet_aton(ipaddr), port, qidx, offset, total) + bytes(piece)


def decode_response_piece(payload) -> tuple[str, int, int, int, int, bytes]:
    """(requester ip, port, request index, offset, whole length, piece) of a RESPONSE_PIECE record."""
    if len(payload) < RESPONSE_PIECE_HEADER.size:
        raise RecordError(f"response piece record of {len(payload)} bytes is shorter than its header")
    raw_ip, port, qidx, offset, total = RESPONSE_PIECE_HEADER.unpack_from(payload)
    piece = bytes(payload[RESPONSE_PIECE_HEADER.size:])
    if offset + len(piece) > total:
        raise RecordError(f"response piece at {offset} of {len(piece)} bytes beyond its {total}-byte response")
    return socket.inet_ntoa(raw_ip), port, qidx, offset, total, piece


def encode_immediate(origin_domain: int, has_topic: bool, frame) -> bytes:
    return IMMEDIATE_HEADER.pack(origin_domain, IMMEDIATE_HAS_TOPIC if has_topic else 0) + bytes(frame)


def decode_immediate(payload) -> tuple[int, bool, bytes]:
    """(origin domain id, has a topic, the LBMC message) of an IMMEDIATE record."""
    if len(payload) < IMMEDIATE_HEADER.size + 4:
        raise RecordError(f"immediate record of {len(payload)} bytes is too short for its header and a message")
    origin_domain, flags = IMMEDIATE_HEADER.unpack_from(payload)
    return origin_domain, bool(flags & IMMEDIATE_HAS_TOPIC), bytes(payload[IMMEDIATE_HEADER.size:])


def encode_late_join(stream_id: int, message) -> bytes:
    return LATE_JOIN_HEADER.pack(stream_id) + bytes(message)


def decode_late_join(payload) -> tuple[int, bytes]:
    """(stream id, the LBMC control message of requests) of a LATE_JOIN record."""
    if len(payload) < LATE_JOIN_HEADER.size + 4:
        raise RecordError(f"late-join record of {len(payload)} bytes is too short for its header and a message")
    return LATE_JOIN_HEADER.unpack_from(payload)[0], bytes(payload[LATE_JOIN_HEADER.size:])


def encode_late_join_answer(ipaddr: str, port: int, frames) -> bytes:
    return ANSWER_HEADER.pack(socket.inet_aton(ipaddr), port) + bytes(frames)


def decode_late_join_answer(payload) -> tuple[str, int, bytes]:
    """(requester ip, port, the answer's LBMC frames) of a LATE_JOIN_ANSWER record."""
    if len(payload) < ANSWER_HEADER.size + 4:
        raise RecordError(f"late-join answer of {len(payload)} bytes is too short for its header and a frame")
    raw_ip, port = ANSWER_HEADER.unpack_from(payload)
    return socket.inet_ntoa(raw_ip), port, bytes(payload[ANSWER_HEADER.size:])


def decode_sequence_info(payload) -> tuple[int, int]:
    """(stream id, the origin's last sequence number) of a SEQUENCE_INFO record."""
    if len(payload) < SEQUENCE_INFO_RECORD.size:
        raise RecordError(f"sequence-info record of {len(payload)} bytes is shorter than {SEQUENCE_INFO_RECORD.size}")
    return SEQUENCE_INFO_RECORD.unpack_from(payload)
