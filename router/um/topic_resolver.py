"""Topic resolution for one context: advertising sources, querying for receivers, answering others.

Runs on the context's loop thread only. It follows UM's behaviour (spec/dro.md §2.2, §6): sources
advertise on the initial/sustain schedule and answer TQRs and wildcard TQRs; receivers query on
theirs; use queries from routers get use-query responses; topic resolution requests get fresh
advertisements or use responses; a receiver that leaves says so when a router is listening.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import re
import time
from typing import TYPE_CHECKING, Callable

from router.um.hotlinks import EveryPathReceiver, joined_key
from router.um.receiver import Receiver, WildcardReceiver
from router.um.schedule import (ResolutionSchedule, advertisement_phases, query_phases,
                                wildcard_query_phases)
from router.um.unicast_immediate import DomainRoutes
from router.um.wildcard_patterns import WildcardPattern, compile_wildcard
from router.um.source_cache import CACHE_TIMEOUT, JOIN_SETTLE_LIMIT, JOIN_SETTLE_SECONDS, TopicSources
from router.um.wire.lbmr import (PATTERN_PCRE, PATTERN_REGEX, SRC_TYPE_TNWGD, TMR_FLAG_RESPONSE,
                                 TMR_FLAG_WILDCARD_PCRE, TMR_FLAG_WILDCARD_REGEX, TMR_LEAVE_TOPIC,
                                 TMR_TOPIC_USE, TRREQ_ADVERTISEMENT, TRREQ_QUERY,
                                 TRREQ_WILDCARD_QUERY, LbmrPacket, LocalDomainOption, RemoteDomainRoute, SrcTypeOption,
                                 Tmr, TopicManagement, TopicResolution, TopicResRequest, WcTqr,
                                 WildcardQuery)

if TYPE_CHECKING:
    from router.um.context import Context
    from router.um.source import Source

log = logging.getLogger(__name__)

# Topics whose advertisements the cache holds at most. Beyond it (a flood of advertisements of
# topics nobody here wants, for the five minutes the cache keeps them), the oldest topics nobody
# here receives are forgotten, a tenth at a time; one wanted later is asked for, as after expiry.
MAX_CACHED_TOPICS = 100_000

# Wildcard query patterns heard, compiled, remembered at most (the oldest forgotten first): every
# distinct pattern of every wildcard receiver the domain ever had would otherwise stay for good.
MAX_QUERY_PATTERNS = 10_000

_KIND_FLAG = {"pcre": TMR_FLAG_WILDCARD_PCRE, "regex": TMR_FLAG_WILDCARD_REGEX}
_KIND_TYPE = {"pcre": PATTERN_PCRE, "regex": PATTERN_REGEX}
_FINAL_ADVERTISEMENT_SPACING = 0.1
_CACHE_SWEEP_SECONDS = 60.0


class TopicResolver:
    def __init__(self, context: "Context", config):
        self.context = context
        self.loop = context.loop
        self.source_phases = advertisement_phases(lambda name: config.get("source", name))
        self.query_phases = query_phases(lambda name: config.get("receiver", name))
        self.wildcard_phases = wildcard_query_phases(lambda name: config.get("wildcard_receiver", name))
        self.cost_function: Callable | None = None
        self.sources: dict[str, list["Source"]] = {}
        self.source_schedules: dict["Source", ResolutionSchedule] = {}
        self.receivers: dict[str, list[Receiver]] = {}
        self.query_schedules: dict[str, ResolutionSchedule] = {}
        self.wildcards: list[WildcardReceiver] = []
        self.wildcard_schedules: dict[WildcardReceiver, ResolutionSchedule] = {}
        self.cache: dict[str, TopicSources] = {}
        self._cache_limit = MAX_CACHED_TOPICS      # raised while what is over it is all wanted
        self.pending_joins: dict[tuple[str, bytes], tuple] = {}     # -> (timer, first seen)
        self.query_patterns: dict[tuple[int, str], WildcardPattern | None] = {}
        self.interest_heard: dict[str, float] = {}      # topic of ours -> when a receiver last asked for it
        self.gateway_seen = False
        self.domain_id: int | None = None
        self.domain_routes = DomainRoutes()        # routers that take unicast immediate messages on
        self.listeners: list[Callable[[LbmrPacket, tuple], None]] = []
        self.counters = {"tirs_received": 0, "tqrs_received": 0, "wc_tqrs_received": 0,
                         "use_queries_answered": 0, "final_advertisements_received": 0,
                         "bad_patterns": 0, "resolver_cache_evictions": 0}
        self._timer = None
        self._timer_due: float | None = None
        # The schedules in order of when they are next due: (due, sequence, group, key, schedule),
        # one place per send that is due (a place whose schedule sent since, or went, is stale and
        # skipped). A tick looks only at the schedules whose time came, and arming the next one at
        # the first: a walk over every schedule at each made thousands of receivers (a router's
        # proxy receivers, an application starting) cost N² steps in their initial phase.
        self._dues: list = []
        self._due_sequence = itertools.count()
        self._groups = (self.source_schedules, self.query_schedules, self.wildcard_schedules)
        self.finals_pending = 0                  # final advertisements scheduled, not sent yet
        self._after_finals: list[Callable[[], None]] = []
        self._sweep = self.loop.call_every(_CACHE_SWEEP_SECONDS, self.expire_cache)

    def close(self) -> None:
        """Stop the timers (a router's contexts share the worker's loop, which goes on)."""
        self._sweep.cancel()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_due = None

    # -- registration (loop thread) ----------------------------------------------------------------
    def add_source(self, source: "Source") -> None:
        self.sources.setdefault(source.topic, []).append(source)
        self._track(_SOURCES, source, ResolutionSchedule(self.source_phases, time.monotonic()))
        self._reschedule()

    def readvertise(self, source: "Source") -> None:
        if source in self.source_schedules:
            self.context.channel.send_resolution(tirs=[source.current_tir()])

    def remove_source(self, source: "Source", final_advertisements: int) -> None:
        self.source_schedules.pop(source, None)
        topic_sources = self.sources.get(source.topic, [])
        if source in topic_sources:
            topic_sources.remove(source)
        if not topic_sources:
            self.sources.pop(source.topic, None)
            self.interest_heard.pop(source.topic, None)
        final = source.final_tir()
        self.finals_pending += final_advertisements
        for n in range(final_advertisements):
            self.loop.call_later(n * _FINAL_ADVERTISEMENT_SPACING, self._send_final, final)

    def _send_final(self, final) -> None:
        self.context.channel.send_resolution(tirs=[final])
        self.finals_pending -= 1
        if not self.finals_pending:
            waiting, self._after_finals = self._after_finals, []
            for callback in waiting:
                callback()

    def after_final_advertisements(self, callback: Callable[[], None]) -> None:
        """Call `callback` once every final advertisement scheduled has gone out (at once if none
        is): what closes the context closes the resolver socket only then."""
        if self.finals_pending:
            self._after_finals.append(callback)
        else:
            callback()

    def add_receiver(self, receiver: Receiver) -> None:
        self.receivers.setdefault(receiver.topic, []).append(receiver)
        if receiver.query and receiver.topic not in self.query_schedules:
            self._track(_QUERIES, receiver.topic, ResolutionSchedule(self.query_phases, time.monotonic()))
            self._reschedule()
        cached = self.cache.get(receiver.topic)
        if cached is not None:
            # Known sources are joined after the settle time too: the answers to this receiver's
            # first query may still bring a cheaper path for the same OTID.
            for otid in cached.otids():
                if cached.best(otid) is not None:
                    self._schedule_join(receiver.topic, otid)

    def remove_receiver(self, receiver: Receiver) -> None:
        receivers = self.receivers.get(receiver.topic, [])
        if receiver in receivers:
            receivers.remove(receiver)
        if not any(r.query for r in receivers):
            self.query_schedules.pop(receiver.topic, None)
        if not receivers:
            self.receivers.pop(receiver.topic, None)
            if self.gateway_seen and receiver.query:
                # Routers drop interest at once instead of waiting for unanswered use queries.
                self._send_tmrs([Tmr(TMR_LEAVE_TOPIC, 0, receiver.topic)])

    def add_wildcard(self, wildcard: WildcardReceiver) -> None:
        self.wildcards.append(wildcard)
        self._track(_WILDCARDS, wildcard, ResolutionSchedule(self.wildcard_phases, time.monotonic()))
        self._reschedule()
        for topic, cached in self.cache.items():
            if wildcard.matches(topic):
                receiver = wildcard._receiver_for(topic)
                self.add_receiver(receiver)

    def remove_wildcard(self, wildcard: WildcardReceiver) -> None:
        if wildcard in self.wildcards:
            self.wildcards.remove(wildcard)
        self.wildcard_schedules.pop(wildcard, None)
        if self.gateway_seen:
            self._send_tmrs([Tmr(TMR_LEAVE_TOPIC, _KIND_FLAG[wildcard.kind], wildcard.pattern)])

    # -- packets -----------------------------------------------------------------------------------
    def on_packet(self, packet: LbmrPacket, address: tuple) -> None:
        for option in packet.options:
            if isinstance(option, SrcTypeOption) and option.src_type == SRC_TYPE_TNWGD:
                self.gateway_seen = True
            elif isinstance(option, LocalDomainOption):
                self.domain_id = option.domain_id
        body = packet.body
        if isinstance(body, TopicResolution):
            if body.tqrs:
                self.counters["tqrs_received"] += len(body.tqrs)
                self._answer_queries(body.tqrs)
            for tir in body.tirs:
                self._observe(tir)
        elif isinstance(body, WildcardQuery):
            self.counters["wc_tqrs_received"] += len(body.queries)
            self._answer_wildcard_queries(body.queries)
            for tir in body.tirs:
                self._observe(tir)
        elif isinstance(body, TopicManagement):
            self._answer_use_queries(body.tmrs)
        elif isinstance(body, TopicResRequest):
            self._answer_resolution_request(body.flags)
        elif isinstance(body, RemoteDomainRoute) and body.port:
            ipaddr = address[0] if body.ip == "0.0.0.0" else body.ip
            self.domain_routes.heard(ipaddr, body.port, body.domains)
        for listener in self.listeners:
            listener(packet, address)

    def _answer_queries(self, names) -> None:
        now = time.monotonic()
        for name in names:
            if name in self.sources:
                self.interest_heard[name] = now
        tirs = [s.current_tir() for name in names for s in self.sources.get(name, ())]
        if tirs:
            self.context.channel.send_resolution(tirs=tirs)

    def _answer_wildcard_queries(self, queries) -> None:
        tirs = []
        for query in queries:
            pattern = self._query_pattern(query.pattern_type, query.pattern)
            if pattern is None:
                continue
            timeouts = pattern.timeouts
            for topic, sources in self.sources.items():
                if pattern.search(topic):
                    self.interest_heard[topic] = time.monotonic()
                    tirs.extend(s.current_tir() for s in sources)
            if pattern.timeouts > timeouts:     # it took longer than any topic may take: bad
                self.counters["bad_patterns"] += 1
        if tirs:
            self.context.channel.send_resolution(tirs=tirs)

    def _query_pattern(self, pattern_type: int, text: str) -> WildcardPattern | None:
        key = (pattern_type, text)
        patterns = self.query_patterns
        if key in patterns:
            return patterns[key]
        try:
            compiled = compile_wildcard(text)
        except re.error:
            self.counters["bad_patterns"] += 1
            compiled = None
        if len(patterns) >= MAX_QUERY_PATTERNS:
            del patterns[next(iter(patterns))]
        patterns[key] = compiled
        return compiled

    def _answer_use_queries(self, tmrs) -> None:
        answers = []
        for tmr in tmrs:
            if tmr.tmr_type != TMR_TOPIC_USE or tmr.flags & TMR_FLAG_RESPONSE:
                continue
            kind_flags = tmr.flags & (TMR_FLAG_WILDCARD_PCRE | TMR_FLAG_WILDCARD_REGEX)
            if kind_flags:
                if any(w.pattern == tmr.name and _KIND_FLAG[w.kind] == kind_flags for w in self.wildcards):
                    answers.append(Tmr(TMR_TOPIC_USE, TMR_FLAG_RESPONSE | kind_flags, tmr.name))
            elif any(r.query for r in self.receivers.get(tmr.name, ())):
                answers.append(Tmr(TMR_TOPIC_USE, TMR_FLAG_RESPONSE, tmr.name))
        if answers:
            self.counters["use_queries_answered"] += len(answers)
            self._send_tmrs(answers)

    def _answer_resolution_request(self, flags: int) -> None:
        if flags & TRREQ_ADVERTISEMENT and self.source_schedules:
            self.context.channel.send_resolution(tirs=[s.current_tir() for s in self.source_schedules])
        answers = []
        if flags & TRREQ_QUERY:
            answers += [Tmr(TMR_TOPIC_USE, TMR_FLAG_RESPONSE, topic)
                        for topic, receivers in self.receivers.items() if any(r.query for r in receivers)]
        if flags & TRREQ_WILDCARD_QUERY:
            answers += [Tmr(TMR_TOPIC_USE, TMR_FLAG_RESPONSE | _KIND_FLAG[w.kind], w.pattern)
                        for w in self.wildcards]
        if answers:
            self._send_tmrs(answers)

    def _send_tmrs(self, tmrs: list[Tmr]) -> None:
        self.context.channel.send_tmrs(tmrs)

    # -- the resolver cache and joins ------------------------------------------------------------
    def _observe(self, tir) -> None:
        self.counters["tirs_received"] += 1
        topic = tir.topic
        cached = self.cache.get(topic)
        if cached is None:
            if len(self.cache) >= self._cache_limit:
                self._evict_unwanted_topics()
            cached = self.cache[topic] = TopicSources(topic, self.cost_function)
        kind, candidate = cached.observe(tir)
        if kind == "final":
            self.counters["final_advertisements_received"] += 1
            for receiver in self._receivers_of(topic):
                key = joined_key(receiver, candidate)
                joined = receiver.joined.get(key)
                if joined is not None and joined.candidate.session_key == candidate.session_key \
                        and joined.candidate.index == candidate.index:
                    receiver._end(key)
        elif kind == "new":
            self._schedule_join(topic, candidate.otid)

    def _receivers_of(self, topic: str) -> list[Receiver]:
        receivers = list(self.receivers.get(topic, ()))
        for wildcard in self.wildcards:
            if wildcard.matches(topic):
                receiver = wildcard.topics.get(topic)
                if receiver is None:
                    receiver = wildcard._receiver_for(topic)
                    self.receivers.setdefault(topic, []).append(receiver)
                if receiver not in receivers:
                    receivers.append(receiver)
        return receivers

    def _schedule_join(self, topic: str, otid: bytes) -> None:
        """Join after the advertisements of one OTID settle: each new path restarts the wait (up
        to JOIN_SETTLE_LIMIT), so a busy host answering a query slowly still gets its path compared."""
        key = (topic, otid)
        if not self._receivers_of(topic):
            return
        now = time.monotonic()
        pending = self.pending_joins.get(key)
        if pending is not None:
            timer, first = pending
            if now - first >= JOIN_SETTLE_LIMIT:
                return
            timer.cancel()
        else:
            first = now
        self.pending_joins[key] = (self.loop.call_later(JOIN_SETTLE_SECONDS, self._join, topic, otid), first)

    def _join(self, topic: str, otid: bytes) -> None:
        self.pending_joins.pop((topic, otid), None)
        cached = self.cache.get(topic)
        best = cached.best(otid) if cached else None
        if best is None:
            return
        for receiver in self._receivers_of(topic):
            if isinstance(receiver, EveryPathReceiver):     # a hotlink receiver: every router's copy
                for candidate in cached.all_candidates():
                    if candidate.otid == otid:
                        receiver._join(candidate)
            elif otid not in receiver.joined:
                receiver._join(best)

    def _evict_unwanted_topics(self) -> None:
        """The cache is full: forget the oldest topics no receiver of this context has (or is
        about to join), down to nine tenths of the limit."""
        target = MAX_CACHED_TOPICS * 9 // 10
        pending = {topic for topic, _ in self.pending_joins}
        evicted = 0
        for topic in list(self.cache):
            if len(self.cache) <= target:
                break
            if self.receivers.get(topic) or topic in pending:
                continue
            del self.cache[topic]
            evicted += 1
        # Wanted topics are kept however many: look again only a tenth further on, so a cache of
        # wanted topics is not scanned at every new advertisement.
        self._cache_limit = max(MAX_CACHED_TOPICS, len(self.cache) + MAX_CACHED_TOPICS // 10)
        self.counters["resolver_cache_evictions"] += evicted
        log.warning("%s: resolver cache full (%d topics): forgot the %d oldest advertised topics nobody here "
                    "receives (%d so far)", self.context.name, MAX_CACHED_TOPICS, evicted,
                    self.counters["resolver_cache_evictions"])

    def expire_cache(self, now: float | None = None) -> None:
        """Forget advertisements unheard for CACHE_TIMEOUT that nobody joined (source_cache), the
        topics left with none, and the per-topic receivers wildcard receivers made for them."""
        cutoff = (time.monotonic() if now is None else now) - CACHE_TIMEOUT
        pending = {topic for topic, _ in self.pending_joins}
        for topic, cached in list(self.cache.items()):
            cached.expire(cutoff)
            if not cached.empty or topic in pending:
                continue
            del self.cache[topic]
            receivers = self.receivers.get(topic, [])
            for receiver in [r for r in receivers if not r.query and not r.joined]:
                receivers.remove(receiver)
                for wildcard in self.wildcards:
                    if wildcard.topics.get(topic) is receiver:
                        del wildcard.topics[topic]
            if topic in self.receivers and not receivers:
                del self.receivers[topic]

    def source_ended(self, receiver: Receiver, joined) -> None:
        """A joined source's transport ended: forget that path and try the next cheapest one."""
        cached = self.cache.get(receiver.topic)
        if cached is not None:
            cached.forget(joined.candidate)
            if cached.best(joined.candidate.otid) is not None:
                self._schedule_join(receiver.topic, joined.candidate.otid)
        # As UM's receivers do, query again (sustaining phase): another path to the source, as
        # quiet as this one was and long forgotten by the cache, answers, and is joined.
        schedule = self.query_schedules.get(receiver.topic)
        if schedule is not None and not receiver.closed:
            due = schedule.next_due
            schedule.sustain(time.monotonic())
            if schedule.next_due != due:
                self._due_at(_QUERIES, receiver.topic, schedule)
            self._reschedule()

    # -- schedules ---------------------------------------------------------------------------------
    def _track(self, group: int, key, schedule: ResolutionSchedule) -> None:
        """A new schedule of `group` (sources, receivers' queries, wildcard receivers' queries)."""
        self._groups[group][key] = schedule
        self._due_at(group, key, schedule)

    def _due_at(self, group: int, key, schedule: ResolutionSchedule) -> None:
        if schedule.next_due is not None:
            heapq.heappush(self._dues, (schedule.next_due, next(self._due_sequence), group, key, schedule))

    def _is_current(self, entry: tuple) -> bool:
        due, _, group, key, schedule = entry
        return self._groups[group].get(key) is schedule and schedule.next_due == due

    def _reschedule(self) -> None:
        dues = self._dues
        while dues and not self._is_current(dues[0]):
            heapq.heappop(dues)                 # sent since, or gone
        if not dues:
            return
        due = dues[0][0]
        if self._timer is not None and self._timer_due is not None and self._timer_due <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_due = due
        self._timer = self.loop.call_later(due - time.monotonic(), self._tick)

    def _tick(self) -> None:
        self._timer = self._timer_due = None
        try:
            now = time.monotonic()
            taken: tuple[list, list, list] = ([], [], [])
            dues = self._dues
            while dues and dues[0][0] <= now:
                entry = heapq.heappop(dues)
                if self._is_current(entry):
                    _, _, group, key, schedule = entry
                    schedule.sent(now)
                    self._due_at(group, key, schedule)
                    taken[group].append(key)
            sources, topics, wildcards = taken
            tirs = [source.current_tir() for source in sources]
            if tirs or topics:
                self.context.channel.send_resolution(tqrs=topics, tirs=tirs)
            self.context.channel.send_wildcard_queries([WcTqr(w.pattern, _KIND_TYPE[w.kind]) for w in wildcards])
        finally:
            # Whatever failed (the loop counts and logs it), the next tick is armed: otherwise no
            # source of this context would advertise, and no receiver query, ever again. What
            # this tick took is not due again before its interval, so a fault that repeats does
            # not spin.
            self._reschedule()


_SOURCES, _QUERIES, _WILDCARDS = 0, 1, 2         # TopicResolver._groups
