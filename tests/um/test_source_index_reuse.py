"""A topic index of a shared transport session used again by a new source (a router's proxy source
for a restarted origin keeps the origin's index): what the session knew of the old source's
stream must not be said of the new one. Real contexts on loopback TCP."""
from __future__ import annotations

import socket

import pytest

from router.um.context import Context
from router.um.messages import UNRECOVERABLE_LOSS
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration

INDEX = 7
_PROXY = {"overflow": "drop", "max_queue": 64 * 1024}      # as a router's proxy sources are made


def test_a_new_source_on_a_reused_index_is_not_told_the_old_ones_dropped_tail(domain):
    """The old source's batches were dropped for a receiver that did not read (counted, and said
    in the session's TSNIs). A new source on the same index starts again from sequence number 0:
    its TSNIs must say its own last number. Saying the old one's makes its receivers declare the
    numbers up to it lost, and then discard the new source's real messages as behind them."""
    options = domain.overrides()
    with Context(**options, transport_topic_sequence_number_info_interval=100) as sending, \
            Context(**options) as receiving:
        keeper = sending.source("reuse.keeper", **_PROXY)        # keeps the shared session open
        old = sending.source("reuse.topic", index=INDEX, **_PROXY)
        session = old.session
        assert keeper.session is session and old.index == INDEX

        stuck = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            stuck.connect(("127.0.0.1", session.port))
            wait_for(lambda: session.receiver_count == 1, 10, message="the stuck receiver connected")
            payload = b"o" * 4000
            sent = 0
            while not session.counters["dropped_would_block_batches"] and sent < 100_000:
                old.send(payload, flush=True)
                sent += 1
            assert session.counters["dropped_would_block_batches"], "nothing was dropped for the stuck receiver"
        finally:
            stuck.close()
        wait_for(lambda: session.receiver_count == 0, 10, message="the stuck receiver's connection dropped")
        old.close()

        new = sending.source("reuse.topic", index=INDEX, **_PROXY)
        assert new.session is session and new.index == INDEX

        got, losses = [], []

        def on_event(event):
            if event.kind == UNRECOVERABLE_LOSS:
                losses.append(event)

        receiving.receiver("reuse.topic", on_batch=lambda ms: got.extend(m.data for m in ms), on_event=on_event)
        wait_for(lambda: session.receiver_count == 1, 10, message="the receiver joined the new source")
        for n in range(3):
            new.send(b"new %d" % n, flush=True)
        wait_for(lambda: len(got) == 3, 10, message="the first messages of the new source")
        told = session.counters["tsni_sent"]
        wait_for(lambda: session.counters["tsni_sent"] >= told + 2, 10, message="TSNIs of the idle session")
        for n in range(3, 6):
            new.send(b"new %d" % n, flush=True)
        wait_for(lambda: len(got) == 6 or losses, 10, message="the next messages, or a loss")
        assert not losses, f"the new source's receiver was told of loss: {losses}"
        assert got == [b"new %d" % n for n in range(6)]
