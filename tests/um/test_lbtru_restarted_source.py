"""An LBT-RU source port whose session changed (its process restarted, the port bound again with a
new session id) while a receiver of the old session still asks for it: an RST names no session,
so the receiving port resets every session it has from that source port. The old session's
requests must not reset the new session's connection over and over. Real contexts on loopback;
the old session's receiver is a session client on the receiving context's own port."""
from __future__ import annotations

import logging

import pytest

from router.um.context import Context
from router.um.lbtru_receiver import LbtruSessionClient
from tests.support.domains import new_domain
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration

RECEIVER_LOG = "router.um.lbtru_receiver"
ATTEMPTS = 25


def test_requests_for_the_session_a_port_had_before_leave_its_new_session_connected(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=RECEIVER_LOG)
    options = new_domain(tmp_path).overrides()
    with Context(**options) as receiving, Context(transport="lbtru", **options) as sending:
        got, events = [], []
        receiving.receiver("ru.restarted", on_batch=lambda ms: got.extend(m.data for m in ms),
                           on_event=lambda e: events.append(e.kind))
        source = sending.source("ru.restarted")
        session = source.session
        wait_for(lambda: source.receiver_count == 1, 10, message="the receiver connects")
        (stream,) = receiving.clients.values()
        assert isinstance(stream, LbtruSessionClient)

        stale_closed = []
        stale = receiving.loop.call_and_wait(lambda: LbtruSessionClient(
            receiving.loop, stream.port, "127.0.0.1", session.port, session.session_id ^ 0x5A5A5A5A,
            stale_closed.append, connect_interval=0.02, maximum_connect_attempts=ATTEMPTS))
        payloads = [b"message %d" % n for n in range(ATTEMPTS)]
        for n, payload in enumerate(payloads):              # one message per request it makes
            wait_for(lambda: stale.counters["creqs_sent"] > n or stale_closed, 10,
                     message="the old session's receiver asks again")
            source.send(payload, flush=True)
        wait_for(lambda: stale_closed, 10, message="the old session's receiver gives up")
        wait_for(lambda: len(got) == len(payloads), 10, message="every message")
        counters, session_counters = dict(stream.counters), dict(session.counters)
        assert stream.connected and not stream.closed and events == ["BOS"]
        resets = [r.getMessage() for r in caplog.records
                  if r.name == RECEIVER_LOG and "reset by the source" in r.getMessage()]
    assert got == payloads
    assert stale.counters["creqs_sent"] == ATTEMPTS and not stale.connected
    assert counters["rsts_rcved"] == 0 and counters["connects"] == 1, counters
    assert counters["lost"] == 0, counters
    assert session_counters["rsts_sent"] == 0 and session_counters["malformed"] == 0, session_counters
    assert session_counters["creqs_other_session"] == ATTEMPTS, session_counters
    assert not resets, resets
