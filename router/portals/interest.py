"""Interest: which topics and patterns have receivers, in one domain and across the router.

`DomainInterest` is what one endpoint portal knows of its own domain, learned the DRO way
(spec/dro.md §2.2): TQRs and wildcard TQRs add and refresh interest, use-query responses confirm
it, a leave makes the portal check at once. Interest nobody confirms is queried `max` times,
`timeout` apart, then dropped. Pure logic: the caller passes the clock and sends what it returns.

`InterestTable` is the router-wide view replicated over the bus: for a topic, which portals want it.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from router.ipc import bus_messages as bm
from router.um.wildcard_patterns import WildcardPattern, compile_wildcard


@functools.lru_cache(maxsize=1024)
def pattern_problem(pattern: str) -> str | None:
    """Why a wildcard pattern heard as interest cannot be a proxy wildcard receiver's (None: it
    can). Checked where interest comes in, so a pattern that does not compile is counted and
    dropped there, never put on the bus for every portal to fail on."""
    try:
        compile_wildcard(pattern)
    except (re.error, RecursionError, OverflowError, ValueError) as err:
        return str(err) or type(err).__name__
    return None


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
    deferred: frozenset = frozenset()    # kinds whose due queries the last tick left to the rate limit
    # No entry is due before this (None: not known). Kept as a bound, so that hearing a topic —
    # thousands at once when a domain's receivers come up — never walks every entry to find out
    # when the next check is: a new entry or a leave can only bring it forward, a refresh only
    # puts an entry's turn off (the bound stays true), and each tick works it out exactly.
    _due: float | None = field(default=None, init=False, repr=False)

    def heard(self, kind: int, symbol: str, now: float) -> bool:
        """A TQR, wildcard TQR or use-query response: returns True when the interest is new."""
        entry = self.entries.get((kind, symbol))
        if entry is None:
            self.entries[(kind, symbol)] = _Entry(now)
            self._may_be_due(now + self._settings(kind).periodic_interval)
            return True
        entry.confirmed, entry.queried, entry.unanswered = now, None, 0
        return False

    def heard_leave(self, kind: int, symbol: str, now: float) -> None:
        """A receiver left; others may remain, so ask now rather than drop outright. The round of
        queries that starts is an ordinary one: `max` unanswered, `timeout` apart, before the
        interest goes, so one lost response (UDP) never drops a topic other receivers still use.
        A query already out asks the same question: its round goes on as it was."""
        entry = self.entries.get((kind, symbol))
        if entry is not None and entry.queried is None:
            entry.confirmed = now - self._settings(kind).periodic_interval
            self._may_be_due(now)

    def _may_be_due(self, when: float) -> None:
        if self._due is not None and when < self._due:
            self._due = when

    def _due_at(self, kind: int, entry: _Entry) -> float:
        settings = self._settings(kind)
        if entry.queried is not None:
            return entry.queried + settings.timeout
        return entry.confirmed + settings.periodic_interval

    def _settings(self, kind: int) -> UseQuerySettings:
        return self.topic_queries if kind == bm.INTEREST_TOPIC else self.pattern_queries

    def tick(self, now: float, allow=None) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
        """Returns (to query now, to drop now). `allow(kind, symbol)` is the rate limit: once it
        refuses a kind, that kind's remaining due queries wait (untouched, so a query the limit
        holds back never counts as unanswered) and `deferred` names the kinds held back."""
        to_query, to_drop, limited = [], [], set()
        for key, entry in self.entries.items():
            settings = self._settings(key[0])
            if now - entry.confirmed < settings.periodic_interval:
                continue
            if entry.queried is not None and now - entry.queried < settings.timeout:
                continue
            unanswered = entry.unanswered + (entry.queried is not None)
            if unanswered >= settings.max_unanswered:
                to_drop.append(key)
                continue
            if key[0] in limited or (allow is not None and not allow(*key)):
                limited.add(key[0])
                continue
            entry.unanswered, entry.queried = unanswered, now
            to_query.append(key)
        for key in to_drop:
            del self.entries[key]
        self.deferred = frozenset(limited)
        self._due = None
        return to_query, to_drop

    def next_due(self, now: float) -> float:
        """Seconds until `tick` could have something to do."""
        if not self.entries:
            return 60.0
        if self._due is None:
            self._due = min(self._due_at(kind, entry) for (kind, _), entry in self.entries.items())
        return max(0.0, self._due - now)

    def symbols(self, kind: int) -> list[str]:
        return [symbol for (k, symbol) in self.entries if k == kind]


class InterestTable:
    """Every portal's interest, as the bus replicates it: for each topic or pattern, the
    (portal, destination domain) pairs that want it. An endpoint's own receivers are its own
    domain; interest heard from other routers names the domain its receivers are in."""

    def __init__(self):
        self.topics: dict[str, set[tuple[str, int]]] = {}                        # topic -> {(portal, domain)}
        self.patterns: dict[tuple[int, str], set[tuple[str, int]]] = {}          # (kind, pattern) -> same
        # The patterns in the table now, compiled: one that leaves the table leaves this too (patterns
        # of applications that come and go would otherwise pile up for the router's life).
        self._compiled: dict[tuple[int, str], WildcardPattern | None] = {}

    def apply(self, interest: bm.Interest) -> bool:
        """Fold one update in; True when the set of interested (portal, domain) pairs changed."""
        table = self.topics if interest.kind == bm.INTEREST_TOPIC else self.patterns
        key = interest.symbol if interest.kind == bm.INTEREST_TOPIC else (interest.kind, interest.symbol)
        member = (interest.portal, interest.domain_id)
        members = table.get(key)
        if interest.op == bm.OP_CANCEL:
            if members is None or member not in members:
                return False
            members.discard(member)
            if not members:
                del table[key]
                self._compiled.pop(key, None)
            return True
        if members is None:
            members = table[key] = set()
        if member in members:
            return False
        members.add(member)
        return True

    def drop_portal(self, portal: str) -> bool:
        """A portal was removed: forget its interest; True if there was any."""
        changed = False
        for table in (self.topics, self.patterns):
            for key in list(table):
                kept = {m for m in table[key] if m[0] != portal}
                if kept != table[key]:
                    changed = True
                    if kept:
                        table[key] = kept
                    else:
                        del table[key]
                        self._compiled.pop(key, None)
        return changed

    def load(self, snapshot: bm.Snapshot) -> None:
        self.topics.clear()
        self.patterns.clear()
        self._compiled.clear()
        for interest in snapshot.interest:
            self.apply(interest)

    def pattern(self, key: tuple[int, str]) -> WildcardPattern | None:
        """A (kind, pattern) of the table, compiled (None: it does not compile)."""
        if key not in self._compiled:
            try:
                self._compiled[key] = compile_wildcard(key[1])
            except (re.error, RecursionError, OverflowError, ValueError):
                self._compiled[key] = None
        return self._compiled[key]

    def portals_for(self, topic: str) -> set[tuple[str, int]]:
        """(portal, domain) pairs with a receiver for `topic`, directly or through a matching pattern."""
        members = set(self.topics.get(topic, ()))
        for key, interested in self.patterns.items():
            compiled = self.pattern(key)
            if compiled is not None and compiled.search(topic):
                members |= interested
        return members

    def items(self):
        """Every (kind, symbol, portal, domain) in the table."""
        for topic, members in self.topics.items():
            for portal, domain in members:
                yield bm.INTEREST_TOPIC, topic, portal, domain
        for (kind, pattern), members in self.patterns.items():
            for portal, domain in members:
                yield kind, pattern, portal, domain
