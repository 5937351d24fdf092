"""Reading the records other portals address to this one (the egress side of every portal kind).

Both portal kinds take the same records from the rings — a stream's ADVERT, its FRAMES (plain,
or holding requests), its EOS, RESPONSEs to requests that came in by this portal, the
IMMEDIATE messages other portals flood, and late-join requests and answers relayed between an
endpoint's proxy source and the stream's ingress, and the origin's last sequence number (its
TSNI) behind a stream's frames — and differ only in where they send them (proxy sources in a
domain, or a peer link). `EgressRecords.on_record` decodes and checks each record once, counts
what is malformed or meant for a stream this portal does not know, and calls the portal's
`egress_advert`, `egress_frames`, `egress_request_frames`, `egress_eos`, `egress_response`,
`egress_immediate` and `egress_unicast` (unicast immediate messages on their way to another
domain). A response too large for one ring record comes in consecutive pieces from its ring,
put back together here (`RingResponsePieces`) before `egress_response` sees it.
`without_duplicates` takes out, counts and logs the frames a stream's `<sqn-window>` says this
portal sent already.
"""
from __future__ import annotations

import logging

from router.worker.records import (RECORD_ADVERT, RECORD_EOS, RECORD_FRAMES, RECORD_IMMEDIATE, RECORD_LATE_JOIN,
                                   RECORD_LATE_JOIN_ANSWER, RECORD_REQUEST_FRAMES, RECORD_RESPONSE, RECORD_RESPONSE_PIECE,
                                   RECORD_SEQUENCE_INFO, RECORD_UNICAST, RecordError, StreamAdvert, decode_eos,
                                   decode_frames, decode_immediate, decode_late_join, decode_late_join_answer,
                                   decode_response, decode_response_piece, decode_sequence_info)

log = logging.getLogger(__name__)


class RingResponsePieces:
    """Responses in pieces (RESPONSE_PIECE records), by the ring they come from: a ring's
    producer writes a response's pieces one after the other, so one is put together at a time
    per ring."""

    def __init__(self):
        self.partial: dict[int, tuple[tuple, bytearray]] = {}     # ring -> ((ip, port, qidx, total), bytes so far)

    def add(self, ring: int, ipaddr: str, port: int, qidx: int, offset: int, total: int, piece: bytes):
        """(ip, port, qidx, response) once its last piece came, else None; RecordError for a
        piece that does not follow the ones before it (what it had of that response is dropped)."""
        key = (ipaddr, port, qidx, total)
        if offset == 0:
            self.partial[ring] = (key, bytearray())
        had = self.partial.get(ring)
        if had is None or had[0] != key or len(had[1]) != offset:
            self.partial.pop(ring, None)
            raise RecordError(f"a piece at {offset} of a {total}-byte response for {ipaddr}:{port} without "
                              f"the pieces before it")
        had[1].extend(piece)
        if len(had[1]) < total:
            return None
        del self.partial[ring]
        return ipaddr, port, qidx, bytes(had[1])


