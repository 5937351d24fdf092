"""LBT-IPC's activity timeout: an idle source writes a session message into its ring every
`transport_lbtipc_sm_interval`, and a receiver that hears nothing from its source (no record of
any kind) for `transport_lbtipc_activity_timeout` ends the stream (EOS), as UM's does. A source
whose process is alive but hung (its loop stuck: no data, no session messages, no end record) is
let go; an idle one that is alive, or one the receiver is not reading (flow control), is not.
Real contexts, rings and shared memory; short intervals set through options."""
from __future__ import annotations

import threading

import pytest

from router.um.context import Context
from tests.lbtipc.sessions import collect, joined_stream
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration

ACTIVITY_TIMEOUT_MS = 1000
SM_INTERVAL_MS = 50
TIMEOUTS_OF_SMS = 2 * ACTIVITY_TIMEOUT_MS // SM_INTERVAL_MS     # session messages for two activity timeouts


def _contexts(domain):
    options = domain.overrides()
    return (Context(transport_lbtipc_activity_timeout=ACTIVITY_TIMEOUT_MS, **options),
            Context(transport="lbtipc", transport_lbtipc_sm_interval=SM_INTERVAL_MS, **options))


def test_a_hung_source_is_let_go_after_the_activity_timeout(domain):
    receiving, sending = _contexts(domain)
    gate = threading.Event()
    with receiving, sending:
        got, events = collect(receiving, "ipc.hung")
        source = sending.source("ipc.hung")
        stream = joined_stream(receiving)
        wait_for(lambda: source.session.receiver_count == 1, 10, message="the receiver reads the ring")
        source.send(b"last words", flush=True)
        wait_for(lambda: got == [b"last words"], 10, message="the message")
        try:
            sending.loop.call_soon_threadsafe(gate.wait, 30)      # the source's process hangs
            wait_for(lambda: "EOS" in events, 10, message="EOS once the source was silent for the activity timeout")
        finally:
            gate.set()
        assert stream.closed
    assert got == [b"last words"]
    assert events == ["BOS", "EOS"]


def _reading(receiving, sending, topic):
    """A source of `topic` in `sending` whose ring a receiver in `receiving` reads: (messages,
    events, source, the receiver's stream)."""
    got, events = collect(receiving, topic)
    source = sending.source(topic)
    stream = joined_stream(receiving)
    wait_for(lambda: source.session.receiver_count == 1, 10, message="the receiver reads the ring")
    return got, events, source, stream


def test_an_idle_source_keeps_its_receivers_with_session_messages(domain):
    receiving, sending = _contexts(domain)
    with receiving, sending:
        got, events, source, stream = _reading(receiving, sending, "ipc.idle")
        sms = source.session.counters["sms_sent"]
        wait_for(lambda: source.session.counters["sms_sent"] >= sms + TIMEOUTS_OF_SMS, 30,
                 message="session messages for two activity timeouts")
        source.send(b"after a while", flush=True)
        wait_for(lambda: got or "EOS" in events, 10, message="the message, or the stream's end")
        assert not stream.closed and got == [b"after a while"] and events == ["BOS"]


def test_a_receiver_that_is_not_reading_does_not_time_its_source_out(domain):
    """Flow control: the stream is paused, its ring unread; the silence is the receiver's own."""
    receiving, sending = _contexts(domain)
    with receiving, sending:
        got, events, source, stream = _reading(receiving, sending, "ipc.paused")
        receiving.loop.call_and_wait(stream.pause)
        source.send(b"waiting", flush=True)
        sms = source.session.counters["sms_sent"]
        wait_for(lambda: source.session.counters["sms_sent"] >= sms + TIMEOUTS_OF_SMS, 30,
                 message="session messages for two activity timeouts")
        assert not stream.closed
        receiving.loop.call_and_wait(stream.resume)
        wait_for(lambda: got or "EOS" in events, 10, message="the message, or the stream's end")
        assert not stream.closed and got == [b"waiting"] and events == ["BOS"]
