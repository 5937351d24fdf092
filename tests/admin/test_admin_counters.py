"""What the admin socket refused or lost shows in `routerctl status`: requests it answered with an
error, and frames ZeroMQ cut off (a frame over HARD_FRAME_LIMIT: libzmq drops its sender's
connection and the frame without a word to the router), which are logged as well."""
import socket
from pathlib import Path

import pytest
import zmq

from router.admin.protocol import MAX_REQUEST_BYTES, Errno, decode_reply, encode_request
from router.admin.server import HARD_FRAME_LIMIT
from router.runtime import bus_endpoints
from tests.support.processes import wait_for
from tests.support.routerctl import routerctl, two_lan_router

pytestmark = pytest.mark.integration


def admin_counters() -> dict:
    return routerctl("--json", "status").json()["admin"]


def ask(endpoint: str, frame: bytes) -> dict:
    """Send one frame on a connection of its own; the reply."""
    context = zmq.Context()
    try:
        dealer = context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(endpoint)
        dealer.send(frame)
        assert dealer.poll(10_000), "no reply"
        return decode_reply(dealer.recv())
    finally:
        context.destroy()


def send_cut_off(endpoint: str) -> None:
    """A frame over the limit ZeroMQ enforces, on a connection of its own."""
    context = zmq.Context()
    try:
        dealer = context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 10_000)        # the whole frame leaves before the socket closes
        dealer.connect(endpoint)
        dealer.send(b"\x00" * (HARD_FRAME_LIMIT + 1))
        dealer.close()
    finally:
        context.term()


def test_status_shows_the_requests_read_and_rejected(runtime_dir, routers, make_domain):
    router = two_lan_router(routers, make_domain(), make_domain())
    endpoint = f"ipc://{runtime_dir}/{router.name}.admin"
    assert ask(endpoint, b"x" * (MAX_REQUEST_BYTES + 1))["errno"] == Errno.REQUEST_TOO_LARGE
    assert ask(endpoint, encode_request(1, "status"))["status"] == "ok"

    counters = admin_counters()               # this request is read before status is taken
    assert (counters["requests"], counters["rejected"]) == (3, 1), counters
    text = routerctl("status").stdout
    assert "4 requests, 1 rejected, 0 cut off" in text, text


def test_a_frame_zeromq_cuts_off_is_counted_and_logged(runtime_dir, routers, make_domain):
    router = two_lan_router(routers, make_domain(), make_domain())
    endpoint = f"ipc://{runtime_dir}/{router.name}.admin"
    send_cut_off(endpoint)
    wait_for(lambda: admin_counters()["cut_off"] >= 1, 10, message="the cut-off frame counted")
    router.wait_for_log("cut off by ZeroMQ", 10)

    # Neither clients that were answered nor probes that never spoke ZeroMQ count as cut off. Ends
    # are judged in order: once a second cut-off frame is counted, theirs were judged before it.
    with socket.socket(socket.AF_UNIX) as probe:
        probe.connect(endpoint[len("ipc://"):])
    for _ in range(3):
        assert ask(endpoint, encode_request(1, "status"))["status"] == "ok"
    send_cut_off(endpoint)
    wait_for(lambda: admin_counters()["cut_off"] >= 2, 10, message="the second cut-off frame counted")
    assert admin_counters()["cut_off"] == 2


def test_status_shows_the_malformed_messages_the_control_bus_dropped(runtime_dir, routers, make_domain):
    router = two_lan_router(routers, make_domain(), make_domain())
    requests_endpoint, _ = bus_endpoints(router.name, router.pid, Path(runtime_dir))
    context = zmq.Context()
    try:
        intruder = context.socket(zmq.DEALER)
        intruder.setsockopt(zmq.LINGER, 1000)
        intruder.connect(requests_endpoint)
        intruder.send(b"not a bus message")
        intruder.send_multipart([b"two", b"frames"])
        intruder.close()
    finally:
        context.term()
    wait_for(lambda: routerctl("--json", "status").json()["bus"]["malformed"] == 2, 10,
             message="both malformed bus messages counted")
    router.wait_for_log("malformed bus message", 10)
    assert "2 malformed, 0 resyncs" in routerctl("status").stdout
