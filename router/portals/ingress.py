"""The ingress side of a portal: proxy receivers, and the streams they feed into the rings.

A proxy receiver exists for a topic (or pattern) only while another portal has interest in it
that the routes bring through this portal (router.portals.forwarding). Each source it joins
becomes a stream of router.portals.streams, which tells the right portals about it.
"""
from __future__ import annotations

import functools
import logging

from router.portals.acl import SourceFacts
from router.um.messages import BOS, EOS

log = logging.getLogger(__name__)


class Ingress:
    def __init__(self, portal, context, streams, counters):
        self.portal = portal                 # the EndpointPortal: name, domain, egress
        self.context = context
        self.streams = streams               # router.portals.streams.StreamTable
        self.counters = counters
        self.receivers: dict[str, object] = {}                  # topic -> proxy Receiver
        self.wildcards: dict[tuple[int, str], object] = {}      # (kind, pattern) -> proxy WildcardReceiver
        self.stream_of_joined: dict[int, object] = {}           # id(joined source) -> Stream
        # One stream per originating source: a topic receiver and a matching wildcard receiver
        # both join it, but only the first joined copy feeds the stream (the rest stand by).
        self.joined_of_otid: dict[bytes, list] = {}
        self.invalid_patterns: set[tuple[int, str]] = set()     # interest no receiver can have

    # -- proxy receivers follow the other portals' interest ------------------------------------
    def update(self, topics: set[str], patterns: set[tuple[int, str]]) -> None:
        for topic in topics - self.receivers.keys():
            self.receivers[topic] = self.context.receiver(topic, on_event=self._on_event, raw=True,
                                                          accept=self._accept)
            self.portal.log_event("proxy-receiver-created", f"topic {topic}")
        for topic in self.receivers.keys() - topics:
            self._close(self.receivers.pop(topic))
            self.portal.log_event("proxy-receiver-deleted", f"topic {topic}")
        for key in patterns - self.wildcards.keys():
            kind = "pcre" if key[0] == 1 else "regex"
            if key in self.invalid_patterns:
                continue
            try:
                self.wildcards[key] = self.context.wildcard_receiver(key[1], on_event=self._on_event,
                                                                     kind=kind, raw=True, accept=self._accept)
            except ValueError as err:   # the portals that heard it check; one that did not, not
                self.invalid_patterns.add(key)
                self.counters.add("patterns_invalid")
                self.portal.log_event("pattern-invalid", f"no proxy wildcard receiver for {kind} pattern "
                                                         f"{key[1]!r}: {err}")
                continue
            self.portal.log_event("proxy-wildcard-receiver-created", f"{kind} pattern {key[1]}")
        self.invalid_patterns &= patterns
        for key in self.wildcards.keys() - patterns:
            self._close(self.wildcards.pop(key))
        self.counters.set("proxy_receivers", len(self.receivers) + len(self.wildcards))
        self.counters.set("receiver_topics", len(self.receivers))
        self.counters.set("receiver_pcre_patterns", sum(1 for k in self.wildcards if k[0] == 1))
        self.counters.set("receiver_regex_patterns", sum(1 for k in self.wildcards if k[0] == 2))
        self.streams.remask()

    def _close(self, receiver) -> None:
        """Closing a receiver reports no EOS: end the streams of the sources it had joined first."""
        for topic_receiver in [receiver, *getattr(receiver, "topics", {}).values()]:
            for joined in list(getattr(topic_receiver, "joined", {}).values()):
                self._end(joined)
        receiver.close()

    # -- streams -----------------------------------------------------------------------------------
    def _on_event(self, event) -> None:
        joined = event.joined
        if event.kind == BOS:
            self._begin(joined)
        elif event.kind == EOS:
            self._end(joined)

    def _accept(self, candidate) -> bool:
        """Asked before a proxy receiver joins a source: never our own proxy sources in this
        domain (forwarding them would loop), never one the inbound ACL keeps in (no connection to
        it, nothing read, counted and logged once per topic)."""
        if self.portal.egress_has_otid(candidate.otid):
            return False
        return self.portal.access.source_allowed(candidate.topic, SourceFacts.of(candidate.transport),
                                                 candidate.source_string)

    def _begin(self, joined) -> None:
        candidate = joined.candidate
        if self.portal.egress_has_otid(candidate.otid):
            return          # a proxy source for it came after the join: forwarding it would loop
        standing = self.joined_of_otid.setdefault(candidate.otid, [])
        if any(other is joined for other in standing):
            return
        standing.append(joined)
        if len(standing) > 1:
            joined.forward = joined.forward_requests = _ignore   # a second copy of a source already streaming
            joined.forward_sequence_info = None
            return
        self._stream(joined)

    def _stream(self, joined) -> None:
        candidate = joined.candidate
        origin = candidate.domain_id if candidate.domain_id is not None else self.portal.domain_id
        stream = self.streams.begin(joined.topic, candidate.otid, candidate.cost, candidate.hop_count or 0, origin,
                                    joined.source, candidate.index, joined.client, candidate.late_join)
        if stream is None:
            return
        self.stream_of_joined[id(joined)] = stream
        self._feed(joined, stream)

    def _feed(self, joined, stream) -> None:
        """Where a joined source's frames go: its stream; reads holding requests say so, so the
        egress can make proxy requests of them (router.portals.proxy_requests)."""
        joined.forward = functools.partial(self.streams.forward, stream)
        joined.forward_requests = functools.partial(self.streams.forward_requests, stream)
        joined.forward_sequence_info = functools.partial(self.streams.sequence_info, stream)

    def _end(self, joined) -> None:
        standing = self.joined_of_otid.get(joined.candidate.otid, [])
        if any(other is joined for other in standing):
            standing[:] = [other for other in standing if other is not joined]
            if not standing:
                del self.joined_of_otid[joined.candidate.otid]
        stream = self.stream_of_joined.pop(id(joined), None)
        if stream is None:
            return
        if standing:                         # another copy of the source takes over the stream
            self.stream_of_joined[id(standing[0])] = stream
            self._feed(standing[0], stream)
            return
        self.streams.end(stream)

    def close(self) -> None:
        self.streams.close()
        self.stream_of_joined.clear()
        self.joined_of_otid.clear()
        for receiver in list(self.receivers.values()) + list(self.wildcards.values()):
            receiver.close()
        self.receivers.clear()
        self.wildcards.clear()


def _ignore(frames, count, longest) -> None:
    """Data of a standby copy of a source: the first copy carries it."""
