"""The endpoint portal: the router's presence in one topic resolution domain.

It runs a UM context in the domain whose packets say "this is a router" (SRC_TYPE tnwgd and the
domain's id), learns the domain's interest from TQRs, wildcard TQRs, use-query responses and
leaves (ignoring other routers' proxies), keeps it alive with use queries and start-up topic
resolution requests, and shares it on the bus. Its ingress side (proxy receivers) and egress side
(proxy sources) are in ingress.py and proxy_sources.py.
"""
from __future__ import annotations

import logging
import time

import numpy as np

from router.ipc import bus_messages as bm
from router.portals.ingress import Ingress
from router.portals.interest import DomainInterest, InterestTable, UseQuerySettings
from router.portals.proxy_sources import ProxySourceTable
from router.um.context import Context
from router.worker.records import (RECORD_ADVERT, RECORD_EOS, RECORD_FRAMES, RecordError, StreamAdvert,
                                   decode_eos, decode_frames, frame_offsets)
from router.um.wire.lbmr import (SRC_TYPE_TNWGD, TMR_FLAG_RESPONSE, TMR_FLAG_WILDCARD_PCRE,
                                 TMR_FLAG_WILDCARD_REGEX, TMR_LEAVE_TOPIC, TMR_TOPIC_USE,
                                 TRREQ_QUERY, TRREQ_WILDCARD_QUERY, LbmrPacket, LocalDomainOption,
                                 SrcTypeOption, Tmr, TopicManagement, TopicResolution, TopicResRequest,
                                 WildcardQuery, PATTERN_PCRE)

log = logging.getLogger(__name__)

_KIND_OF_TMR_FLAGS = {0: bm.INTEREST_TOPIC, TMR_FLAG_WILDCARD_PCRE: bm.INTEREST_PCRE,
                      TMR_FLAG_WILDCARD_REGEX: bm.INTEREST_REGEX}
_TMR_FLAGS_OF_KIND = {kind: flags for flags, kind in _KIND_OF_TMR_FLAGS.items()}
_COUNT_NAMES = {bm.INTEREST_TOPIC: "topics", bm.INTEREST_PCRE: "pcre_patterns", bm.INTEREST_REGEX: "regex_patterns"}


