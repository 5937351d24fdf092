"""Random frames at the admin socket: every request gets an error reply, and the router keeps serving."""
import random
import socket
import time

import msgpack
import pytest
import zmq

from router.admin.protocol import MAX_REQUEST_BYTES, Errno, decode_reply, encode_request
from tests.support.routerctl import routerctl, two_lan_router

pytestmark = pytest.mark.integration

MESSAGES = 400
DEADLINE = 30.0


def random_request(rng: random.Random) -> list[bytes]:
    kind = rng.randrange(7)
    if kind == 0:
        return [rng.randbytes(rng.randrange(0, 300))]
    if kind == 1:
        return [rng.randbytes(rng.randrange(0, 50)) for _ in range(rng.randrange(2, 5))]
    if kind == 2:
        return [b"", rng.randbytes(rng.randrange(1, 100)), rng.randbytes(3)]
    if kind == 3:
        return [b"x" * (MAX_REQUEST_BYTES + rng.randrange(1, 1000))]
    if kind == 4:
        junk = rng.choice([None, 1, -1, 2**63, "status", ["topics"], {"a": 1}, b"\x00", 1.5, True])
        return [msgpack.packb({"id": junk, "command": rng.choice(["status", "topics", "", "x" * 300, junk]),
                               "props": rng.choice([{}, None, {"portal": junk}, junk])}, use_bin_type=True)]
    if kind == 5:
        packed = bytearray(encode_request(rng.randrange(100), rng.choice(["stats", "topics", "portals"]),
                                          {"portal": "LAN1"}))
        packed[rng.randrange(len(packed))] = rng.randrange(256)          # one corrupted byte
        return [bytes(packed)]
    return [msgpack.packb(rng.choice([[], {}, "status", 7, [1, {"command": "status"}]]))]


def test_random_frames_get_error_replies_and_the_router_keeps_serving(runtime_dir, routers, make_domain):
    router = two_lan_router(routers, make_domain(), make_domain())
    status_before = routerctl("--json", "status").json()
    endpoint = f"ipc://{runtime_dir}/{router.name}.admin"
    rng = random.Random(20261122)
    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(endpoint)
    try:
        for _ in range(MESSAGES):
            dealer.send_multipart(random_request(rng))
        replies, deadline = [], time.monotonic() + DEADLINE
        while len(replies) < MESSAGES and time.monotonic() < deadline:
            if dealer.poll(200):
                frames = dealer.recv_multipart()
                replies.append(decode_reply(frames[-1]))
        assert len(replies) == MESSAGES, f"{len(replies)} replies to {MESSAGES} requests"
        assert all(r["errno"] in set(Errno) and r["errno"] != Errno.COMMAND_FAILED for r in replies), \
            [r for r in replies if r["errno"] == Errno.COMMAND_FAILED][:3]
        assert any(r["errno"] == Errno.REQUEST_TOO_LARGE for r in replies)

        # Not ZeroMQ at all: garbage on the socket file, half-open connections.
        path = endpoint[len("ipc://"):]
        for _ in range(20):
            with socket.socket(socket.AF_UNIX) as raw:
                raw.connect(path)
                raw.sendall(rng.randbytes(rng.randrange(1, 600)))
        # A frame far beyond any request: ZeroMQ disconnects the sender, the router is unharmed.
        huge = context.socket(zmq.DEALER)
        huge.setsockopt(zmq.LINGER, 0)
        huge.connect(endpoint)
        huge.send(b"\x00" * (40 * MAX_REQUEST_BYTES))
        huge.close()

        # A REQ client (empty delimiter) is served too.
        req = context.socket(zmq.REQ)
        req.setsockopt(zmq.LINGER, 0)
        req.connect(endpoint)
        req.send(encode_request(1, "status"))
        assert req.poll(10_000), "no reply to a REQ client"
        assert decode_reply(req.recv())["data"]["router"] == router.name
        req.close()
    finally:
        dealer.close()
        context.term()

    status_after = routerctl("--json", "status").json()
    assert router.tool.proc.poll() is None, router.log()
    assert [p["pid"] for p in status_after["portals"]] == [p["pid"] for p in status_before["portals"]]
    assert "Traceback" not in router.log(), router.log()
