"""The streams a portal feeds into its ring: one per originating source it receives.

Each stream is announced in-band (ADVERT) to the portals that should get it before any of its
data, then its frames, then EOS. Which portals get it follows the router's interest and routes
(router.portals.forwarding): when either changes the streams are re-masked — newcomers get the
ADVERT first, portals no longer on the path get EOS. A restarted worker is re-sent the ADVERTs of
every stream meant for it. Endpoint ingress (proxy receivers) and peer ingress (the link) share it.
"""
from __future__ import annotations

import itertools
import logging

from router.portals.forwarding import MAX_HOP_COUNT
from router.portals.proxy_requests import count_requests
from router.worker.records import RECORD_FRAMES, RECORD_REQUEST_FRAMES, StreamAdvert

log = logging.getLogger(__name__)


class Stream:
    __slots__ = ("stream_id", "advert", "mask", "client", "late_join")

    def __init__(self, stream_id: int, advert: StreamAdvert, mask: int, client, late_join=None):
        self.stream_id, self.advert, self.mask, self.client = stream_id, advert, mask, client
        self.late_join = late_join          # the origin's LATEJOIN option (router.portals.late_join_relay)


class StreamTable:
    def __init__(self, portal_name: str, view, datapath, counters, log_event):
        self.portal_name = portal_name
        self.view = view                        # router.portals.forwarding.ForwardingView
        self.datapath = datapath
        self.counters = counters
        self.log_event = log_event
        self.streams: dict[int, Stream] = {}
        self._ids = itertools.count(1)

    def begin(self, topic: str, otid: bytes, cost: int, hop_count: int, origin_domain: int, source: str,
              origin_index: int, client=None, late_join=None) -> Stream | None:
        """A new source: returns its stream (None if it has crossed too many routers)."""
        if hop_count >= MAX_HOP_COUNT:
            self.counters.add("streams_dropped_hop_count")
            self.log_event("hop-count-exceeded", f"source {source} of topic {topic} has crossed {hop_count} "
                                                 f"routers; not forwarded (a routing loop?)")
            return None
        stream_id = next(self._ids) & 0xFFFFFFFF
        advert = StreamAdvert(stream_id, topic, otid, cost, hop_count, origin_domain, source,
                              self.portal_name, origin_index, late_join is not None)
        stream = Stream(stream_id, advert, self.view.mask_for(topic, origin_domain), client, late_join)
        self.streams[stream_id] = stream
        self.counters.add("streams_in")
        if stream.mask:
            self.datapath.advert(stream.mask, advert)
        return stream

    def end(self, stream: Stream) -> None:
        if self.streams.pop(stream.stream_id, None) is not None and stream.mask:
            self.datapath.eos(stream.mask, stream.stream_id)

    def forward(self, stream: Stream, frames: bytes, count: int, longest: int,
                record_type: int = RECORD_FRAMES) -> None:
        """The frames one read brought for one stream: one ring record for all of them (counted
        after they are on their way: a portal in this process has sent them on by then)."""
        size = len(frames)
        if not stream.mask:
            self.counters.add_pair("transport_topic_fragments_rcvd", "transport_topic_fragment_bytes_rcvd",
                                   count, size)
            self.counters.add_pair("transport_topic_fragments_rcvd_unknown",
                                   "transport_topic_fragment_bytes_rcvd_unknown", count, size)
            return
        self.datapath.frames(stream.mask, stream.stream_id, frames, count, longest, stream.client, record_type)
        self.counters.add_pair("transport_topic_fragments_rcvd", "transport_topic_fragment_bytes_rcvd", count, size)
        self.counters.add_pair("transport_topic_fragments_forwarded", "transport_topic_fragment_bytes_forwarded",
                               count, size)

    def sequence_info(self, stream: Stream, sqn: int) -> None:
        """The origin's TSNI for the stream: behind its frames, to the portals that get them."""
        if stream.mask:
            self.datapath.sequence_info(stream.mask, stream.stream_id, sqn)

    def forward_requests(self, stream: Stream, frames: bytes, count: int, longest: int) -> None:
        """Frames of one read that hold requests: the egress makes each a proxy request."""
        requests, size = count_requests(frames)
        self.counters.add_pair("transport_topic_req_fragments_rcvd", "transport_topic_req_fragment_bytes_rcvd",
                               requests, size)
        self.forward(stream, frames, count, longest, RECORD_REQUEST_FRAMES)

    def remask(self) -> None:
        """Interest or routes changed: recompute each stream's portals."""
        for stream in self.streams.values():
            mask = self.view.mask_for(stream.advert.topic, stream.advert.origin_domain_id)
            added = mask & ~stream.mask
            removed = stream.mask & ~mask
            if added:
                self.datapath.advert(added, stream.advert)
            if removed:
                self.datapath.eos(removed, stream.stream_id)
            stream.mask = mask

    def readvertise_to(self, portal_bit: int) -> None:
        """A portal's worker (re)started: it must hear of every stream meant for it."""
        for stream in self.streams.values():
            if stream.mask & portal_bit:
                self.datapath.advert(portal_bit, stream.advert)

    def close(self) -> None:
        for stream in list(self.streams.values()):
            if stream.mask:
                self.datapath.eos(stream.mask, stream.stream_id)
        self.streams.clear()
