"""What the supervisor's control-bus messages to one peer came to shows in `routerctl status`: those
that waited because the peer did not read, and those dropped because it went away meanwhile."""
from pathlib import Path

import pytest
import zmq

from router.ipc import bus_messages as bm
from router.runtime import bus_endpoints
from tests.support.processes import wait_for
from tests.support.routerctl import routerctl, two_lan_router

pytestmark = pytest.mark.integration

# Each asks the hub for a snapshot and the route table: more answers than ZeroMQ's queues and the
# kernel's buffers hold for a peer that reads none of them.
RESYNCS = 20_000


def bus_counters() -> dict:
    return routerctl("--json", "status").json()["bus"]


def test_status_counts_messages_to_a_peer_that_stalled_then_went_away(runtime_dir, routers, make_domain):
    router = two_lan_router(routers, make_domain(), make_domain())
    requests_endpoint, _ = bus_endpoints(router.name, router.pid, Path(runtime_dir))
    context = zmq.Context()
    try:
        stalled = context.socket(zmq.DEALER)
        stalled.setsockopt(zmq.LINGER, 0)
        stalled.setsockopt(zmq.IDENTITY, b"stalled")
        stalled.setsockopt(zmq.RCVHWM, 1)
        stalled.connect(requests_endpoint)
        payload = bm.encode(bm.Resync("stalled"))
        for _ in range(RESYNCS):
            stalled.send(payload)
        wait_for(lambda: bus_counters()["resyncs"] == RESYNCS, 30, message="every resync read by the supervisor")
        waiting = bus_counters()["outbox_waiting"]
        # state, coalesced: the newest snapshot (and route table, once the router has one) only
        assert 0 < waiting <= 2
        router.wait_for_log("portal stalled is not reading the control bus", 10)
    finally:
        context.destroy()        # the peer goes away with what waits for it unread
    wait_for(lambda: bus_counters()["outbox_waiting"] == 0, 10, message="the outbox of a peer that went away")
    assert bus_counters()["unreachable"] == waiting
    assert f"to workers: 0 waiting, 0 dropped, {waiting} unreachable" in routerctl("status").stdout
