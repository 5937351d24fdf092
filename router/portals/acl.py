"""Access control lists at work (spec/dro.md §1.7, seed 001 §2.5): does a portal let a topic through?

A portal's `<inbound>` list is tested as a source's stream enters the router through it (rejected:
forwarded nowhere); its `<outbound>` list as a stream would leave through it (rejected: no proxy
source there, and the portal does not ask the others for the topic). The first ACE whose
conditions all hold decides; once a list exists, a topic no ACE accepts is rejected. A condition
that does not apply is ignored (counts as holding): transport conditions in an outbound list, or a
port condition for a transport that has no such port. Transport conditions describe the source in
the portal's own domain (for an endpoint; a peer link has none), not the originating one.

The configuration side (router.config.build_acl) has already compiled and checked every pattern
and normalised every value; this module only evaluates.
"""
from __future__ import annotations

import ipaddress
import logging
import operator
import socket
from dataclasses import dataclass

from router.config.model import Ace, Acl, Condition
from router.um.wildcard_patterns import compile_wildcard
from router.um.wire.lbmr_records import LbtipcInfo, LbtrmInfo, LbtruInfo, LbtsmxInfo, TcpInfo

log = logging.getLogger(__name__)

_COMPARE = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
            "gt": operator.gt, "ge": operator.ge}
_ADDRESSES = ("source-ip", "multicast-group")
_NUMBERS = ("udp-source-port", "udp-destination-port", "tcp-source-port", "xport-id")

# Decisions already logged, remembered at most (the oldest forgotten first): a pattern ACE rejects
# every topic of a family whose names come and go (one per request, per session) for the router's
# life. One forgotten and rejected again is logged again.
MAX_REPORTED_TOPICS = 10_000


@dataclass(frozen=True)
class SourceFacts:
    """What inbound transport conditions test: the source as seen in the portal's domain."""
    transport: str | None = None            # tcp | lbtru | lbtrm | lbtipc | lbtsmx
    source_ip: str | None = None
    multicast_group: str | None = None
    udp_source_port: int | None = None
    udp_destination_port: int | None = None
    tcp_source_port: int | None = None
    xport_id: int | None = None

    @classmethod
    def of(cls, info) -> "SourceFacts":
        """From a source's advertised transport information (router.um.wire.lbmr_records)."""
        if isinstance(info, TcpInfo):
            return cls("tcp", source_ip=info.ip, tcp_source_port=info.port)
        if isinstance(info, LbtruInfo):
            return cls("lbtru", source_ip=info.ip, udp_source_port=info.port)
        if isinstance(info, LbtrmInfo):
            return cls("lbtrm", source_ip=info.src_addr, multicast_group=info.mcast_addr,
                       udp_source_port=info.src_ucast_port, udp_destination_port=info.udp_dest_port)
        if isinstance(info, (LbtipcInfo, LbtsmxInfo)):
            return cls("lbtipc" if isinstance(info, LbtipcInfo) else "lbtsmx", xport_id=info.xport_id)
        return cls()


