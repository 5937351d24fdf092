"""The comparison the router is measured against: a ZeroMQ XSUB/XPUB proxy relaying the same
payloads (source id, sequence number, send time) from a PUB to a SUB, each in its own process.

    python -m bench.zmq_relay proxy  FRONTEND BACKEND
    python -m bench.zmq_relay pub    FRONTEND COUNT LENGTH RATE
    python -m bench.zmq_relay sub    BACKEND COUNT TIMEOUT      (prints the umrcv-style JSON summary)
"""
from __future__ import annotations

import json
import sys
import time

import zmq

from router.cli import payload
from router.cli.receive_stats import ReceiveStats
from router.gc_tuning import tune_for_message_rates
from router.um.messages import Message

TOPIC = b"bench"


def proxy(frontend: str, backend: str) -> None:
    context = zmq.Context()
    xsub, xpub = context.socket(zmq.XSUB), context.socket(zmq.XPUB)
    for sock in (xsub, xpub):
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)      # no silent drops: the comparison is at zero loss
    xsub.bind(frontend)
    xpub.bind(backend)
    zmq.proxy(xsub, xpub)


def publish(frontend: str, count: int, length: int, rate: float) -> None:
    context = zmq.Context()
    pub = context.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    pub.connect(frontend)
    tune_for_message_rates()     # as umsrc and umrcv: the same application on another transport
    time.sleep(1.0)          # PUB/SUB has no join handshake: give the subscription time to arrive
    buffer = payload.make_buffer(length)
    interval = 1.0 / rate if rate else 0.0
    next_send = time.perf_counter()
    for seq in range(count):
        if interval:
            now = time.perf_counter()
            if next_send > now:
                time.sleep(next_send - now)
            next_send += interval
        payload.pack_into(buffer, 0, 7, seq, time.time_ns())
        # copy=True: pyzmq itself sends without copying from its copy_threshold (64 KB) up, and
        # copying is the faster way below it (about 100 ns a message less at 64 B than copy=False).
        pub.send(bytes(buffer))
    time.sleep(0.5)
    pub.close(linger=5000)
    context.term()


def subscribe(backend: str, count: int, timeout: float) -> None:
    context = zmq.Context()
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(backend)
    stats = ReceiveStats()
    tune_for_message_rates()
    deadline = time.monotonic() + timeout
    poller = zmq.Poller()
    poller.register(sub, zmq.POLLIN)
    while stats.received < count and time.monotonic() < deadline:
        if not poller.poll(100):
            continue
        batch = []
        try:
            while len(batch) < 1024:
                batch.append(Message("bench", "zmq", 0, sub.recv(zmq.NOBLOCK)))
        except zmq.Again:
            pass
        stats.on_batch(batch)
    print(json.dumps(stats.summary()), flush=True)
    sub.close(0)
    context.term()


if __name__ == "__main__":
    role, *rest = sys.argv[1:]
    if role == "proxy":
        proxy(*rest)
    elif role == "pub":
        publish(rest[0], int(rest[1]), int(rest[2]), float(rest[3]))
    elif role == "sub":
        subscribe(rest[0], int(rest[1]), float(rest[2]))
    else:
        raise SystemExit(__doc__)
