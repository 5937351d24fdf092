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

from router.eventlog import RateLimitedEvents
from router.ipc import bus_messages as bm
from router.monitor.counters import REQUEST_PORT_REFUSED_COUNTERS, ContinuedTotals
from router.portals.acl import PortalAccess
from router.portals.domain_routes import DomainRouteChannel
from router.portals.egress_records import EgressRecords
from router.portals.forwarding import ForwardingView
from router.portals.immediate import ImmediateFlood, carried, with_origin
from router.portals.ingress import Ingress
from router.portals.interest import DomainInterest, InterestTable, UseQuerySettings, pattern_problem
from router.portals.late_join_relay import LateJoinRelay
from router.portals.once_per_turn import OncePerTurn
from router.portals.proxy_requests import ProxyRequestTable, forward_response
from router.portals.rate_limit import RateLimiter
from router.portals.proxy_sources import ProxySourceTable
from router.portals.queue_episodes import QueueEpisodes, why_dropped
from router.portals.remote_interest import CheckPace, InterestAnnouncer, RemoteInterest
from router.portals.streams import StreamTable
from router.portals.unicast_routing import DomainRouteAnnouncements, UnicastRouting, reached_domains
from router.routing.topology import DOMAIN_ID_CONFLICT_REPORT_INTERVAL_MS
from router.um.context import Context
from router.um.immediate import ImmediateMessage
from router.um.unicast_immediate import Uim, destination_of
from router.um.wire.errors import WireError
from router.um.wire.lbmc import decode_lbmc
from router.um.requests import RequestOrigin, RequestPortUnavailable
from router.um.sequence_info import later
from router.worker.records import RecordError, frame_offsets
from router.um.wire.lbmr import (SRC_TYPE_TNWGD, TMR_FLAG_RESPONSE, TMR_FLAG_WILDCARD_PCRE,
                                 TMR_FLAG_WILDCARD_REGEX, TMR_LEAVE_TOPIC, TMR_TOPIC_USE,
                                 TRREQ_QUERY, TRREQ_WILDCARD_QUERY, GatewayContextInfo, GatewayInterest,
                                 InterestRecord, LbmrPacket, LocalDomainOption, RemoteDomainRoute, SrcIdOption,
                                 SrcTypeOption, Tmr,
                                 TopicManagement, TopicResolution, TopicResRequest, WildcardQuery)
from router.um.wire.lbmr_constants import (INTEREST_CANCEL, INTEREST_PATTERN, INTEREST_REFRESH, PATTERN_PCRE,
                                           PATTERN_REGEX)

log = logging.getLogger(__name__)

_KIND_OF_TMR_FLAGS = {0: bm.INTEREST_TOPIC, TMR_FLAG_WILDCARD_PCRE: bm.INTEREST_PCRE,
                      TMR_FLAG_WILDCARD_REGEX: bm.INTEREST_REGEX}
_TMR_FLAGS_OF_KIND = {kind: flags for flags, kind in _KIND_OF_TMR_FLAGS.items()}
_COUNT_NAMES = {bm.INTEREST_TOPIC: "topics", bm.INTEREST_PCRE: "pcre_patterns", bm.INTEREST_REGEX: "regex_patterns"}