class EgressRecords:
    """Mixed into a portal that has `name`, `counters`, `_rate_limited` and the egress_* methods."""

    # What a portal kind counts duplicates as (<sqn-window>): frames, bytes.
    DUPLICATE_COUNTERS = ("transport_topic_fragments_dropped_duplicate",
                          "transport_topic_fragment_bytes_dropped_duplicate")
    ring_response_pieces: RingResponsePieces | None = None

    def on_record(self, ring: int, record_type: int, payload, now: bool = False) -> None:
        """One record from a ring. `now`: the reader found nothing else to batch it with, so
        frames go out at once (as on_frames says)."""
        try:
            if record_type == RECORD_FRAMES or record_type == RECORD_REQUEST_FRAMES:
                self.on_frames(ring, record_type, *decode_frames(payload), now)
            elif record_type == RECORD_ADVERT:
                self.egress_advert(ring, StreamAdvert.decode(payload))
            elif record_type == RECORD_EOS:
                self.egress_eos(ring, decode_eos(payload))
            elif record_type == RECORD_RESPONSE:
                self.egress_response(ring, *decode_response(payload))
            elif record_type == RECORD_RESPONSE_PIECE:
                if self.ring_response_pieces is None:
                    self.ring_response_pieces = RingResponsePieces()
                whole = self.ring_response_pieces.add(ring, *decode_response_piece(payload))
                if whole is not None:
                    self.egress_response(ring, *whole)
            elif record_type == RECORD_IMMEDIATE:
                self.egress_immediate(ring, *decode_immediate(payload))
            elif record_type == RECORD_LATE_JOIN:
                self.late_join_request(ring, *decode_late_join(payload))
            elif record_type == RECORD_LATE_JOIN_ANSWER:
                self.late_join_answer(ring, *decode_late_join_answer(payload))
            elif record_type == RECORD_SEQUENCE_INFO:
                self.egress_sequence_info(ring, *decode_sequence_info(payload))
            elif record_type == RECORD_UNICAST:
                self.egress_unicast(ring, bytes(payload))
            else:
                raise RecordError(f"unknown ring record type {record_type}")
        except RecordError as err:
            self.counters.add("ring_records_malformed")
            log.warning("portal %s: %s", self.name, err)

    def on_frames(self, ring: int, record_type: int, stream_id: int, count: int, longest: int, frames,
                  now: bool = False) -> None:
        """A FRAMES or REQUEST_FRAMES record, its header already decoded. `now`: a portal in the
        same process handed it over, and its frames go out at once rather than into a batch
        (they are one read's worth: a batch already)."""
        send = self.egress_frames if record_type == RECORD_FRAMES else self.egress_request_frames
        if not send(ring, stream_id, count, longest, frames, now):
            self.counters.add_pair("transport_topic_fragments_dropped_error",
                                   "transport_topic_fragment_bytes_dropped_error", count, len(frames))

    def without_duplicates(self, window, advert: StreamAdvert, frames, count: int, longest: int):
        """A stream's frames less those `window` (router.portals.sequence_window) says this portal
        sent already, which are counted and logged (rate-limited): (frames, count)."""
        frames, count, duplicates, duplicate_bytes = window.admit(frames, count, longest)
        if duplicates:
            self.counters.add_pair(*self.DUPLICATE_COUNTERS, duplicates, duplicate_bytes)
            self._rate_limited("drops-duplicate", f"{duplicates} frames of topic {advert.topic} (from {advert.source}) "
                                                  "came again, by another path or from the source; dropped as "
                                                  "duplicates")
        return frames, count

    def egress_frames(self, ring: int, stream_id: int, count: int, longest: int, frames, now: bool = False) -> bool:
        """Send a stream's frames on (`now`: without batching them); False if the stream is unknown
        here (counted by the caller)."""
        raise NotImplementedError

    def egress_request_frames(self, ring: int, stream_id: int, count: int, longest: int, frames,
                              now: bool = False) -> bool:
        """Frames holding requests. A portal that makes proxy requests overrides it; otherwise
        the requests travel on as they are (their requester's address unchanged)."""
        return self.egress_frames(ring, stream_id, count, longest, frames, now)

    def egress_response(self, ring: int, ipaddr: str, port: int, qidx: int, data: bytes) -> None:
        """A response for a requester that this portal's domain holds."""
        raise NotImplementedError

    def egress_immediate(self, ring: int, origin_domain: int, has_topic: bool, frame: bytes) -> None:
        """A multicast immediate message another portal heard (router.portals.immediate)."""
        raise NotImplementedError

    def late_join_request(self, ring: int, stream_id: int, message: bytes) -> None:
        """Late-join requests a receiver behind portal `ring` sent for a stream this portal feeds
        (router.portals.late_join_relay). A portal that cannot relay them counts them."""
        self.counters.add("late_join_requests_not_relayed")

    def late_join_answer(self, ring: int, ipaddr: str, port: int, frames: bytes) -> None:
        """A source's answers to late-join requests this portal relayed, for a requester in its domain."""
        self.counters.add("late_join_requests_not_relayed")

    def egress_sequence_info(self, ring: int, stream_id: int, sqn: int) -> None:
        """The stream's origin said (TSNI) `sqn` is the last it sent: what this portal sends the
        stream to says it on, so a tail lost before here is told beyond."""
        raise NotImplementedError

    def egress_unicast(self, ring: int, frame: bytes) -> None:
        """A unicast immediate message for a domain this portal is the next hop toward
        (router.portals.unicast_routing)."""
        raise NotImplementedError

    def egress_advert(self, ring: int, advert: StreamAdvert) -> None:
        raise NotImplementedError

    def egress_eos(self, ring: int, stream_id: int) -> None:
        raise NotImplementedError