class AccessList:
    """One `<inbound>` or `<outbound>` list; no list (None or empty) lets everything through."""

    def __init__(self, aces: list[Ace] | None, direction: str):
        self.direction = direction
        self.aces = list(aces or ())
        self._addresses: dict[str, ipaddress.IPv4Address | None] = {}
        # Host names are resolved now, when the portal starts, so a slow resolver never stalls
        # the worker's loop when a source appears.
        for ace in self.aces:
            for condition in ace.conditions:
                if condition.kind in _ADDRESSES and direction == "inbound":
                    self._address(condition.value)

    @classmethod
    def of(cls, acl: Acl | None, direction: str) -> "AccessList":
        return cls(getattr(acl, direction) if acl is not None else None, direction)

    def __bool__(self) -> bool:
        return bool(self.aces)

    def accepts(self, topic: str, facts: SourceFacts | None = None) -> bool:
        """Does the first ACE that matches accept `topic` (from a source with `facts`)?
        Without facts (a decision by topic alone) source conditions are ignored."""
        if not self.aces:
            return True
        for ace in self.aces:
            if all(self._holds(condition, topic, facts) for condition in ace.conditions):
                return ace.match == "accept"
        return False                        # the implicit "reject all" at the end

    def _holds(self, condition: Condition, topic: str, facts: SourceFacts | None) -> bool:
        kind = condition.kind
        if kind == "topic":
            return topic == condition.value
        if kind in ("pcre-pattern", "regex-pattern"):
            return compile_wildcard(condition.value).search(topic) is not None    # as UM matches it
        if self.direction == "outbound" or facts is None:
            return True                     # inbound-only, or nothing to test it against
        if kind == "transport":
            if facts.transport is None:
                return True
            return _COMPARE[condition.comparison](facts.transport, condition.value)
        attribute = kind.replace("-", "_")
        value = getattr(facts, attribute, None)
        if value is None:
            return True                     # does not apply to this transport
        if kind in _ADDRESSES:
            wanted = self._address(condition.value)
            if wanted is None:
                return False                # a name that does not resolve matches no source
            return _COMPARE[condition.comparison](ipaddress.IPv4Address(value), wanted)
        if kind in _NUMBERS:
            return _COMPARE[condition.comparison](int(value), int(condition.value))
        return True

    def _address(self, text: str) -> ipaddress.IPv4Address | None:
        """An address, or a DNS name resolved once, at start (spec/dro.md: Gwd-9571-31 when it fails)."""
        if text not in self._addresses:
            try:
                self._addresses[text] = ipaddress.IPv4Address(socket.gethostbyname(text))
            except (OSError, ValueError) as err:
                log.warning("ACL host name '%s' does not resolve (%s): its condition matches no source", text, err)
                self._addresses[text] = None
        return self._addresses[text]


class PortalAccess:
    """A portal's two lists with the counting and logging endpoint and peer portals share.

    Inbound: a source (stream) entering through the portal. Outbound: a stream leaving through it,
    and the topic interest the portal passes on for its side (a topic its outbound list rejects is
    not asked of the other portals, so nobody pulls it in for this portal's sake). Pattern interest
    is passed on; what it brings is judged stream by stream, by topic."""

    def __init__(self, acl: Acl | None, counters, log_event):
        self.inbound = AccessList.of(acl, "inbound")
        self.outbound = AccessList.of(acl, "outbound")
        self.counters = counters
        self.log_event = log_event
        self.rejected_streams: set[tuple] = set()      # (ring, stream id) not let out
        self._reported: dict[tuple[str, str, str], None] = {}      # oldest first

    def interest_allowed(self, topic_kind: bool, symbol: str) -> bool:
        if not topic_kind or self.outbound.accepts(symbol):
            return True
        self._report("outbound", symbol, "its interest is not passed on")
        return False

    def source_allowed(self, topic: str, facts: SourceFacts | None = None, source: str = "") -> bool:
        if self.inbound.accepts(topic, facts):
            return True
        self.counters.add("acl_inbound_rejected")
        self._report("inbound", topic, "not forwarded", f" (source {source})" if source else "")
        return False

    def stream_out_allowed(self, ring: int, stream_id: int, topic: str) -> bool:
        if self.outbound.accepts(topic):
            return True
        self.rejected_streams.add((ring, stream_id))
        self.counters.add("acl_outbound_rejected")
        self._report("outbound", topic, "not forwarded out of this portal")
        return False

    def stream_rejected(self, ring: int, stream_id: int) -> bool:
        return (ring, stream_id) in self.rejected_streams

    def stream_ended(self, ring: int, stream_id: int) -> None:
        self.rejected_streams.discard((ring, stream_id))

    def _report(self, direction: str, topic: str, what: str, detail: str = "") -> None:
        """One log line per topic and decision (`detail`, e.g. the source, from the first time):
        interest and sources come back again and again; what is remembered is bounded by the
        topics an ACL rejects (and by MAX_REPORTED_TOPICS), not by the sources that come and go."""
        key = (direction, topic, what)
        if key not in self._reported:
            if len(self._reported) >= MAX_REPORTED_TOPICS:
                del self._reported[next(iter(self._reported))]
            self._reported[key] = None
            self.log_event("acl-rejected", f"{direction} ACL rejects topic {topic}: {what}{detail}")