class EndpointPortal(EgressRecords):
    kind = "endpoint"

    def __init__(self, config, index: int, portal_indexes: dict[str, int], loop, um_config,
                 bus, datapath, counters, log_event, node_id: int = 1, route_info=None):
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
        self.access = PortalAccess(config.acl, counters, log_event)
        resolution = config.topic_resolution
        self.interest = DomainInterest(_use_query_settings(resolution.topic_use_query),
                                       _use_query_settings(resolution.pattern_use_query))
        now = time.monotonic()
        self.use_query_limits = {
            bm.INTEREST_TOPIC: _limiter(resolution.topic_use_query.rate_limit, now),
            bm.INTEREST_PCRE: (pattern_limit := _limiter(resolution.pattern_use_query.rate_limit, now)),
            bm.INTEREST_REGEX: pattern_limit}
        # <domain-route>: when this portal tells the domain's applications the domains it reaches.
        self.domain_routes = DomainRouteAnnouncements(resolution.domain_route.min_interval / 1000,
                                                      resolution.domain_route.max_interval / 1000)
        self.domain_route_limit = _limiter(resolution.domain_route.rate_limit, now)
        self._domain_route_timer = None
        self.closed = False
        # Only the first snapshot is this worker's previous incarnation's interest. A later one (a
        # resync after falling behind the bus) can predate a cancel this worker has sent since:
        # taking it back would make a new receiver of that topic look already known.
        self._interest_restored = False
        self.interest_limits = {   # <remote-topic-interest>/<remote-pattern-interest>: to other routers
            bm.INTEREST_TOPIC: _limiter(resolution.remote_topic_interest.rate_limit, now),
            bm.INTEREST_PCRE: (remote_pattern_limit := _limiter(resolution.remote_pattern_interest.rate_limit, now)),
            bm.INTEREST_REGEX: remote_pattern_limit}
        self.view = ForwardingView(self.name, portal_indexes)
        self._follow_interest = OncePerTurn(loop, self._interest_changed)    # a burst of updates: one pass
        self.context = Context(config=um_config, loop=loop, packet_options=self._packet_options)
        self.context.add_lbmr_listener(self._on_lbmr)
        topic_um = getattr(config, "topic_um", None)       # the source context's options, by topic
        self.egress = ProxySourceTable(self.context, self.cost, self.domain_id, config.max_queue,
                                       config.source_deletion_delay / 1000, counters, log_event,
                                       topic_options=topic_um.for_topic if topic_um is not None else None,
                                       sqn_window=config.sqn_window)
        self.egress.retry_advert = self.egress_advert      # a failed proxy source, tried again
        self.requests = ProxyRequestTable()
        self.context.response_handler = self._response_in
        self.datapath = datapath
        datapath.backlog = self._egress_backlog
        self.streams = StreamTable(self.name, self.view, datapath, counters, log_event)
        self.ingress = Ingress(self, self.context, self.streams, counters)
        # Late join and OTR of proxy sources that keep nothing: asked of the origin.
        self.late_join_relay = LateJoinRelay(self.name, self.context, datapath, self.streams, counters)
        # Multicast immediate messages: every one heard here is flooded to the other portals.
        self.immediates = ImmediateFlood(index, portal_indexes, datapath, counters, log_event)
        self.context.add_immediate_listener(self._immediate_in)
        self.context.immediate.on_duplicate = self.immediates.duplicate
        # Interest to and from the other routers on this domain (multi-hop), and route-info.
        bounds, pattern_bounds = resolution.remote_topic_interest, resolution.remote_pattern_interest
        self.announcer = InterestAnnouncer(bounds.min_interval / 1000, bounds.max_interval / 1000,
                                           (pattern_bounds.min_interval / 1000, pattern_bounds.max_interval / 1000))
        topics, patterns = config.remote_topic, config.remote_pattern
        self.remote = RemoteInterest(
            CheckPace(topics.timeout / 1000, topics.check_interval / 1000, topics.max_topics),
            CheckPace(patterns.timeout / 1000, patterns.check_interval / 1000, patterns.max_patterns))
        self._emit_timer = None
        self._remote_timers = {group: loop.call_later(pace.check_interval, self._check_remote, group)
                               for group, pace in self.remote.paces.items()}
        propagation = (route_info.propagation_interval if route_info is not None else 1000) / 1000
        self.routes_channel = DomainRouteChannel(
            self.name, loop, self.context.channel.interface, node_id,
            route_info.timeout if route_info is not None else 4000, self.context.channel.send_packet,
            self._route_info_in, counters, log_event)
        self._ctxinfo_timer = loop.call_every(propagation, self._announce)
        loop.call_later(0, self._announce)
        self._conflicts_logged: dict[int, float] = {}
        self.counters.set("data_bytes_enqueued_limit", config.max_queue)
        self._interest_timer = None
        self._rate_limited = RateLimitedEvents(log_event)
        self.queue_episodes = QueueEpisodes(log_event)
        # Unicast immediate messages for other domains: this portal takes them at its request port.
        self.unicast = UnicastRouting(self.name, self.view, datapath, counters, self._rate_limited)
        self.context.uim_router = self._unicast_in
        self.context.on_bad_uim = self._bad_unicast
        self._sent_frames = self._sent_bytes = 0          # added to the counters once per ring batch
        self.worker_totals = ContinuedTotals(counters)
        self._queue_timer = loop.call_every(0.25, self.refresh_queue_counters)
        self._start_requests()
        self._schedule_interest_check()

    def _packet_options(self) -> list:
        return [SrcTypeOption(SRC_TYPE_TNWGD), LocalDomainOption(self.domain_id)]

    # -- learning this domain's interest ----------------------------------------------------------
    def _on_lbmr(self, packet: LbmrPacket, address) -> None:
        self.counters.add("lbmr_packets_rcvd")
        if any(isinstance(o, SrcTypeOption) and o.src_type == SRC_TYPE_TNWGD for o in packet.options):
            # Another router's proxies are not receivers of this domain; what it says to routers is.
            if not any(isinstance(o, SrcIdOption) and o.src_id == self.context.src_id for o in packet.options):
                self._from_router(packet, address)
            return
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
        if not self.access.interest_allowed(kind == bm.INTEREST_TOPIC, symbol):
            return
        if kind != bm.INTEREST_TOPIC and self._invalid_pattern(symbol, "a wildcard receiver in this domain"):
            return
        if self.interest.heard(kind, symbol, now):
            self.log_event("interest-added", f"{_COUNT_NAMES[kind][:-1]} {symbol}")
            self.bus.send(bm.Interest(self.name, self.domain_id, kind, symbol, bm.OP_ADD))
            self._count_interest()
            self._schedule_interest_check()

    # -- other routers on this domain -------------------------------------------------------------
    def _from_router(self, packet: LbmrPacket, address) -> None:
        for option in packet.options:
            if isinstance(option, LocalDomainOption) and option.domain_id != self.domain_id:
                self._domain_conflict(option.domain_id, f"{address[0]}:{address[1]}")
        body = packet.body
        if isinstance(body, GatewayInterest):
            self._heard_remote_interest(body)
        elif isinstance(body, GatewayContextInfo):
            self.routes_channel.heard(body, address[0])

    def _domain_conflict(self, heard: int, sender: str) -> None:
        now = time.monotonic()
        if now - self._conflicts_logged.get(heard, -1e9) >= DOMAIN_ID_CONFLICT_REPORT_INTERVAL_MS / 1000:
            self._conflicts_logged[heard] = now
            self.bus.send(bm.DomainConflict(self.name, self.domain_id, heard, sender))

    def _heard_remote_interest(self, body: GatewayInterest) -> None:
        now = time.monotonic()
        self.counters.add("interest_msgs_rcvd", len(body.records))
        for record in body.records:
            if record.domain_id == self.domain_id:
                continue         # this domain's own receivers: we hear their queries ourselves
            if record.flags & INTEREST_PATTERN:
                kind = bm.INTEREST_PCRE if record.pattern_type == PATTERN_PCRE else bm.INTEREST_REGEX
            else:
                kind = bm.INTEREST_TOPIC
            if not self.access.interest_allowed(kind == bm.INTEREST_TOPIC, record.symbol):
                continue
            if kind != bm.INTEREST_TOPIC and self._invalid_pattern(record.symbol, "another router"):
                continue
            item = (kind, record.symbol, record.domain_id)
            if record.flags & INTEREST_CANCEL:
                if self.remote.cancel(item):
                    self.bus.send(bm.Interest(self.name, record.domain_id, kind, record.symbol, bm.OP_CANCEL))
            elif self.remote.heard(item, now):
                self.log_event("interest-added", f"{_COUNT_NAMES[kind][:-1]} {record.symbol} for domain "
                                                 f"{record.domain_id} (from another router)")
                self.bus.send(bm.Interest(self.name, record.domain_id, kind, record.symbol, bm.OP_ADD))

    def _invalid_pattern(self, pattern: str, heard_from: str) -> bool:
        """A pattern that does not compile: counted, logged (rate-limited), never interest."""
        problem = pattern_problem(pattern)
        if problem is None:
            return False
        self.counters.add("patterns_invalid")
        self._rate_limited("pattern-invalid", f"pattern {pattern!r} from {heard_from} is not a valid regular "
                                              f"expression ({problem}); ignored")
        return True

    def _check_remote(self, group: str) -> None:
        """One pass of `<remote-topic>` (or `<remote-pattern>`) checks, then the next."""
        if self.closed:
            return
        wait = self.remote.paces[group].check_interval       # the next pass, if this one fails
        try:
            gone, wait = self.remote.check(group, time.monotonic())
            for kind, symbol, domain in gone:
                self.log_event("interest-removed", f"{_COUNT_NAMES[kind][:-1]} {symbol} for domain {domain} "
                                                   f"(not refreshed by another router)")
                self.bus.send(bm.Interest(self.name, domain, kind, symbol, bm.OP_CANCEL))
        finally:
            # Armed whatever failed (the loop counts and logs it): other routers' interest that
            # is no longer refreshed must still go, or its proxies stay for good.
            self._remote_timers[group] = self.loop.call_later(wait, self._check_remote, group)

    def _schedule_emit(self, delay: float | None = None) -> None:
        now = time.monotonic()
        if delay is None:
            delay = self.announcer.next_due(now)
            if self.announcer.deferred:     # held back by <rate-limit>: when it allows the next
                delay = max(delay, _first_allowed(self.interest_limits, self.announcer.deferred,
                                                  _INTEREST_RECORD_SIZE, now))
        self._emit_timer = _rearm(self.loop, self._emit_timer, delay, self._emit_interest)

    def _allow_interest(self, item) -> bool:
        kind, symbol, _ = item
        return self.interest_limits[kind].take(_INTEREST_RECORD_SIZE + len(symbol.encode("utf-8", "surrogateescape")), time.monotonic())

    def _emit_interest(self) -> None:
        """Interest this domain's other routers must hear on behalf of our other portals."""
        self._emit_timer = None
        try:
            send, first, cancels = self.announcer.due(time.monotonic(), self._allow_interest)
            first = set(first)
            records = [_interest_record(item, 0 if item in first else INTEREST_REFRESH) for item in send]
            records += [_interest_record(item, INTEREST_CANCEL) for item in cancels]
            budget = self.context.channel.max_datagram - 64
            batch, used = [], 0
            for record in records:
                size = _INTEREST_RECORD_SIZE + len(record.symbol.encode("utf-8", "surrogateescape"))
                if batch and used + size > budget:
                    self.context.channel.send_packet(LbmrPacket(GatewayInterest(batch)))
                    batch, used = [], 0
                batch.append(record)
                used += size
            if batch:
                self.context.channel.send_packet(LbmrPacket(GatewayInterest(batch)))
            self.counters.add("interest_msgs_sent", len(records))
        finally:
            # Armed whatever failed (the loop counts and logs it): the domain's other routers
            # forget interest that is not refreshed.
            self._schedule_emit()

    def _route_info_in(self, data: bytes) -> None:
        self.bus.send(bm.RouteInfoMessage(self.name, data))

    def _count_interest(self) -> None:
        for kind, name in _COUNT_NAMES.items():
            self.counters.set(f"local_interest_{name}", self.interest.count(kind))

    # -- keeping it alive: use queries, purge ------------------------------------------------------
    def _schedule_interest_check(self, delay: float | None = None) -> None:
        now = time.monotonic()
        if delay is None:
            delay = self.interest.next_due(now)
            if self.interest.deferred:      # queries held back by <rate-limit>: when it allows one
                delay = max(delay, _first_allowed(self.use_query_limits, self.interest.deferred, _TMR_SIZE, now))
        self._interest_timer = _rearm(self.loop, self._interest_timer, delay, self._check_interest)

    def _allow_use_query(self, kind: int, symbol: str) -> bool:
        return self.use_query_limits[kind].take(_TMR_SIZE + len(symbol.encode("utf-8", "surrogateescape")), time.monotonic())

    def _check_interest(self) -> None:
        self._interest_timer = None
        try:
            to_query, to_drop = self.interest.tick(time.monotonic(), self._allow_use_query)
            if self.interest.deferred:
                self.counters.add("use_queries_rate_limited")
            if to_query:
                tmrs = [Tmr(TMR_TOPIC_USE, _TMR_FLAGS_OF_KIND[kind], symbol) for kind, symbol in to_query]
                # Packed by size: UM contexts read no more than resolver_datagram_max_size of a datagram.
                self.context.channel.send_tmrs(tmrs)
                self.counters.add("use_queries_sent", len(tmrs))
            for kind, symbol in to_drop:
                self.log_event("interest-removed", f"{_COUNT_NAMES[kind][:-1]} {symbol}")
                self.bus.send(bm.Interest(self.name, self.domain_id, kind, symbol, bm.OP_CANCEL))
            if to_drop:
                # A dropped pattern may have covered any topic; a dropped topic only itself.
                self._drop_uncovered_proxies(None if any(kind != bm.INTEREST_TOPIC for kind, _ in to_drop)
                                             else {symbol for _, symbol in to_drop})
                self._count_interest()
        finally:
            # Armed whatever failed (the loop counts and logs it): interest this domain no longer
            # has must still be queried and dropped, or its proxies stay for good.
            self._schedule_interest_check()

    def _drop_uncovered_proxies(self, topics: set[str] | None) -> None:
        """Interest went: proxy sources (of `topics`, None: of any topic) that no remaining
        interest covers go now. One that a pattern, or another router's interest, still covers
        stays: the stream feeding it is still addressed here, and nothing would bring it back."""
        local = InterestTable()
        for kind in _COUNT_NAMES:
            for symbol in self.interest.symbols(kind):
                local.apply(bm.Interest(self.name, self.domain_id, kind, symbol, bm.OP_ADD))
        for kind, symbol, domain in self.remote.heard_at:
            local.apply(bm.Interest(self.name, domain, kind, symbol, bm.OP_ADD))
        for topic in self.egress.topics() if topics is None else topics & self.egress.topics():
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
            if self.closed:             # the series outlived the portal (a worker's closing drain)
                return
            self.context.channel.send_packet(LbmrPacket(TopicResRequest(TRREQ_QUERY | TRREQ_WILDCARD_QUERY)))
            self.counters.add("topic_resolution_requests_sent")
            if remaining > 1:
                self.loop.call_later(interval, request, remaining - 1)
        self.loop.call_later(0, request, count)

    # -- the router-wide view ----------------------------------------------------------------------
    def on_bus(self, message) -> None:
        if self.closed:                 # closed while the worker drains: no proxies on a closed context
            return
        changed = self.view.apply(message, self.datapath)
        if changed == "snapshot":
            if not self._interest_restored:
                self._restore_interest(message)
            self._interest_changed()
            self._domains_reached_changed()
        elif changed in ("interest", "routes"):
            self._follow_interest.request()
            if changed == "routes":
                self._domains_reached_changed()
        elif changed == "portal-up":
            self.streams.remask()
            self.streams.readvertise_to(1 << message.index)
        elif isinstance(message, bm.RouteInfoMessage) and message.portal == self.name:
            self.routes_channel.send(message.data)
        elif isinstance(message, bm.PortalDown):
            self.egress.end_streams_of_ring(message.index)
        elif isinstance(message, bm.PortalRemoved):
            self.view.forget_portal(message.portal)
            self.egress.end_streams_of_ring(message.index)
            self.datapath.detach(message.index)
            self._interest_changed()
            self._domains_reached_changed()
        elif isinstance(message, bm.SetCost) and message.portal == self.name:
            self.cost = message.cost
            self.egress.set_cost(message.cost)

    def _restore_interest(self, snapshot: bm.Snapshot) -> None:
        """A restarted worker takes back the interest its previous incarnation had shared: the
        domain's receivers are still there; use queries will confirm or expire them."""
        self._interest_restored = True
        now = time.monotonic()
        for interest in snapshot.interest:
            if interest.portal != self.name:
                continue
            if not self.access.interest_allowed(interest.kind == bm.INTEREST_TOPIC, interest.symbol):
                # The ACL changed (a reload restarts the portal): what it rejects now is not ours
                # to share; withdrawn at once, or the other portals pull it in until its use
                # queries (or the other routers' refreshes) are found unanswered.
                self.bus.send(bm.Interest(self.name, interest.domain_id, interest.kind, interest.symbol,
                                          bm.OP_CANCEL))
            elif interest.domain_id == self.domain_id:
                self.interest.heard(interest.kind, interest.symbol, now)
            else:
                self.remote.heard((interest.kind, interest.symbol, interest.domain_id), now)
        self._count_interest()
        self._schedule_interest_check()

    def _interest_changed(self) -> None:
        emitted = self.view.emitted()
        self.ingress.update(*self.view.pulled(emitted))
        remote = self.view.remote_counts()
        for kind, name in _COUNT_NAMES.items():
            self.counters.set(f"remote_interest_{name}", remote[kind])
        self.announcer.update(emitted, time.monotonic())
        self._schedule_emit()

    # -- records from the other portals' rings (the egress side) ----------------------------------
    def egress_frames(self, ring: int, stream_id: int, count: int, longest: int, frames, now: bool = False) -> bool:
        entry = self.egress.by_stream.get((ring, stream_id))
        if entry is None:
            return self.access.stream_rejected(ring, stream_id)     # not ours to send: not an error
        proxy, rewrite = entry
        frames, count = self.without_duplicates(proxy.window, proxy.advert, frames, count, longest)
        if not count:
            return True
        session = proxy.source.session
        if longest > session.datagram_max_size:
            self._send_fitting_frames(proxy, rewrite, frames)
            return True
        session.send_raw(frames, rewrite, count, now)
        self._sent_frames += count
        self._sent_bytes += len(frames)
        return True

    def egress_request_frames(self, ring: int, stream_id: int, count: int, longest: int, frames,
                              now: bool = False) -> bool:
        """Frames holding requests: each becomes a proxy request (router.portals.proxy_requests),
        answered at this portal's request port, then the frames go as any others."""
        if (ring, stream_id) not in self.egress.by_stream:
            return self.egress_frames(ring, stream_id, count, longest, frames, now)
        try:
            ipaddr, port = self.context.request_address()
        except OSError as err:
            self._rate_limited("request-port-unavailable", f"requests forwarded as they are, without a proxy request "
                                                           f"(no request port: {err})")
            return self.egress_frames(ring, stream_id, count, longest, frames, now)
        evicted = self.requests.evicted
        frames, requests, size = self.requests.rewrite(frames, ring, ipaddr, port)
        self.counters.add_pair("transport_topic_req_fragments_sent", "transport_topic_req_fragment_bytes_sent",
                               requests, size)
        self.counters.set("proxy_requests", len(self.requests))
        if self.requests.evicted != evicted:
            self._rate_limited("proxy-requests-evicted",
                               f"{self.requests.evicted} least recently used proxy requests forgotten "
                               f"(at most {self.requests.capacity} are kept); their late responses are dropped")
        return self.egress_frames(ring, stream_id, count, longest, frames, now)

    def _response_in(self, qidx: int, data: bytes, source: str) -> bool:
        """A response at this portal's request port: to the portal its request came in by."""
        if not forward_response(self.requests, qidx, data, self.datapath, self.counters):
            self._rate_limited("response-no-proxy-request", f"response from {source} to request index {qidx}, "
                                                            f"which has no proxy request here; dropped")
        return True                   # taken either way: the router's context sends no requests of its own

    # -- unicast immediate messages for other domains (router.portals.unicast_routing) -----------
    def _announce(self) -> None:
        """Every propagation interval: to the routers on this domain, where we take route-info."""
        self.routes_channel.announce()

    def _domains_reached_changed(self) -> None:
        """The routes changed: if the domains we reach did, the domain hears it at once."""
        self.domain_routes.update(reached_domains(self.view, self.name, self.domain_id), time.monotonic())
        self._schedule_domain_routes()

    def _schedule_domain_routes(self, delay: float | None = None) -> None:
        if self.closed:                 # a closing worker still handles bus messages for a while
            delay = None
        elif delay is None:
            delay = self.domain_routes.next_due(time.monotonic())
        if delay is None:
            if self._domain_route_timer is not None:
                self._domain_route_timer.cancel()
                self._domain_route_timer = None
            return
        self._domain_route_timer = _rearm(self.loop, self._domain_route_timer, delay, self._announce_domain_routes)

    def _announce_domain_routes(self) -> None:
        """To the domain's applications: the domains we reach and where we take their messages
        for them (LBMR REMOTE_DOMAIN_ROUTE), within <domain-route>'s rate limit."""
        self._domain_route_timer = None
        domains = self.domain_routes.domains
        if not domains and not self.domain_routes.withdrawing:
            return
        now = time.monotonic()
        size = _DOMAIN_ROUTE_SIZE + 4 * len(domains)
        if not self.domain_route_limit.take(size, now):
            self._schedule_domain_routes(max(self.domain_route_limit.wait(size, now), 0.001))
            return
        try:
            try:
                ipaddr, port = self.context.request_address()
            except RequestPortUnavailable as err:
                self._rate_limited("request-port-unavailable", f"unicast immediate messages are not routed: {err}")
            else:
                self.context.channel.send_packet(LbmrPacket(RemoteDomainRoute(ipaddr, port, list(domains))))
        finally:
            # Counted as sent and the next one armed whatever failed (the loop counts and logs
            # it): applications forget routes that are not announced again.
            self.domain_routes.sent(now)
            self._schedule_domain_routes()

    def _unicast_in(self, uim: Uim, peer: str) -> None:
        """A message at our request port for another domain (it carries DESTINATION): on by the
        next hop. From an application (no hop taken yet) this domain is where it came from; from
        another router on this (transit) domain, the first router said that already."""
        if uim.destination.domain_id == self.domain_id:         # ours: the sender did not know
            self.counters.add_pair("unicast_data_msgs_rcvd", "unicast_data_msg_bytes_rcvd", 1, len(uim.frame))
            self._unicast_out(uim.frame, uim.destination)
            return
        self.unicast.route(uim.frame, uim.destination, self.domain_id if uim.destination.hops_taken == 0 else None)

    def _bad_unicast(self, sender: str, why: str) -> None:
        self.counters.add("unicast_malformed")
        self._rate_limited("malformed-input", f"a unicast immediate message from {sender} does not parse ({why}); "
                                              "dropped")

    def egress_unicast(self, ring: int, frame: bytes) -> None:
        destination = destination_of(frame)       # checked whole by the portal it came in by
        if destination is None:
            self.counters.add("ring_records_malformed")
            log.warning("portal %s: a unicast message record without its DESTINATION", self.name)
            return
        self._unicast_out(frame, destination)

    def _unicast_out(self, frame: bytes, destination) -> None:
        """Into this domain: to the target itself, or (a transit domain) to the router here that
        reaches the target's domain."""
        address = (destination.ipaddr, destination.port)
        if destination.domain_id != self.domain_id:
            own = self.context.request_port.address if self.context.request_port is not None else None
            address = self.context.resolver.domain_routes.router_for(destination.domain_id, besides=own)
            if address is None:
                self.unicast.no_route(len(frame), "unicast-no-route",
                                      f"a unicast immediate message for domain {destination.domain_id}: no router "
                                      f"on domain {self.domain_id} says it reaches it; dropped")
                return
        # As it came: its numbers are its sender's.
        self.context.responder.send_frames(address, frame, self._unicast_outcome(len(frame)))

    def egress_response(self, ring: int, ipaddr: str, port: int, qidx: int, data: bytes) -> None:
        """A response another portal received for a requester in this domain."""
        self.context.respond(RequestOrigin(ipaddr, port, qidx), data, self._unicast_outcome(len(data)))

    def _unicast_outcome(self, size: int):
        """Counts a unicast data message (a response, a unicast immediate message) sent once its
        connection has taken it, or dropped (the requester or target gone, or too slow)."""
        def outcome(sent: bool) -> None:
            if sent:
                self.counters.add_pair("unicast_data_msgs_sent", "unicast_data_msg_bytes_sent", 1, size)
            else:
                self.counters.add_pair("unicast_data_msgs_dropped_error", "unicast_data_msg_bytes_dropped_error",
                                       1, size)
        return outcome

    def _immediate_in(self, message: ImmediateMessage) -> None:
        """A MIM heard in this domain (new to this portal: its context's delivery control dropped
        copies). One that no router carried yet starts here: this domain is its origin."""
        origin_domain = message.origin_domain if message.origin_domain is not None else self.domain_id or 0
        try:
            frame = with_origin(decode_lbmc(message.frame)[0], origin_domain, message.origin)
        except WireError as err:            # no room left in the message for the origin's headers
            self.immediates.too_large(message.topic is not None, len(message.frame), err)
            return
        self.immediates.heard(origin_domain, message.origin, message.sqn, message.topic is not None, frame,
                              check_duplicates=False)

    def egress_immediate(self, ring: int, origin_domain: int, has_topic: bool, frame: bytes) -> None:
        """Into this domain as a MIM of our context, unless the domain is where it came from or
        has it already (another router joining the same domains brought it first)."""
        if origin_domain == (self.domain_id or 0):
            return
        try:
            message, _, origin, _ = carried(frame)
        except WireError as err:
            raise RecordError(f"immediate record: {err}") from None
        channel = self.context.immediate
        if not channel.remember(origin, message.sqn):
            self.immediates.duplicate(len(frame))
            return
        self.immediates.send(channel.send_frames, has_topic, frame)

    def egress_advert(self, ring: int, advert) -> None:
        # The ingress addressed it to us from the router-wide interest and routes; when either
        # changes, the ingress re-masks and sends EOS.
        if self.access.stream_out_allowed(ring, advert.stream_id, advert.topic):
            proxy = self.egress.advertise(ring, advert)
            if proxy is not None and advert.late_join and self.config.late_join_provide != "never" \
                    and (proxy.source.late_join is None or self.config.late_join_forward):
                self.late_join_relay.offer(proxy)

    def late_join_request(self, ring: int, stream_id: int, message: bytes) -> None:
        self.late_join_relay.request_in(ring, stream_id, message)

    def late_join_answer(self, ring: int, ipaddr: str, port: int, frames: bytes) -> None:
        self.late_join_relay.answer_out(ipaddr, port, frames)

    def egress_eos(self, ring: int, stream_id: int) -> None:
        self.access.stream_ended(ring, stream_id)
        self.egress.end_stream(ring, stream_id)

    def egress_sequence_info(self, ring: int, stream_id: int, sqn: int) -> None:
        """The origin's last sequence number: the proxy source's TSNIs say it (router.um.sequence_info)."""
        entry = self.egress.by_stream.get((ring, stream_id))
        if entry is not None:
            source = entry[0].source
            source.upstream_last = later(source.upstream_last, sqn)

    def _egress_backlog(self) -> float | None:
        """None while the proxy sources' sends go through; else the time their receivers last
        took data (router.worker.datapath holds records in the rings meanwhile)."""
        latest = None
        for session in self.context.sessions.values():
            since = session.backlog()
            if since is None:
                return None
            latest = since if latest is None else max(latest, since)
        return latest

    def flush(self) -> None:
        """The rings are drained: send what the proxy sources have batched. Batches form while
        records keep coming and leave as soon as nothing else is waiting, so throughput and
        latency both win (the DRO's smart batching, always on)."""
        for session in self.context.sessions.values():
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
                session.send_raw(frames[start:end], rewrite, 1)
                self._sent_frames += 1
                self._sent_bytes += size

    def refresh_queue_counters(self) -> None:
        """Bytes waiting in proxy sources' connections (or held for their first receiver), and
        what they dropped ("would block")."""
        # Counted first by this worker's channel, context and sessions, which start from zero (a
        # restarted worker, a session made again after its last source closed): added as they grow.
        totals, context = self.worker_totals, self.context
        totals.update("lbmr_packets_sent", [(context.channel, context.channel.counters["packets_sent"])])
        totals.update("lbmr_malformed", [(context.channel, context.channel.counters["malformed"])])
        totals.update("transport_malformed", [(context, context.stream_counters["transport_malformed"])])
        immediate = context.immediate
        if immediate is not None:
            totals.update("immediate_malformed", [(immediate, immediate.counters["mim_malformed"]
                                                   + immediate.reassembly.counters.get("mim_fragments_malformed", 0))])
        port = context.request_port
        for name in REQUEST_PORT_REFUSED_COUNTERS:
            totals.update(name, [(port, port.counters[name])] if port is not None else [])
        # The port's callbacks are this worker's (responses forwarded, unicast immediate messages
        # routed): one that fails is caught and logged there, out of the loop's own count.
        totals.update("internal_errors", [(port, port.counters["callback_errors"])] if port is not None else [])
        enqueued = waiting = 0
        sessions = self.egress.sessions()
        for session in sessions:
            enqueued += session.queued_bytes()
            waiting += session.queued_for_receivers()
        self.queue_episodes.sample(waiting, time.monotonic())
        self.counters.set("data_bytes_enqueued", enqueued)
        self.counters.set_max("data_bytes_enqueued_max", enqueued)
        dropped_bytes = [(s, s.counters["dropped_would_block_bytes"]) for s in sessions]
        dropping = totals.grew("transport_topic_fragment_bytes_dropped_would_block", dropped_bytes)
        dropped = totals.update("transport_topic_fragment_bytes_dropped_would_block", dropped_bytes)
        totals.update("transport_topic_fragments_dropped_would_block",
                      [(s, s.counters["dropped_would_block_frames"]) for s in sessions])
        if dropped:
            so_far = self.counters.get("transport_topic_fragment_bytes_dropped_would_block")
            self._rate_limited("drops-would-block", f"{why_dropped(dropping)}: {so_far} bytes dropped "
                               f"so far (queue limit {self.config.max_queue} bytes)")

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
                "streams": sorted(({"topic": s.advert.topic, "source": s.advert.source, "to": bin(s.mask).count("1"),
                                    "origin_domain_id": s.advert.origin_domain_id, "hop_count": s.advert.hop_count}
                                   for s in self.streams.streams.values()), key=lambda d: (d["topic"], d["source"])),
                "remote_interest": sorted(f"{_COUNT_NAMES[k][:-1]} {s} for domain {d}"
                                          for k, s, d in self.remote.heard_at),
                "route_info_address": f"{self.routes_channel.address[0]}:{self.routes_channel.address[1]}",
                "routers_on_domain": sorted(f"{n.node_id:#x} at {n.address[0]}:{n.address[1]}"
                                            f"{'' if n.connected else ' (connecting)'}"
                                            for n in self.routes_channel.neighbors.values()),
                "interest_sent_to_routers": sorted(f"{_COUNT_NAMES[k][:-1]} {s} for domain {d}"
                                                   for k, s, d in self.announcer.items),
                # Unicast immediate messages: the domains this portal says it reaches, where it
                # takes messages for them, and the other routers' offers it has heard here.
                "unicast_domains": reached_domains(self.view, self.name, self.domain_id),
                "unicast_address": (f"{self.context.request_port.address[0]}:{self.context.request_port.address[1]}"
                                    if self.context.request_port is not None else None),
                "unicast_routers_on_domain": sorted(
                    f"{ip}:{port} reaches {sorted(domains)}"
                    for (ip, port), domains in self.context.resolver.domain_routes.live().items()
                    if self.context.request_port is None or (ip, port) != self.context.request_port.address),
            }
        return {"error": f"unknown query {what!r}"}

    def close(self) -> None:
        self.closed = True
        self._queue_timer.cancel()
        self._follow_interest.cancel()
        for timer in self._remote_timers.values():
            timer.cancel()
        self._ctxinfo_timer.cancel()
        for timer in (self._emit_timer, self._domain_route_timer):
            if timer is not None:
                timer.cancel()
        self.routes_channel.close()
        if self._interest_timer is not None:
            self._interest_timer.cancel()
        self.ingress.close()
        self.egress.close()
        self.context.close()


