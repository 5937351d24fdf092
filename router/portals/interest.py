"""Interest: which topics and patterns have receivers, in one domain and across the router.

`DomainInterest` is what one endpoint portal knows of its own domain, learned the DRO way
(spec/dro.md §2.2): TQRs and wildcard TQRs add and refresh interest, use-query responses confirm
it, a leave makes the portal check at once. Interest nobody confirms is queried `max` times,
`timeout` apart, then dropped. Pure logic: the caller passes the clock and sends what it returns.

`InterestTable` is the router-wide view replicated over the bus: for a topic, which portals want it.
"""
from __future__ import annotations

import collections
import functools
import heapq
import itertools
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
    turn: float = 0.0                # when its place in the queue of checks comes (at or before its due)


@dataclass
class DomainInterest:
    topic_queries: UseQuerySettings = field(default_factory=UseQuerySettings)
    pattern_queries: UseQuerySettings = field(default_factory=UseQuerySettings)
    entries: dict[tuple[int, str], _Entry] = field(default_factory=dict)   # (kind, symbol) -> state
    deferred: frozenset = frozenset()    # kinds whose due queries the last tick left to the rate limit
    # The entries in order of their turns: (turn, sequence, key), one place per entry (a place
    # whose turn is not its entry's any more is stale, skipped). In steady state the topics fall
    # due one after another (a round of use queries is rate-limited, and so are the answers), and
    # a check looks only at those whose turn came: never a walk over every entry, neither when a
    # topic is heard (thousands at once when a domain's receivers come up) nor when one falls due.
    # A refresh only puts an entry's due off: its turn stays, and when it comes the entry takes
    # its place again at its due.
    _turns: list = field(default_factory=list, init=False, repr=False)
    _sequence: itertools.count = field(default_factory=itertools.count, init=False, repr=False)
    # How many entries of each kind: the portal's counters read them each time interest is heard,
    # and a count by a walk over every entry made a burst of N new topics cost N² steps too.
    _kind_counts: collections.Counter = field(default_factory=collections.Counter, init=False, repr=False)

    def heard(self, kind: int, symbol: str, now: float) -> bool:
        """A TQR, wildcard TQR or use-query response: returns True when the interest is new."""
        key = (kind, symbol)
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = _Entry(now)
            self._kind_counts[kind] += 1
            self._queue(key, entry, self._due_at(kind, entry))
            return True
        entry.confirmed, entry.queried, entry.unanswered = now, None, 0
        return False

    def heard_leave(self, kind: int, symbol: str, now: float) -> None:
        """A receiver left; others may remain, so ask now rather than drop outright. The round of
        queries that starts is an ordinary one: `max` unanswered, `timeout` apart, before the
        interest goes, so one lost response (UDP) never drops a topic other receivers still use.
        A query already out asks the same question: its round goes on as it was."""
        key = (kind, symbol)
        entry = self.entries.get(key)
        if entry is not None and entry.queried is None:
            entry.confirmed = now - self._settings(kind).periodic_interval
            if now < entry.turn:
                self._queue(key, entry, now)

    def _queue(self, key: tuple[int, str], entry: _Entry, turn: float) -> None:
        entry.turn = turn
        heapq.heappush(self._turns, (turn, next(self._sequence), key))

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
        to_query, to_drop, limited, held = [], [], set(), []
        turns = self._turns
        while turns and turns[0][0] <= now:
            turn, _, key = heapq.heappop(turns)
            entry = self.entries.get(key)
            if entry is None or turn != entry.turn:
                continue                     # dropped, or queued again earlier (a leave)
            due = self._due_at(key[0], entry)
            if due > now:                    # refreshed since it was queued
                self._queue(key, entry, due)
                continue
            unanswered = entry.unanswered + (entry.queried is not None)
            if unanswered >= self._settings(key[0]).max_unanswered:
                del self.entries[key]
                self._kind_counts[key[0]] -= 1
                to_drop.append(key)
                continue
            if key[0] in limited or (allow is not None and not allow(*key)):
                limited.add(key[0])
                held.append((key, entry))
                continue
            entry.unanswered, entry.queried = unanswered, now
            to_query.append(key)
            self._queue(key, entry, self._due_at(key[0], entry))
        for key, entry in held:              # still due: their turn comes at the next check
            self._queue(key, entry, now)
        self.deferred = frozenset(limited)
        return to_query, to_drop

    def next_due(self, now: float) -> float:
        """Seconds until `tick` could have something to do."""
        if not self.entries:
            return 60.0
        turns = self._turns
        while turns and (turns[0][2] not in self.entries or turns[0][0] != self.entries[turns[0][2]].turn):
            heapq.heappop(turns)             # stale places: they would wake a check for nothing
        if not turns:
            return 60.0
        return max(0.0, turns[0][0] - now)

    def symbols(self, kind: int) -> list[str]:
        return [symbol for (k, symbol) in self.entries if k == kind]

    def count(self, kind: int) -> int:
        """How many symbols of `kind` are wanted (without a walk over them)."""
        return self._kind_counts[kind]


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
