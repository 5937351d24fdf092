"""Interest between routers on a shared domain (spec/dro.md §2.2 "Multi-Hop"). Pure logic.

A router's endpoint cannot see receivers beyond its own domain, so the router that has them
tells the others: its endpoint on the shared domain sends LBMR gateway INTEREST messages (ext 0x05
type 0), one record per (topic or pattern, destination domain). `InterestAnnouncer` decides when:
a new item goes out at once, then again after `min_interval`, doubling up to `max_interval`
(the DRO's "between 1000 and 60000 ms"; topics by `<remote-topic-interest>`, patterns by
`<remote-pattern-interest>`), so a lost datagram is repaired quickly and a steady state costs
little; an item that goes away is sent once with CANCEL.

`RemoteInterest` is the other side: what other routers on this domain want, refreshed by their
messages, removed by a CANCEL or when not refreshed for `<remote-topic>`/`<remote-pattern>`
`timeout`. Each item is checked once every `check-interval`, in passes of at most `max-topics`
(`max-patterns`) items spread over that interval, so a domain with many topics never stalls the
worker's loop (and its data) on one long sweep; passes are at least MIN_PASS_INTERVAL apart (the
DRO's 50 ms floor, Gwd-6361-9), so beyond `max-topics` × check-interval / 50 ms items a round takes
longer than `check-interval`. An item is removed within `timeout` plus one round.
"""
from __future__ import annotations

import collections
import math
from dataclasses import dataclass

Item = tuple[int, str, int]          # (interest kind, symbol, destination domain id)
TOPICS, PATTERNS = "topics", "patterns"     # the two check groups: kind 0, and PCRE/regex patterns


def group_of(item: Item) -> str:
    return TOPICS if item[0] == 0 else PATTERNS


@dataclass(slots=True)
class _Schedule:
    interval: float
    due: float


class InterestAnnouncer:
    """`min_interval`/`max_interval` are `<remote-topic-interest>`'s; `pattern_bounds` (min, max)
    are `<remote-pattern-interest>`'s (None: the same as topics')."""

    def __init__(self, min_interval: float, max_interval: float,
                 pattern_bounds: tuple[float, float] | None = None):
        self.min_interval = max(min_interval, 0.001)
        self.max_interval = max(max_interval, self.min_interval)
        pattern_min, pattern_max = pattern_bounds or (min_interval, max_interval)
        pattern_min = max(pattern_min, 0.001)
        self._bounds = {TOPICS: (self.min_interval, self.max_interval),
                        PATTERNS: (pattern_min, max(pattern_max, pattern_min))}
        self.items: dict[Item, _Schedule] = {}
        self.cancelled: list[Item] = []
        self.deferred = frozenset()          # kinds of which the last due() left items to the rate limit

    def update(self, wanted: set[Item], now: float) -> None:
        for item in wanted - self.items.keys():
            self.items[item] = _Schedule(self._bounds[group_of(item)][0], now)
            if item in self.cancelled:       # gone and back before its CANCEL went: wanted after all
                self.cancelled.remove(item)
        for item in self.items.keys() - wanted:
            del self.items[item]
            self.cancelled.append(item)

    def due(self, now: float, allow=None) -> tuple[list[Item], list[Item], list[Item]]:
        """(new or refreshed items to send now, of which the first-time ones, cancels).
        `allow(item)` is the rate limit: an item it refuses stays due (and so do the rest of its
        kind), and `deferred` names the kinds held back."""
        send, first, limited = [], [], set()
        for item, schedule in self.items.items():
            if schedule.due <= now:
                if item[0] in limited or (allow is not None and not allow(item)):
                    limited.add(item[0])
                    continue
                send.append(item)
                shortest, longest = self._bounds[group_of(item)]
                if schedule.interval == shortest:
                    first.append(item)
                schedule.interval = min(schedule.interval * 2, longest)
                schedule.due = now + schedule.interval
        self.deferred = frozenset(limited)
        cancels, self.cancelled = self.cancelled, []
        return send, first, cancels

    def next_due(self, now: float) -> float:
        """Seconds until something is due (a long wait if nothing is)."""
        if self.cancelled:
            return 0.0
        if not self.items:
            return max(longest for _, longest in self._bounds.values())
        return max(0.0, min(s.due for s in self.items.values()) - now)


MIN_PASS_INTERVAL = 0.05


@dataclass(slots=True)
class CheckPace:
    """`<remote-topic>`/`<remote-pattern>`: how often each item is checked and how many per pass."""
    timeout: float                  # s
    check_interval: float = 90.0    # s
    per_pass: int = 100


class _Round:
    """The items of one group still to check in the current round, and how many passes it has."""

    __slots__ = ("queue", "passes")

    def __init__(self):
        self.queue: collections.deque[Item] = collections.deque()
        self.passes = 1


class RemoteInterest:
    def __init__(self, topics: CheckPace, patterns: CheckPace):
        self.paces = {TOPICS: topics, PATTERNS: patterns}
        self.heard_at: dict[Item, float] = {}
        self._rounds = {TOPICS: _Round(), PATTERNS: _Round()}

    def heard(self, item: Item, now: float) -> bool:
        """An interest (or refresh) message: True when the item is new."""
        new = item not in self.heard_at
        self.heard_at[item] = now
        return new

    def cancel(self, item: Item) -> bool:
        return self.heard_at.pop(item, None) is not None

    def check(self, group: str, now: float) -> tuple[list[Item], float]:
        """One pass over `group`: (the items whose timeout passed, removed; seconds until the
        next pass). A round starts with the items known then; one heard later waits for the next."""
        pace, round_ = self.paces[group], self._rounds[group]
        if not round_.queue:
            round_.queue.extend(item for item in self.heard_at if group_of(item) == group)
            round_.passes = max(1, math.ceil(len(round_.queue) / pace.per_pass))
        gone = []
        for _ in range(min(pace.per_pass, len(round_.queue))):
            item = round_.queue.popleft()
            at = self.heard_at.get(item)
            if at is not None and now - at >= pace.timeout:
                del self.heard_at[item]
                gone.append(item)
        return gone, max(MIN_PASS_INTERVAL, pace.check_interval / round_.passes)

    def clear(self) -> list[Item]:
        items, self.heard_at = list(self.heard_at), {}
        return items
