"""A receiver with use_hotlink in one domain (router.um.hotlinks): two sources stand in for two
routers' proxy sources of one origin (one OTID, same sequence numbers, a transport each)."""
import threading

import pytest

from router.um.context import Context
from router.um.messages import BOS, EOS
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration

OTID = bytes(range(32))
COUNT = 300


class Collected:
    def __init__(self):
        self.lock = threading.Lock()
        self.numbers: list[int] = []
        self.events: list[str] = []

    def batch(self, messages) -> None:
        with self.lock:
            self.numbers += [m.sequence_number for m in messages]

    def event(self, event) -> None:
        with self.lock:
            self.events.append(event.kind)


def test_a_hotlink_receiver_joins_every_copy_and_keeps_going_when_one_ends(domain):
    hotlink, plain = Collected(), Collected()
    with Context(**domain.overrides()) as first, Context(**domain.overrides()) as second, \
            Context(**domain.overrides(), **{"receiver:use_hotlink": 1}) as receiving, \
            Context(**domain.overrides()) as today:
        copies = [ctx.source("hl.t", otid=OTID, cost=cost) for ctx, cost in ((first, 2), (second, 5))]
        merged = receiving.receiver("hl.t", on_event=hotlink.event, on_batch=hotlink.batch)
        today.receiver("hl.t", on_event=plain.event, on_batch=plain.batch)
        wait_for(lambda: hotlink.events.count(BOS) == 2 and plain.events.count(BOS) == 1, 30,
                 message="the hotlink receiver joined both copies, the plain one the cheaper")
        # Joined is not yet connected: what a TCP source sends before a receiver connects is not its.
        wait_for(lambda: [copy.session.receiver_count for copy in copies] == [2, 1], 30,
                 message="the receivers connected")
        assert len(merged.sources) == 2
        for number in range(COUNT // 2):
            for copy in copies:
                copy.send(b"%d" % number)
        for copy in copies:
            copy.flush()
        wait_for(lambda: len(hotlink.numbers) == COUNT // 2, 30, message="the first half")
        copies[0].close()          # its final advertisement ends that path; the other goes on
        wait_for(lambda: EOS in hotlink.events, 30, message="the first copy's end")
        for number in range(COUNT // 2, COUNT):
            copies[1].send(b"%d" % number)
        copies[1].flush()
        wait_for(lambda: len(hotlink.numbers) == COUNT, 30, message="every message")
        assert hotlink.numbers == list(range(COUNT))
        assert merged.counters["duplicates_discarded"] == COUNT // 2
        assert merged.counters["loss_events"] == 0
        assert hotlink.events == [BOS, BOS, EOS]
        wait_for(lambda: plain.events == [BOS, EOS, BOS], 30, message="the plain receiver joins one copy at a time")