def _rearm(loop, timer, wait: float, callback):
    """Replace a pending timer; waits are capped so a clock oddity never parks a check for long."""
    if timer is not None:
        timer.cancel()
    return loop.call_later(min(wait, 60.0), callback)


def _interest_record(item, flags: int) -> InterestRecord:
    kind, symbol, domain = item
    if kind == bm.INTEREST_TOPIC:
        return InterestRecord(flags, 0, domain, symbol)
    return InterestRecord(flags | INTEREST_PATTERN, PATTERN_PCRE if kind == bm.INTEREST_PCRE else PATTERN_REGEX,
                          domain, symbol)


# Bytes a use query adds to an LBMR packet besides its name: the TMR header and the name's NUL.
_TMR_SIZE = 5
# The same for a gateway interest record (router.um.wire.lbmr_gateway): its header and the NUL.
_INTEREST_RECORD_SIZE = 9
_DOMAIN_ROUTE_SIZE = 16          # REMOTE_DOMAIN_ROUTE before its domains (spec/wire.md, LBMR ext 0x06)


def _first_allowed(limits: dict, kinds, size: int, now: float) -> float:
    """Seconds until the first of the held-back kinds' limits lets one more through (only
    theirs: a kind with room to spare must not make the check spin)."""
    return max(min(limits[kind].wait(size, now) for kind in kinds), 0.001)


def _limiter(rate_limit, now: float) -> RateLimiter:
    return RateLimiter(rate_limit.bps, rate_limit.objects_per_second, now)


def _use_query_settings(query) -> UseQuerySettings:
    return UseQuerySettings(query.periodic_interval / 1000, query.timeout / 1000, query.max)
