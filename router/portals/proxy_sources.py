"""The egress side of a portal: one proxy source per originating source, keyed by OTID.

A stream advertisement from another portal creates (or re-points) the proxy source for that OTID;
its TIRs carry the original OTID, the cost so far plus this portal's cost, one more hop, and the
origin's domain id. Data records become frames on the proxy source with the origin's sequence
numbers and fragmentation, each number at most once (router.portals.sequence_window). What
arrives before the interested receivers have connected (they connect on hearing the proxy's
advertisement) is held for them through the advertisement's initial phase, so a requester's
first request is not lost on a path still being built. When the stream ends the proxy source
waits `source-deletion-delay`, then sends final advertisements and goes away.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from router.config.model import SqnWindow
from router.portals.sequence_window import SequenceWindow
from router.um.config import ConfigError
from router.worker.records import StreamAdvert

log = logging.getLogger(__name__)

FINAL_ADVERTISEMENTS = 3
RETRY_INTERVAL = 1.0        # s between attempts at a proxy source that could not be created
# s a session closed with its last proxy source stays listed for the portal's counters at most:
# past every transport's closing drain (5 s), and a session whose close left bytes queued for
# good (a rate-limited one whose socket closed) is not kept for ever.
CLOSING_LISTED_LIMIT = 30.0


@dataclass(slots=True)
class ProxySource:
    advert: StreamAdvert
    source: object                        # router.um.source.Source
    window: SequenceWindow                # the origin's numbers it has sent (<sqn-window>)
    # (ring index, stream id) feeding it, in the order they came: the last is the newest way (a
    # reroute's), which may overlap an old one that ends only when a router on it notices.
    streams: dict = field(default_factory=dict)
    deletion_timer: object | None = None


class ProxySourceTable:
    def __init__(self, context, portal_cost: int, domain_id: int, max_queue: int,
                 deletion_delay: float, counters, log_event: Callable[[str, str], None], topic_options=None,
                 sqn_window: SqnWindow | None = None):
        self.context = context
        self.portal_cost = portal_cost
        self.domain_id = domain_id
        self.max_queue = max_queue
        self.deletion_delay = deletion_delay
        self.counters = counters
        self.log_event = log_event
        self.topic_options = topic_options           # topic -> its UMConfig (UM XML files), or None
        self.sqn_window = sqn_window or SqnWindow()
        self.smx_converted = False                   # said once per portal
        # Receivers hear a new advertisement within the source's initial advertising phase.
        self.hold_for_receiver = context.config.get("source", "resolver_advertisement_minimum_initial_duration") / 1000
        self.by_otid: dict[bytes, ProxySource] = {}
        self.by_stream: dict[tuple[int, int], tuple[ProxySource, int | None]] = {}   # -> (proxy, index to write)
        # Streams whose proxy source could not be created (no free port, say): tried again every
        # RETRY_INTERVAL until it is, or the stream ends; nothing else would announce them again.
        self.failed: dict[tuple[int, int], StreamAdvert] = {}
        self.retry_advert: Callable[[int, StreamAdvert], None] | None = None   # default: advertise
        self._retry_timer = None
        # Sessions closed with their last proxy source that still give their receivers time to
        # take what is queued: what those do not take is counted as dropped only then.
        self.closing: list[tuple[object, float]] = []       # (session, listed until)

    def advertise(self, ring: int, advert: StreamAdvert) -> ProxySource | None:
        """A stream was announced to this portal; returns its proxy source (None: not for us)."""
        if advert.origin_domain_id == self.domain_id:
            return None          # it came from this portal's own domain: never send it back
        proxy = self.by_otid.get(advert.otid)
        if proxy is None:
            try:
                options = self.topic_options(advert.topic) if self.topic_options is not None else None
                source = self.context.source(
                    advert.topic, transport=self._transport(options), options=options, otid=advert.otid,
                    cost=advert.cost + self.portal_cost,
                    hop_count=advert.hop_count + 1, domain_id=advert.origin_domain_id,
                    overflow="drop", max_queue=self.max_queue, final_advertisements=FINAL_ADVERTISEMENTS,
                    index=advert.origin_index, hold_for_receiver=self.hold_for_receiver)
            except (OSError, ValueError, ConfigError) as err:
                # No transport session (no free port, say): the stream's data is counted as
                # dropped due to error as it comes, and the stream is tried again (_retry).
                if (ring, advert.stream_id) not in self.failed:
                    self.log_event("proxy-source-failed", f"topic {advert.topic} for {advert.source}: {err}")
                self.failed[(ring, advert.stream_id)] = advert
                if self._retry_timer is None:
                    self._retry_timer = self.context.loop.call_later(RETRY_INTERVAL, self._retry)
                return None
            proxy = self.by_otid[advert.otid] = ProxySource(advert, source, SequenceWindow.configured(self.sqn_window))
            self.counters.add("proxy_sources_created")
            self.counters.set("proxy_sources", len(self.by_otid))
            self.log_event("proxy-source-created", f"topic {advert.topic} for {advert.source} "
                           f"(cost {advert.cost + self.portal_cost}, hop {advert.hop_count + 1})")
        else:
            if proxy.deletion_timer is not None:
                proxy.deletion_timer.cancel()    # the source came back (or a new path): keep it
                proxy.deletion_timer = None
            if (advert.cost, advert.hop_count) != (proxy.advert.cost, proxy.advert.hop_count):
                # Another path now feeds it: advertise that path's cost and hop count.
                proxy.source.set_cost(advert.cost + self.portal_cost, advert.hop_count + 1)
            proxy.advert = advert
        self.failed.pop((ring, advert.stream_id), None)
        proxy.streams.setdefault((ring, advert.stream_id))        # announced again: keeps its place
        # Frames keep the index the ingress saw; rewrite them only if this proxy could not have it.
        rewrite = None if proxy.source.index == advert.origin_index else proxy.source.index
        self.by_stream[(ring, advert.stream_id)] = (proxy, rewrite)
        return proxy

    def _transport(self, options) -> str | None:
        """None (the options' own transport), or "tcp" where they name LBT-SMX: the DRO's proxy
        sources never send LBT-SMX, they use TCP and say so."""
        config = options if options is not None else self.context.config
        if config.get("source", "transport").replace("-", "") != "lbtsmx":
            return None
        if not self.smx_converted:
            self.smx_converted = True
            self.log_event("proxy-transport-converted", "proxy sources configured for LBT-SMX use TCP instead")
        return "tcp"

    def _retry(self) -> None:
        self._retry_timer = None
        retry = self.retry_advert or self.advertise
        for key, advert in list(self.failed.items()):
            if self.failed.get(key) is advert:      # not ended meanwhile
                retry(key[0], advert)

    def end_stream(self, ring: int, stream_id: int) -> None:
        self.failed.pop((ring, stream_id), None)
        entry = self.by_stream.pop((ring, stream_id), None)
        if entry is None:
            return
        proxy = entry[0]
        proxy.streams.pop((ring, stream_id), None)
        if not proxy.streams and proxy.deletion_timer is None:
            proxy.deletion_timer = self.context.loop.call_later(self.deletion_delay, self._delete, proxy)

    def end_streams_of_ring(self, ring: int) -> None:
        """A portal's worker died: its streams end (it re-announces them when it is back)."""
        for key in [k for k in [*self.by_stream, *self.failed] if k[0] == ring]:
            self.end_stream(*key)

    def drop_topic(self, topic: str) -> None:
        """No receiver for `topic` remains in this domain: its proxy sources go now."""
        for proxy in [p for p in self.by_otid.values() if p.advert.topic == topic]:
            self._delete(proxy)
        for key in [k for k, advert in self.failed.items() if advert.topic == topic]:
            del self.failed[key]

    def _delete(self, proxy: ProxySource) -> None:
        if self.by_otid.get(proxy.advert.otid) is not proxy:
            return
        del self.by_otid[proxy.advert.otid]
        for key in list(proxy.streams):
            self.by_stream.pop(key, None)
        if proxy.deletion_timer is not None:
            proxy.deletion_timer.cancel()
        session = proxy.source.session
        proxy.source.close()
        if session.closed and all(session is not closing for closing, _ in self.closing):
            self.closing.append((session, time.monotonic() + CLOSING_LISTED_LIMIT))
        self.counters.add("proxy_sources_deleted")
        self.counters.set("proxy_sources", len(self.by_otid))
        self.log_event("proxy-source-deleted", f"topic {proxy.advert.topic} for {proxy.advert.source}")

    def set_cost(self, cost: int) -> None:
        """A reload changed this portal's cost: every proxy source re-advertises."""
        self.portal_cost = cost
        for proxy in self.by_otid.values():
            proxy.source.set_cost(proxy.advert.cost + cost, proxy.advert.hop_count + 1)

    def sessions(self) -> list:
        """The transport sessions the proxy sources share (usually one per portal), and those
        closed with their last proxy source while their receivers still had data queued: what
        those never take is counted as dropped when the close gives up on it, and the portal's
        counters must see that. A closed session is listed a last time once nothing is queued."""
        listed = {id(p.source.session): p.source.session for p in self.by_otid.values()}
        for session, _ in self.closing:
            listed.setdefault(id(session), session)
        now = time.monotonic()
        self.closing = [(session, until) for session, until in self.closing
                        if session.queued_for_receivers() and now < until]
        return list(listed.values())

    def topics(self) -> set[str]:
        return {p.advert.topic for p in self.by_otid.values()}

    def close(self) -> None:
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None
        self.failed.clear()
        for proxy in list(self.by_otid.values()):
            self._delete(proxy)
