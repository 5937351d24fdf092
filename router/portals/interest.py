"""Interest: which topics and patterns have receivers, in one domain and across the router.

`DomainInterest` is what one endpoint portal knows of its own domain, learned the DRO way
(spec/dro.md §2.2): TQRs and wildcard TQRs add and refresh interest, use-query responses confirm
it, a leave makes the portal check at once. Interest nobody confirms is queried `max` times,
`timeout` apart, then dropped. Pure logic: the caller passes the clock and sends what it returns.

`InterestTable` is the router-wide view replicated over the bus: for a topic, which portals want it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from router.ipc import bus_messages as bm


@dataclass(frozen=True, slots=True)
class UseQuerySettings:
    """`<topic-use-query>` / `<pattern-use-query>`, in seconds."""
    periodic_interval: float = 300.0
    timeout: float = 3.0
    max_unanswered: int = 5


@dataclass(slots=True)
class _Entry:
    confirmed: float                 # last TQR / response
    queried: float | None = None     # when the current round of use queries last sent one
    unanswered: int = 0


@dataclass
class DomainInterest:
    topic_queries: UseQuerySettings = field(default_factory=UseQuerySettings)
    pattern_queries: UseQuerySettings = field(default_factory=UseQuerySettings)
    entries: dict[tuple[int, str], _Entry] = field(default_factory=dict)   # (kind, symbol) -> state

    def heard(self, kind: int, symbol: str, now: float) -> bool:
        """A TQR, wildcard TQR or use-query response: returns True when the interest is new."""
        entry = self.entries.get((kind, symbol))
        if entry is None:
            self.entries[(kind, symbol)] = _Entry(now)
            return True
        entry.confirmed, entry.queried, entry.unanswered = now, None, 0
        return False

    def heard_leave(self, kind: int, symbol: str, now: float) -> None:
        """A receiver left; others may remain, so ask now rather than drop outright."""
        entry = self.entries.get((kind, symbol))
        if entry is not None:
            settings = self._settings(kind)
            entry.confirmed = now - settings.periodic_interval
            entry.unanswered = max(entry.unanswered, settings.max_unanswered - 1)
            entry.queried = None

    def _settings(self, kind: int) -> UseQuerySettings:
        return self.topic_queries if kind == bm.INTEREST_TOPIC else self.pattern_queries

    def tick(self, now: float) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
        """Returns (to query now, to drop now)."""
        to_query, to_drop = [], []
        for key, entry in self.entries.items():
            settings = self._settings(key[0])
            if now - entry.confirmed < settings.periodic_interval:
                continue
            if entry.queried is not None and now - entry.queried < settings.timeout:
                continue
            if entry.queried is not None:
                entry.unanswered += 1
            if entry.unanswered >= settings.max_unanswered:
                to_drop.append(key)
                continue
            entry.queried = now
            to_query.append(key)
        for key in to_drop:
            del self.entries[key]
        return to_query, to_drop

    def next_due(self, now: float) -> float:
        """Seconds until `tick` could have something to do."""
        waits = []
        for (kind, _), entry in self.entries.items():
            settings = self._settings(kind)
            if entry.queried is not None:
                waits.append(entry.queried + settings.timeout - now)
            else:
                waits.append(entry.confirmed + settings.periodic_interval - now)
        return max(0.0, min(waits)) if waits else 60.0

    def symbols(self, kind: int) -> list[str]:
        return [symbol for (k, symbol) in self.entries if k == kind]


class InterestTable:
    """Every portal's interest, as the bus replicates it."""

    def __init__(self):
        self.topics: dict[str, set[str]] = {}                        # topic -> portals
        self.patterns: dict[tuple[int, str], set[str]] = {}          # (kind, pattern) -> portals
        self._compiled: dict[str, re.Pattern | None] = {}

    def apply(self, interest: bm.Interest) -> bool:
        """Fold one update in; True when the set of interested portals changed."""
        table = self.topics if interest.kind == bm.INTEREST_TOPIC else self.patterns
        key = interest.symbol if interest.kind == bm.INTEREST_TOPIC else (interest.kind, interest.symbol)
        portals = table.get(key)
        if interest.op == bm.OP_CANCEL:
            if portals is None or interest.portal not in portals:
                return False
            portals.discard(interest.portal)
            if not portals:
                del table[key]
            return True
        if portals is None:
            portals = table[key] = set()
        if interest.portal in portals:
            return False
        portals.add(interest.portal)
        return True

    def load(self, snapshot: bm.Snapshot) -> None:
        self.topics.clear()
        self.patterns.clear()
        for interest in snapshot.interest:
            self.apply(interest)

    def pattern(self, text: str) -> re.Pattern | None:
        if text not in self._compiled:
            try:
                self._compiled[text] = re.compile(text)
            except re.error:
                self._compiled[text] = None
        return self._compiled[text]

    def portals_for(self, topic: str) -> set[str]:
        """Portals with a receiver for `topic`, directly or through a matching pattern."""
        portals = set(self.topics.get(topic, ()))
        for (_, text), interested in self.patterns.items():
            compiled = self.pattern(text)
            if compiled is not None and compiled.search(topic):
                portals |= interested
        return portals

    def wanted_by_others(self, portal: str) -> tuple[set[str], set[tuple[int, str]]]:
        """Topics and patterns some other portal wants: what `portal` needs proxy receivers for."""
        topics = {t for t, portals in self.topics.items() if portals - {portal}}
        patterns = {p for p, portals in self.patterns.items() if portals - {portal}}
        return topics, patterns
