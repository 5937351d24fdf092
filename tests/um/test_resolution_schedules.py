"""The topic resolver's timing of TIRs and TQRs (router.um.topic_resolver) on a stepped clock: each
source and receiver sends exactly when its own schedule says, and a tick looks only at the
schedules whose time came, however many there are."""
import heapq
import itertools
from types import SimpleNamespace

import pytest

import router.um.topic_resolver as module
from router.um.config import UMConfig
from router.um.schedule import ResolutionSchedule
from router.um.topic_resolver import TopicResolver


class SteppedLoop:
    """The resolver's loop on a clock the test moves: timers fire when it passes them."""

    def __init__(self, clock):
        self.clock = clock
        self.timers = []
        self.sequence = itertools.count()

    def call_later(self, delay, callback, *args):
        timer = SimpleNamespace(cancelled=False)
        timer.cancel = lambda: setattr(timer, "cancelled", True)
        heapq.heappush(self.timers, (self.clock[0] + max(0.0, delay), next(self.sequence), timer, callback, args))
        return timer

    def call_every(self, interval, callback):
        return SimpleNamespace(cancel=lambda: None)

    def run_until(self, until):
        while self.timers and self.timers[0][0] <= until:
            when, _, timer, callback, args = heapq.heappop(self.timers)
            if not timer.cancelled:
                self.clock[0] = when
                callback(*args)
        self.clock[0] = until


class CountedSchedule(ResolutionSchedule):
    """A schedule that counts how often anyone looks at when it is due."""

    __slots__ = ("_next_due",)
    looks = 0

    @property
    def next_due(self):
        CountedSchedule.looks += 1
        return self._next_due

    @next_due.setter
    def next_due(self, value):
        self._next_due = value


class Channel:
    def __init__(self, clock):
        self.clock, self.tqrs, self.tirs = clock, [], []

    def send_resolution(self, tqrs=(), tirs=()):
        self.tqrs += [(topic, self.clock[0]) for topic in tqrs]
        self.tirs += [(tir, self.clock[0]) for tir in tirs]

    def send_wildcard_queries(self, queries):
        pass


@pytest.fixture
def stepped(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    loop, channel = SteppedLoop(clock), Channel(clock)
    resolver = TopicResolver(SimpleNamespace(loop=loop, channel=channel), UMConfig())
    return clock, loop, channel, resolver


def _expected_sends(phases, start: float, until: float) -> list[float]:
    schedule, times = ResolutionSchedule(phases, start), []
    while schedule.next_due is not None and schedule.next_due <= until:
        times.append(schedule.next_due)
        schedule.sent(schedule.next_due)
    return times


def test_thousands_of_receivers_each_query_on_their_own_schedule_and_a_tick_looks_only_at_those_due(stepped,
                                                                                                       monkeypatch):
    clock, loop, channel, resolver = stepped
    topics, spacing, until = 3000, 0.001, 1012.0
    monkeypatch.setattr(module, "ResolutionSchedule", CountedSchedule)
    CountedSchedule.looks = 0
    starts = {}
    for n in range(topics):               # an application (or a router's portal) subscribing to thousands
        loop.run_until(1000.0 + n * spacing)
        starts[f"t{n}"] = clock[0]
        resolver.add_receiver(SimpleNamespace(topic=f"t{n}", query=True))
    loop.run_until(until)
    sent: dict[str, list[float]] = {}
    for topic, at in channel.tqrs:
        sent.setdefault(topic, []).append(at)
    for topic, start in starts.items():
        assert sent[topic] == pytest.approx(_expected_sends(resolver.query_phases, start, until)), topic
    # A few looks at each schedule per send: a walk over every schedule at each tick (and at each
    # new receiver) would have been thousands of times as many.
    assert CountedSchedule.looks <= 10 * (len(channel.tqrs) + topics), (CountedSchedule.looks, len(channel.tqrs))


def test_a_removed_receiver_stops_querying_and_its_topic_subscribed_again_starts_afresh(stepped):
    clock, loop, channel, resolver = stepped
    first = SimpleNamespace(topic="t", query=True)
    resolver.add_receiver(first)
    loop.run_until(1000.5)
    resolver.remove_receiver(first)
    channel.tqrs.clear()
    loop.run_until(1002.0)
    assert channel.tqrs == []
    resolver.add_receiver(SimpleNamespace(topic="t", query=True))
    loop.run_until(1004.0)
    assert [at for _, at in channel.tqrs] == pytest.approx(_expected_sends(resolver.query_phases, 1002.0, 1004.0))
