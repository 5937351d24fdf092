"""Timers that schedule their own next run keep running after one run raises, with real contexts
on loopback: topic resolution goes on advertising, OTR goes on asking, late join goes on asking.

Each test makes one run of the timer's callback raise (a method of a real object made to fail
once, as a transient error or one odd input would) and then waits for the timer's work to show on
the wire or in the receiver again. The loop counts the failure (callback_errors)."""
from __future__ import annotations

import threading

import pytest

from router.um.context import Context
from router.um.wire.errors import WireError
from router.um.wire.lbmr import TopicResolution, decode_lbmr
from tests.support.domains import new_domain
from tests.support.processes import wait_for
from tests.um.test_otr import _OTR, _SOURCE, Collector, Dropper, _joined, _payload, _send, _stream

pytestmark = pytest.mark.integration


class FailOnce:
    """Stands in for a bound method: the first call raises `error`, the others call through."""

    def __init__(self, method, error: Exception):
        self.method, self.error = method, error
        self.failed = threading.Event()

    def __call__(self, *args, **kwargs):
        if not self.failed.is_set():
            self.failed.set()
            raise self.error
        return self.method(*args, **kwargs)


class ResolverListener:
    """What a domain's topic resolution says: the TIRs heard per topic, from a socket of our own
    on its group (as any UM context in the domain hears them)."""

    def __init__(self, domain):
        self.sock = domain.resolver_listener(timeout=0.05)
        self.tirs: dict[str, int] = {}
        self.lock = threading.Lock()
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.running:
            try:
                data = self.sock.recv(65536)
            except (TimeoutError, OSError):
                continue
            try:
                body = decode_lbmr(data).body
            except WireError:
                continue
            if isinstance(body, TopicResolution):
                with self.lock:
                    for tir in body.tirs:
                        self.tirs[tir.topic] = self.tirs.get(tir.topic, 0) + 1

    def heard(self, topic: str) -> int:
        with self.lock:
            return self.tirs.get(topic, 0)

    def close(self) -> None:
        self.running = False
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def listener(domain):
    heard = ResolverListener(domain)
    yield heard
    heard.close()


# Advertisements every 100 ms (UM's sustaining phase at its fastest), from the start.
_ADVERTISING = {"resolver_advertisement_minimum_initial_duration": 0,
                "resolver_advertisement_sustain_interval": 100,
                "resolver_advertisement_minimum_sustain_duration": 600}


def test_advertisements_go_on_after_one_failing_resolver_tick(contexts, listener):
    """One advertisement that cannot be made (its TIR raises) stops no advertisement for good:
    the source's, and every other source's of the context, go on at their interval."""
    publisher = contexts(**_ADVERTISING)
    source = publisher.source("ticking")
    other = publisher.source("bystander")
    wait_for(lambda: listener.heard("ticking") >= 2 and listener.heard("bystander") >= 2, 10,
             message="both sources advertised")
    source.current_tir = FailOnce(source.current_tir, RuntimeError("an advertisement that cannot be made"))
    wait_for(source.current_tir.failed.is_set, 10, message="the resolver tick that fails")
    after = listener.heard("ticking"), listener.heard("bystander")
    wait_for(lambda: listener.heard("ticking") >= after[0] + 3 and listener.heard("bystander") >= after[1] + 3,
             10, message="advertisements after the failing tick")
    assert publisher.loop.callback_errors == 1
    assert other.topic == "bystander"


def test_off_transport_recovery_goes_on_after_one_failing_request(tmp_path):
    """A receiver's first OTR request for a lost message raises: the request is made again at
    its interval and the loss recovered, and the live messages held behind it come; they are not
    held back for good."""
    domain = new_domain(tmp_path)
    payloads = [_payload(n) for n in range(20)]
    with Context(**domain.overrides(), **_SOURCE) as sending, Context(**domain.overrides(), **_OTR) as receiving:
        source = sending.source("otr.failing")
        got = Collector(receiving, "otr.failing")
        _joined(receiving, got)
        [joined] = got.receiver.joined.values()
        recovery = joined.otr
        recovery._request = FailOnce(recovery._request, RuntimeError("a request that cannot be made"))
        Dropper(_stream(got), source.index, {5})
        _send(source, payloads)
        got.wait(len(payloads))
        assert recovery._request.failed.is_set()
        assert receiving.loop.callback_errors == 1
    assert got.sqns == list(range(len(payloads)))
    assert got.recovered == [5]


class LostThenFailing:
    """Stands in for a LateJoinClient method (on the class): its first call is lost (nothing is
    sent: a request the network lost), its second raises, the others call through."""

    def __init__(self, method):
        self.method = method
        self.calls = 0

    def __get__(self, client, owner=None):
        return lambda *args, **kwargs: self._call(client, *args, **kwargs)

    def _call(self, client, *args, **kwargs):
        self.calls += 1
        if self.calls == 1:
            return None
        if self.calls == 2:
            raise RuntimeError("a late-join request that cannot be made")
        return self.method(client, *args, **kwargs)


# The receiver asks again every 100 ms; the source retains (and sends over TCP).
_LATE_JOIN_SOURCE = {"late_join": True}
_LATE_JOIN_RECEIVER = {"late_join_info_request_interval": 100, "retransmit_request_interval": 100}


@pytest.mark.parametrize("method", ["_send", "_request"])
def test_late_join_goes_on_after_one_failing_retry(tmp_path, monkeypatch, method):
    """A late-join request that went unanswered is asked again; that retry raises once (`_send`:
    the information request, LJI_REQ; `_request`: the retransmission requests, UME_RXREQ). The
    next retry comes at its interval: what the source retained is delivered, then the live
    messages held back meanwhile; the receiver does not hold them back for good."""
    from router.um.late_join import LateJoinClient
    domain = new_domain(tmp_path)
    with Context(**domain.overrides(), **_LATE_JOIN_SOURCE) as sending, \
            Context(**domain.overrides(), **_LATE_JOIN_RECEIVER) as receiving:
        source = sending.source("lj.failing")
        old = [_payload(n) for n in range(10)]
        for payload in old:
            source.send(payload)
        source.flush()
        failing = LostThenFailing(getattr(LateJoinClient, method))
        monkeypatch.setattr(LateJoinClient, method, failing)
        got = Collector(receiving, "lj.failing")
        wait_for(lambda: failing.calls >= 2, 10, message="the failing retry")
        live = [_payload(n) for n in range(10, 20)]
        for payload in live:
            source.send(payload)
        source.flush()
        got.wait(20)
        assert receiving.loop.callback_errors == 1
    assert got.sqns == list(range(20))
    assert [m.data for m in got.messages] == old + live
    assert [m.retransmit for m in got.messages] == [True] * 10 + [False] * 10
