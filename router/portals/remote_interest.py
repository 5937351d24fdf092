"""Interest between routers on a shared domain (spec/dro.md §2.2 "Multi-Hop"). Pure logic.

A router's endpoint cannot see receivers beyond its own domain, so the router that has them
tells the others: its endpoint on the shared domain sends LBMR gateway INTEREST messages (ext 0x05
type 0), one record per (topic or pattern, destination domain). `InterestAnnouncer` decides when:
a new item goes out at once, then again after `min_interval`, doubling up to `max_interval`
(the DRO's "between 1000 and 60000 ms"), so a lost datagram is repaired quickly and a steady
state costs little; an item that goes away is sent once with CANCEL.

`RemoteInterest` is the other side: what other routers on this domain want, refreshed by their
messages, removed by a CANCEL or when not refreshed for `<remote-topic>`/`<remote-pattern>`
timeout (checked every check-interval, as the DRO does).
"""
from __future__ import annotations

from dataclasses import dataclass

Item = tuple[int, str, int]          # (interest kind, symbol, destination domain id)


@dataclass(slots=True)
class _Schedule:
    interval: float
    due: float


class InterestAnnouncer:
    def __init__(self, min_interval: float, max_interval: float):
        self.min_interval = max(min_interval, 0.001)
        self.max_interval = max(max_interval, self.min_interval)
        self.items: dict[Item, _Schedule] = {}
        self.cancelled: list[Item] = []
        self.deferred = frozenset()          # kinds of which the last due() left items to the rate limit

    def update(self, wanted: set[Item], now: float) -> None:
        for item in wanted - self.items.keys():
            self.items[item] = _Schedule(self.min_interval, now)
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
                if schedule.interval == self.min_interval:
                    first.append(item)
                schedule.interval = min(schedule.interval * 2, self.max_interval)
                schedule.due = now + schedule.interval
        self.deferred = frozenset(limited)
        cancels, self.cancelled = self.cancelled, []
        return send, first, cancels

    def next_due(self, now: float) -> float:
        """Seconds until something is due (a long wait if nothing is)."""
        if self.cancelled:
            return 0.0
        if not self.items:
            return self.max_interval
        return max(0.0, min(s.due for s in self.items.values()) - now)


class RemoteInterest:
    def __init__(self, topic_timeout: float, pattern_timeout: float):
        self.topic_timeout, self.pattern_timeout = topic_timeout, pattern_timeout
        self.heard_at: dict[Item, float] = {}

    def heard(self, item: Item, now: float) -> bool:
        """An interest (or refresh) message: True when the item is new."""
        new = item not in self.heard_at
        self.heard_at[item] = now
        return new

    def cancel(self, item: Item) -> bool:
        return self.heard_at.pop(item, None) is not None

    def expire(self, now: float) -> list[Item]:
        gone = [item for item, at in self.heard_at.items()
                if now - at >= (self.topic_timeout if item[0] == 0 else self.pattern_timeout)]
        for item in gone:
            del self.heard_at[item]
        return gone

    def clear(self) -> list[Item]:
        items, self.heard_at = list(self.heard_at), {}
        return items