class EndpointPortal:
    kind = "endpoint"

    def __init__(self, config, index: int, portal_indexes: dict[str, int], loop, um_config,
                 bus, datapath, counters, log_event):
        self.config = config
        self.name = config.name
        self.index = index
        self.portal_indexes = portal_indexes          # portal name -> ring/mask bit index
        self.domain_id = config.domain_id
        self.cost = config.cost
        self.loop = loop
        self.bus = bus
        self.counters = counters
        self.log_event = log_event
        resolution = config.topic_resolution
        self.interest = DomainInterest(_use_query_settings(resolution.topic_use_query),
                                       _use_query_settings(resolution.pattern_use_query))
        self.table = InterestTable()
        self.context = Context(config=um_config, loop=loop, packet_options=self._packet_options)
        self.context.add_lbmr_listener(self._on_lbmr)
        self.egress = ProxySourceTable(self.context, self.cost, self.domain_id, config.max_queue,
                                       config.source_deletion_delay / 1000, counters, log_event)
        self.datapath = datapath
        self.ingress = Ingress(self, self.context, datapath, counters)
        self.counters.set("data_bytes_enqueued_limit", config.max_queue)
        self._interest_timer = None
        self._last_logged: dict[str, float] = {}
        self._sent_frames = self._sent_bytes = 0          # added to the counters once per ring batch
        self._queue_timer = loop.call_every(0.25, self.refresh_queue_counters)
        self._start_requests()
        self._schedule_interest_check()

    def _packet_options(self) -> list:
        return [SrcTypeOption(SRC_TYPE_TNWGD), LocalDomainOption(self.domain_id)]

    # -- learning this domain's interest ----------------------------------------------------------
    def _on_lbmr(self, packet: LbmrPacket, address) -> None:
        self.counters.add("lbmr_packets_rcvd")
        if any(isinstance(o, SrcTypeOption) and o.src_type == SRC_TYPE_TNWGD for o in packet.options):
            return     # another router's proxies (or our own): not receivers of this domain
        body, now = packet.body, time.monotonic()
        if isinstance(body, TopicResolution):
            for topic in body.tqrs:
                self._heard(bm.INTEREST_TOPIC, topic, now)
        elif isinstance(body, WildcardQuery):
            for query in body.queries:
                kind = bm.INTEREST_PCRE if query.pattern_type == PATTERN_PCRE else bm.INTEREST_REGEX
                self._heard(kind, query.pattern, now)
        elif isinstance(body, TopicManagement):
            for tmr in body.tmrs:
                kind = _KIND_OF_TMR_FLAGS.get(tmr.flags & (TMR_FLAG_WILDCARD_PCRE | TMR_FLAG_WILDCARD_REGEX))
                if kind is None:
                    continue
                if tmr.tmr_type == TMR_TOPIC_USE and tmr.flags & TMR_FLAG_RESPONSE:
                    self._heard(kind, tmr.name, now)
                elif tmr.tmr_type == TMR_LEAVE_TOPIC:
                    self.interest.heard_leave(kind, tmr.name, now)
                    self._schedule_interest_check(0.0)

    def _heard(self, kind: int, symbol: str, now: float) -> None:
        if self.interest.heard(kind, symbol, now):
            self.log_event("interest-added", f"{_COUNT_NAMES[kind][:-1]} {symbol}")
            self.bus.send(bm.Interest(self.name, self.domain_id, kind, symbol, bm.OP_ADD))
            self._count_interest()
            self._schedule_interest_check()

    def _count_interest(self) -> None:
        for kind, name in _COUNT_NAMES.items():
            self.counters.set(f"local_interest_{name}", len(self.interest.symbols(kind)))

    # -- keeping it alive: use queries, purge ------------------------------------------------------
    def _schedule_interest_check(self, delay: float | None = None) -> None:
        if self._interest_timer is not None:
            self._interest_timer.cancel()
        wait = self.interest.next_due(time.monotonic()) if delay is None else delay
        self._interest_timer = self.loop.call_later(min(wait, 60.0), self._check_interest)

    def _check_interest(self) -> None:
        self._interest_timer = None
        to_query, to_drop = self.interest.tick(time.monotonic())
        if to_query:
            tmrs = [Tmr(TMR_TOPIC_USE, _TMR_FLAGS_OF_KIND[kind], symbol) for kind, symbol in to_query]
            for start in range(0, len(tmrs), 200):
                self.context.channel.send_packet(LbmrPacket(TopicManagement(tmrs[start:start + 200])))
            self.counters.add("use_queries_sent", len(tmrs))
        for kind, symbol in to_drop:
            self.log_event("interest-removed", f"{_COUNT_NAMES[kind][:-1]} {symbol}")
            self.bus.send(bm.Interest(self.name, self.domain_id, kind, symbol, bm.OP_CANCEL))
            if kind == bm.INTEREST_TOPIC:
                self.egress.drop_topic(symbol)
            else:
                self._drop_pattern_proxies()
        if to_drop:
            self._count_interest()
        self._schedule_interest_check()

    def _drop_pattern_proxies(self) -> None:
        """A pattern's interest went: proxy sources no remaining interest covers go too."""
        local = InterestTable()
        for kind in _COUNT_NAMES:
            for symbol in self.interest.symbols(kind):
                local.apply(bm.Interest(self.name, self.domain_id, kind, symbol, bm.OP_ADD))
        for topic in self.egress.topics():
            if not local.portals_for(topic):
                self.egress.drop_topic(topic)

    def _start_requests(self) -> None:
        """A brief series of topic resolution requests makes quiet receivers answer with use
        responses, so interest is known soon after start (`<initial-request>`)."""
        initial = self.config.topic_resolution.initial_request
        interval = initial.periodic_interval / 1000
        # `duration` has no documented unit; read as seconds, as its default (10) suggests.
        count = max(1, int(initial.duration / max(interval, 0.001)))

        def request(remaining: int) -> None:
            self.context.channel.send_packet(LbmrPacket(TopicResRequest(TRREQ_QUERY | TRREQ_WILDCARD_QUERY)))
            self.counters.add("topic_resolution_requests_sent")
            if remaining > 1:
                self.loop.call_later(interval, request, remaining - 1)
        self.loop.call_later(0, request, count)

    # -- the router-wide view ----------------------------------------------------------------------
    def on_bus(self, message) -> None:
        if isinstance(message, bm.Snapshot):
            for portal, index, _ in message.portals:
                self._portal_known(portal, index)
            self.table.load(message)
            self._restore_interest(message)
            self._interest_changed()
        elif isinstance(message, bm.Interest):
            if self.table.apply(message):
                self._interest_changed()
        elif isinstance(message, bm.PortalUp) and message.portal != self.name:
            self._portal_known(message.portal, message.index)
            self.ingress.remask()
            self.ingress.readvertise_to(1 << message.index)
        elif isinstance(message, bm.PortalDown):
            self.egress.end_streams_of_ring(message.index)
        elif isinstance(message, bm.PortalRemoved):
            self.portal_indexes.pop(message.portal, None)
            self.egress.end_streams_of_ring(message.index)
            self.datapath.detach(message.index)
            self.ingress.remask()
        elif isinstance(message, bm.SetCost) and message.portal == self.name:
            self.cost = message.cost
            self.egress.set_cost(message.cost)

    def _restore_interest(self, snapshot: bm.Snapshot) -> None:
        """A restarted worker takes back the interest its previous incarnation had shared: the
        domain's receivers are still there; use queries will confirm or expire them."""
        now = time.monotonic()
        for interest in snapshot.interest:
            if interest.portal == self.name:
                self.interest.heard(interest.kind, interest.symbol, now)
        self._count_interest()
        self._schedule_interest_check()

    def _portal_known(self, portal: str, index: int) -> None:
        """Another portal's worker is up: address it by its index and read its ring."""
        if portal != self.name:
            self.portal_indexes[portal] = index
            self.datapath.attach(index)

    def _interest_changed(self) -> None:
        topics, patterns = self.table.wanted_by_others(self.name)
        self.ingress.update(topics, patterns)
        remote = {kind: 0 for kind in _COUNT_NAMES}
        for topic, portals in self.table.topics.items():
            remote[bm.INTEREST_TOPIC] += bool(portals - {self.name})
        for (kind, _), portals in self.table.patterns.items():
            remote[kind] += bool(portals - {self.name})
        for kind, name in _COUNT_NAMES.items():
            self.counters.set(f"remote_interest_{name}", remote[kind])

    # -- records from the other portals' rings (the egress side) ----------------------------------
    def on_record(self, ring: int, record_type: int, payload) -> None:
        if record_type == RECORD_FRAMES:
            try:
                stream_id, count, longest, frames = decode_frames(payload)
            except RecordError as err:
                self.counters.add("ring_records_malformed")
                log.warning("portal %s: %s", self.name, err)
                return
            entry = self.egress.by_stream.get((ring, stream_id))
            if entry is None:
                self.counters.add_pair("transport_topic_fragments_dropped_error",
                                       "transport_topic_fragment_bytes_dropped_error", count, len(frames))
                return
            proxy, rewrite = entry
            session = proxy.source.session
            if longest > session.datagram_max_size:
                self._send_fitting_frames(proxy, rewrite, frames)
                return
            session.send_raw(frames, frame_offsets(frames) if rewrite is not None else None, rewrite)
            self._sent_frames += count
            self._sent_bytes += len(frames)
        elif record_type == RECORD_ADVERT:
            try:
                advert = StreamAdvert.decode(payload)
            except RecordError as err:
                self.counters.add("ring_records_malformed")
                log.warning("portal %s: %s", self.name, err)
                return
            # The ingress addressed it to us from the router-wide interest table; when that
            # interest goes, the ingress re-masks and sends EOS.
            self.egress.advertise(ring, advert)
        elif record_type == RECORD_EOS:
            self.egress.end_stream(ring, decode_eos(payload))
        else:
            self.counters.add("ring_records_malformed")

    def flush(self) -> None:
        """The rings are drained: send what the proxy sources have batched. Batches form while
        records keep coming and leave as soon as nothing else is waiting, so throughput and
        latency both win (the DRO's smart batching, always on)."""
        for session in self.egress.sessions():
            if session.batch:
                session.flush()
        if self._sent_frames:
            self.counters.add_pair("transport_topic_fragments_sent", "transport_topic_fragment_bytes_sent",
                                   self._sent_frames, self._sent_bytes)
            self._sent_frames = self._sent_bytes = 0

    def _send_fitting_frames(self, proxy, rewrite, frames) -> None:
        """Frames larger than this domain's datagram size are dropped (and counted), the rest sent."""
        session = proxy.source.session
        bounds = frame_offsets(frames).tolist() + [len(frames)]
        for start, end in zip(bounds, bounds[1:]):
            size = end - start
            if size > session.datagram_max_size:
                self.counters.add_pair("transport_topic_fragments_dropped_size_error",
                                       "transport_topic_fragment_bytes_dropped_size_error", 1, size)
                self._rate_limited("drops-size-error", f"a {size}-byte frame of {proxy.advert.topic} is larger "
                                   "than this domain's transport datagram size; dropped")
            else:
                session.send_raw(frames[start:end], np.zeros(1, dtype="<u4"), rewrite)
                self._sent_frames += 1
                self._sent_bytes += size

    def _rate_limited(self, name: str, text: str) -> None:
        now = time.monotonic()
        if now - self._last_logged.get(name, 0.0) >= 10.0:   # one line per burst; counters have the rest
            self._last_logged[name] = now
            self.log_event(name, text)

    def refresh_queue_counters(self) -> None:
        """Bytes waiting in proxy sources' connections, and what they dropped ("would block")."""
        enqueued = 0
        dropped_bytes = dropped_batches = 0
        for session in self.egress.sessions():
            enqueued += session.queued_bytes()
            dropped_bytes += session.counters["dropped_would_block_bytes"]
            dropped_batches += session.counters["dropped_would_block_batches"]
        self.counters.set("data_bytes_enqueued", enqueued)
        self.counters.set_max("data_bytes_enqueued_max", enqueued)
        previous = self.counters.get("transport_topic_fragment_bytes_dropped_would_block")
        if dropped_bytes > previous:
            self.counters.set("transport_topic_fragment_bytes_dropped_would_block", dropped_bytes)
            self.counters.set("transport_topic_fragments_dropped_would_block", dropped_batches)
            self._rate_limited("drops-would-block", f"a receiver is not keeping up: {dropped_bytes} bytes dropped "
                               f"so far (queue limit {self.config.max_queue} bytes)")

    def mask_for(self, topic: str) -> int:
        mask = 0
        for portal in self.table.portals_for(topic):
            if portal != self.name and portal in self.portal_indexes:
                mask |= 1 << self.portal_indexes[portal]
        return mask

    def egress_has_otid(self, otid: bytes) -> bool:
        return otid in self.egress.by_otid

    def query(self, what: str) -> dict:
        """What `routerctl topics` and the web monitor ask a worker (over the bus)."""
        if what == "topics":
            return {
                "local_interest": {name: sorted(self.interest.symbols(kind)) for kind, name in _COUNT_NAMES.items()},
                "proxy_receivers": sorted(self.ingress.receivers),
                "proxy_wildcard_receivers": sorted(f"{'pcre' if k == 1 else 'regex'}:{p}" for k, p in self.ingress.wildcards),
                "proxy_sources": sorted(({"topic": p.advert.topic, "source": p.advert.source,
                                          "cost": p.advert.cost + self.cost, "hop_count": p.advert.hop_count + 1,
                                          "origin_domain_id": p.advert.origin_domain_id,
                                          "receivers": p.source.receiver_count}
                                         for p in self.egress.by_otid.values()), key=lambda d: (d["topic"], d["source"])),
                "streams": sorted(({"topic": s.advert.topic, "source": s.advert.source, "to": bin(s.mask).count("1")}
                                   for s in self.ingress.streams.values()), key=lambda d: (d["topic"], d["source"])),
            }
        return {"error": f"unknown query {what!r}"}

    def close(self) -> None:
        self._queue_timer.cancel()
        if self._interest_timer is not None:
            self._interest_timer.cancel()
        self.ingress.close()
        self.egress.close()
        self.context.close()


def _use_query_settings(query) -> UseQuerySettings:
    return UseQuerySettings(query.periodic_interval / 1000, query.timeout / 1000, query.max)
