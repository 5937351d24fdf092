"""LBT-RM and LBT-RU receivers held back by flow control (a router's rings full: the stream is
paused and its socket is not read) while their source is alive: the source's session messages
wait in the kernel, so the silence is the receiver's own and the activity timeout must not end
the stream. Real contexts on loopback, short timeouts set through options."""
from __future__ import annotations

import pytest

from router.um.context import Context
from tests.support.domains import new_domain
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration

ACTIVITY_TIMEOUT_MS = 400
SM_INTERVAL_MS = 50


def _collect(context, topic):
    got, events = [], []
    context.receiver(topic, on_batch=lambda ms: got.extend(m.data for m in ms),
                     on_event=lambda e: events.append(e.kind))
    return got, events


@pytest.mark.parametrize("transport", ["lbtrm", "lbtru"])
def test_a_paused_receiver_outlives_the_activity_timeout_while_its_source_is_alive(tmp_path, transport):
    options = new_domain(tmp_path).overrides()
    receiver_options = {f"transport_{transport}_activity_timeout": ACTIVITY_TIMEOUT_MS}
    source_options = {f"transport_{transport}_sm_minimum_interval": SM_INTERVAL_MS,
                      f"transport_{transport}_sm_maximum_interval": SM_INTERVAL_MS}
    topic = f"{transport}.paused"
    with Context(**options, **receiver_options) as receiving, \
            Context(transport=transport, **options, **source_options) as sending:
        got, events = _collect(receiving, topic)
        source = sending.source(topic)
        wait_for(lambda: receiving.clients, 10, message="the receiver joins the session")
        (stream,) = receiving.clients.values()
        wait_for(lambda: source.session.receiver_count >= 1 if transport == "lbtru" else True, 10,
                 message="the receiver connects")
        source.send(b"before", flush=True)
        wait_for(lambda: got == [b"before"], 10, message="the first message")

        receiving.loop.call_and_wait(stream.pause)
        # The source stays alive and keeps telling so: session messages for several activity
        # timeouts, which the paused receiver cannot read yet.
        sms = source.session.counters["sms_sent"]
        timeouts = 4 * ACTIVITY_TIMEOUT_MS // SM_INTERVAL_MS
        wait_for(lambda: source.session.counters["sms_sent"] >= sms + timeouts, 20,
                 message="session messages for several activity timeouts")
        source.send(b"while paused", flush=True)
        receiving.loop.call_and_wait(stream.resume)

        source.send(b"after", flush=True)
        wait_for(lambda: len(got) == 3 or "EOS" in events, 10, message="the messages, or the stream's end")
        assert not stream.closed, "the paused stream was ended while its source was alive"
        assert list(receiving.clients.values()) == [stream]
        assert got == [b"before", b"while paused", b"after"]
        assert events == ["BOS"]


def test_a_session_joined_while_its_lbtru_port_is_paused_connects_once_the_port_is_read(tmp_path):
    """One LBT-RU port serves every session a context joins: while one stream is paused, a source
    joined meanwhile answers connection requests nobody reads. Those attempts say nothing of the
    source; it connects once the port is read again."""
    options = new_domain(tmp_path).overrides()
    with Context(transport_lbtru_connect_interval=20, transport_lbtru_maximum_connect_attempts=5,
                 **options) as receiving, \
            Context(transport="lbtru", transport_lbtru_sm_minimum_interval=SM_INTERVAL_MS,
                    transport_lbtru_sm_maximum_interval=SM_INTERVAL_MS, **options) as sending_a, \
            Context(transport="lbtru", **options) as sending_b:
        got_a, events_a = _collect(receiving, "ru.busy")
        source_a = sending_a.source("ru.busy")
        wait_for(lambda: source_a.session.receiver_count == 1, 10, message="the first source's receiver connects")
        (stream_a,) = receiving.clients.values()
        receiving.loop.call_and_wait(stream_a.pause)

        got_b, events_b = _collect(receiving, "ru.joined.while.paused")
        source_b = sending_b.source("ru.joined.while.paused")
        wait_for(lambda: len(receiving.clients) == 2, 10, message="the second session is joined")
        (stream_b,) = [stream for stream in receiving.clients.values() if stream is not stream_a]
        # Many times the attempts' span (5 x 20 ms) passes while the port is not read.
        sms = source_a.session.counters["sms_sent"]
        wait_for(lambda: source_a.session.counters["sms_sent"] >= sms + 10, 20,
                 message="the first source's session messages for many connection windows")
        receiving.loop.call_and_wait(stream_a.resume)

        wait_for(lambda: source_b.session.receiver_count == 1 or stream_b.closed, 10,
                 message="the second session connects, or gives up")
        assert not stream_b.closed, "the session was given up while its port was not read"
        source_b.send(b"b", flush=True)
        source_a.send(b"a", flush=True)
        wait_for(lambda: got_a and got_b, 10, message="both sources' messages")
        assert got_a == [b"a"] and got_b == [b"b"]
        assert events_a == ["BOS"] and events_b == ["BOS"]
        assert stream_b.counters["connects"] == 1
