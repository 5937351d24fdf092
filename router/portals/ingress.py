"""The ingress side of a portal: proxy receivers, and the streams they feed into the rings.

A proxy receiver exists for a topic (or pattern) only while another portal has interest in it.
Each source it joins becomes a stream: announced in-band (ADVERT) to the interested portals before
its data, then its frames, then EOS. When a portal becomes interested in a topic whose streams are
already flowing (or a portal's worker restarts), the ADVERTs are re-sent to that portal alone.
"""
from __future__ import annotations

import itertools
import logging

from router.um.messages import BOS, EOS
from router.worker.records import StreamAdvert, encode_frames

log = logging.getLogger(__name__)


class Stream:
    __slots__ = ("stream_id", "advert", "mask", "joined")

    def __init__(self, stream_id: int, advert: StreamAdvert, mask: int, joined):
        self.stream_id, self.advert, self.mask, self.joined = stream_id, advert, mask, joined


class Ingress:
    def __init__(self, portal, context, datapath, counters):
        self.portal = portal                 # the EndpointPortal: name, cost, domain, masks
        self.context = context
        self.datapath = datapath
        self.counters = counters
        self.receivers: dict[str, object] = {}                  # topic -> proxy Receiver
        self.wildcards: dict[tuple[int, str], object] = {}      # (kind, pattern) -> proxy WildcardReceiver
        self.streams: dict[int, Stream] = {}                    # stream id -> stream
        self.stream_of_joined: dict[int, Stream] = {}           # id(joined source) -> stream
        self._ids = itertools.count(1)

    # -- proxy receivers follow the other portals' interest ------------------------------------
    def update(self, topics: set[str], patterns: set[tuple[int, str]]) -> None:
        for topic in topics - self.receivers.keys():
            self.receivers[topic] = self.context.receiver(topic, on_event=self._on_event, raw=True)
            self.portal.log_event("proxy-receiver-created", f"topic {topic}")
        for topic in self.receivers.keys() - topics:
            self.receivers.pop(topic).close()
            self.portal.log_event("proxy-receiver-deleted", f"topic {topic}")
        for key in patterns - self.wildcards.keys():
            kind = "pcre" if key[0] == 1 else "regex"
            self.wildcards[key] = self.context.wildcard_receiver(key[1], on_event=self._on_event,
                                                                 kind=kind, raw=True)
            self.portal.log_event("proxy-wildcard-receiver-created", f"{kind} pattern {key[1]}")
        for key in self.wildcards.keys() - patterns:
            self.wildcards.pop(key).close()
        self.counters.set("proxy_receivers", len(self.receivers) + len(self.wildcards))
        self.counters.set("receiver_topics", len(self.receivers))
        self.counters.set("receiver_pcre_patterns", sum(1 for k in self.wildcards if k[0] == 1))
        self.counters.set("receiver_regex_patterns", sum(1 for k in self.wildcards if k[0] == 2))
        self.remask()

    # -- streams -----------------------------------------------------------------------------------
    def _on_event(self, event) -> None:
        joined = event.joined
        if event.kind == BOS:
            self._begin(joined)
        elif event.kind == EOS:
            self._end(joined)

    def _begin(self, joined) -> None:
        candidate = joined.candidate
        if self.portal.egress_has_otid(candidate.otid):
            return          # our own proxy source in this domain: forwarding it would loop
        stream_id = next(self._ids) & 0xFFFFFFFF
        origin = candidate.domain_id if candidate.domain_id is not None else self.portal.domain_id
        advert = StreamAdvert(stream_id, joined.topic, candidate.otid, candidate.cost, candidate.hop_count,
                              origin, joined.source, self.portal.name, candidate.index)
        stream = Stream(stream_id, advert, self.portal.mask_for(joined.topic), joined)
        self.streams[stream_id] = stream
        self.stream_of_joined[id(joined)] = stream
        joined.forward = lambda frames, count, longest, s=stream: self._forward(s, frames, count, longest)
        self.counters.add("streams_in")
        if stream.mask:
            self.datapath.advert(stream.mask, advert)

    def _end(self, joined) -> None:
        stream = self.stream_of_joined.pop(id(joined), None)
        if stream is None:
            return
        del self.streams[stream.stream_id]
        if stream.mask:
            self.datapath.eos(stream.mask, stream.stream_id)

    def _forward(self, stream: Stream, frames: bytes, count: int, longest: int) -> None:
        """The frames one read brought for one stream: one ring record for all of them."""
        size = len(frames)
        self.counters.add_pair("transport_topic_fragments_rcvd", "transport_topic_fragment_bytes_rcvd", count, size)
        if not stream.mask:
            self.counters.add_pair("transport_topic_fragments_rcvd_unknown",
                                   "transport_topic_fragment_bytes_rcvd_unknown", count, size)
            return
        self.datapath.frames(stream.mask, encode_frames(stream.stream_id, frames, count, longest),
                             stream.joined.client)
        self.counters.add_pair("transport_topic_fragments_forwarded", "transport_topic_fragment_bytes_forwarded",
                               count, size)

    def remask(self) -> None:
        """Interest changed: recompute each stream's portals; newcomers get the ADVERT first."""
        for stream in self.streams.values():
            mask = self.portal.mask_for(stream.advert.topic)
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
        for receiver in list(self.receivers.values()) + list(self.wildcards.values()):
            receiver.close()
        self.receivers.clear()
        self.wildcards.clear()
