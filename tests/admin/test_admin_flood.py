"""A flood on the admin socket (a script asking `status` as fast as it can, many clients) does not
take the supervisor's loop: the admin socket answers a bounded number of requests per loop turn,
and signals, reaping and heartbeat checks go on between them."""
from __future__ import annotations

import signal
import threading
import time

import pytest
import zmq

from router.admin import server as admin_server
from router.admin.protocol import decode_reply, encode_request
from router.um.loop import EventLoop
from tests.admin.fake_supervisor import FakeSupervisor
from tests.support.routerctl import two_lan_router

DEADLINE = 30.0
QUEUED = 500


@pytest.fixture
def served():
    """An admin server on an inproc endpoint, served by a real loop: a request sent on inproc is in
    the server's queue when send returns, so what one loop turn handles is known."""
    supervisor = FakeSupervisor()
    supervisor.zmq = zmq.Context()
    supervisor.loop = EventLoop("admin-flood")
    server = admin_server.AdminServer(supervisor, "inproc://admin-flood")
    client = supervisor.zmq.socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    client.setsockopt(zmq.RCVHWM, 0)
    client.connect("inproc://admin-flood")
    try:
        yield supervisor, server, client
    finally:
        client.close()
        server.close()
        supervisor.loop.close()
        supervisor.zmq.term()


def test_one_loop_turn_answers_a_bounded_number_of_requests_and_the_rest_later(served):
    supervisor, server, client = served
    for number in range(QUEUED):
        client.send(encode_request(number, "status"))
    turns = []
    supervisor.loop.call_later(0, lambda: turns.append(server.requests))
    supervisor.loop.run_once(0)
    assert turns, "the loop did not get to its timers"
    assert 0 < turns[0] <= admin_server.REQUESTS_PER_TURN, f"{turns[0]} requests handled in one loop turn"

    answered: set[int] = set()
    deadline = time.monotonic() + DEADLINE
    while len(answered) < QUEUED and time.monotonic() < deadline:
        supervisor.loop.run_once(0.05)
        while client.poll(0):
            reply = decode_reply(client.recv())
            assert reply["status"] == "ok", reply
            answered.add(reply["id"])
    assert answered == set(range(QUEUED)), f"{QUEUED - len(answered)} requests never answered"
    assert server.requests == QUEUED


class Flood:
    """Clients asking `status` as fast as they can, never reading the replies."""

    def __init__(self, endpoint: str, clients: int = 2):
        self.context = zmq.Context()
        self.sent = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(endpoint,), daemon=True) for _ in range(clients)]
        for thread in self._threads:
            thread.start()

    def _run(self, endpoint: str) -> None:
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDTIMEO, 100)
        sock.connect(endpoint)
        request = encode_request(1, "status")
        try:
            while not self._stop.is_set():
                try:
                    sock.send(request)
                    self.sent += 1
                except zmq.Again:
                    pass
        finally:
            sock.close()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(DEADLINE)
        self.context.term()


@pytest.mark.integration
def test_a_router_flooded_with_admin_requests_still_stops_on_sigterm(runtime_dir, routers, make_domain):
    router = two_lan_router(routers, make_domain(), make_domain())
    flood = Flood(f"ipc://{runtime_dir}/{router.name}.admin")
    try:
        deadline = time.monotonic() + DEADLINE
        while flood.sent < 5_000 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert flood.sent >= 5_000, "the flood did not start"
        router.signal(signal.SIGTERM)
        try:
            router.tool.proc.wait(DEADLINE)
        except Exception:
            pass
        stopped_during_flood = router.tool.proc.poll() is not None
    finally:
        flood.stop()
    assert stopped_during_flood, f"the router did not stop while its admin socket was flooded:\n{router.log()[-2000:]}"
    assert router.tool.proc.returncode == 0, router.log()[-2000:]
