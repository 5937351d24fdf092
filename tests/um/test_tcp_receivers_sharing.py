"""Receivers of one context sharing one LBT-TCP stream: what one of them does in its callback
(closing itself, raising) takes nothing from the others."""
import threading

import pytest

from router.um.context import Context
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration


def test_a_receiver_closing_in_its_callback_takes_no_message_from_another_on_the_stream(domain):
    """Two receivers of one topic in one context read one TCP connection; whichever is handed a
    batch first closes itself there. The other still gets every message, that batch too."""
    lock = threading.Lock()
    closed_one: list[str] = []
    kept: dict[str, list[bytes]] = {"a": [], "b": []}
    receivers = {}

    def on_batch(name):
        def take(messages):
            with lock:
                kept[name].extend(m.data for m in messages)
                if closed_one:
                    return
                closed_one.append(name)
            receivers[name].close()             # on the context's thread, in the middle of the delivery
        return take

    total = 2000
    with Context(**domain.overrides()) as publisher, Context(**domain.overrides()) as subscriber:
        source = publisher.source("share.tcp")
        receivers["a"] = subscriber.receiver("share.tcp", None, on_batch=on_batch("a"))
        receivers["b"] = subscriber.receiver("share.tcp", None, on_batch=on_batch("b"))
        wait_for(lambda: source.receiver_count == 1, 10, message="the context connected (once, for both)")
        wait_for(lambda: all(r.joined for r in receivers.values()), 10, message="both receivers joined")
        for n in range(total):
            source.send(b"m%d" % n)             # lengths vary: the stream is walked frame by frame
        source.flush()
        wait_for(lambda: len(closed_one) == 1, 10, message="a receiver got the first batch and closed")
        other = "b" if closed_one[0] == "a" else "a"
        wait_for(lambda: len(kept[other]) >= total, 10,
                 message=f"the receiver still open got all {total} messages (it has {len(kept[other])})")
    assert kept[other] == [b"m%d" % n for n in range(total)]


def test_a_callback_raising_takes_no_message_from_the_other_topics_on_the_stream(domain):
    """Two topics of one source context share its TCP session; the application's callback for one
    of them raises (a bug of its own). The other topic's receiver still gets every message, in
    order, and the stream counts the failed callbacks."""
    kept: list[bytes] = []
    failing_calls = []

    def broken(message):
        failing_calls.append(message.sequence_number)
        raise RuntimeError("the application's own bug")

    total = 1000
    with Context(**domain.overrides()) as publisher, Context(**domain.overrides()) as subscriber:
        first, second = publisher.source("raise.first"), publisher.source("raise.second")
        receivers = [subscriber.receiver("raise.first", broken),
                     subscriber.receiver("raise.second", lambda m: kept.append(m.data))]
        # The one connection comes up with the first topic joined: the second topic's frames are
        # only taken once its receiver has joined too (its advertisement may come later).
        wait_for(lambda: first.receiver_count == 1 and all(r.joined for r in receivers), 10, message="both joined")
        assert len(subscriber.clients) == 1                 # one TCP session carries both topics
        for n in range(total):
            first.send(b"f%d" % n)                          # one frame of each topic after the other:
            second.send(b"s%d" % n)                         # every read holds both
        first.flush()
        second.flush()
        wait_for(lambda: len(kept) >= total, 10,
                 message=f"the second topic's {total} messages (it has {len(kept)})")
        stream = next(iter(subscriber.clients.values()))
        wait_for(lambda: stream.counters["callback_errors"] == len(failing_calls), 10,
                 message="every failed callback counted")
    assert kept == [b"s%d" % n for n in range(total)]
    assert failing_calls
