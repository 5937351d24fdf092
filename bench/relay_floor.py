"""The latency floor of the router's shape: the hand-offs a routed message crosses, in bare Python.

A paced message through the router crosses a TCP connection into the ingress worker, a ring and
an eventfd into the egress worker, and a second TCP connection to the receiver; both workers sleep
between messages. Here the same hand-offs carry 64-byte messages with nothing else done (no UM
framing, no lookups, no counters): what any router built as one process per portal pays on this
machine before it does any work. For comparison, one process relaying between the two
connections (one hand-off fewer), and the sender straight to the receiver.

`run_native` measures the same shapes written in C (bench/relay_floor.c, built with the system's
C compiler): the floor of the machine itself, which Python's floor sits on.

Every process is bounded in count and time and killed at the end; used by bench.router_bench.
"""
from __future__ import annotations

import functools
import mmap
import os
import select
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

MESSAGE = 64
STAMP = struct.Struct("q")
DEADLINE = 60.0                     # seconds any one run may take


def _listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _receive(listener: socket.socket, count: int, result_fd: int) -> None:
    """Wait in epoll like umrcv; each message's latency from the stamp the sender put in it."""
    conn, _ = listener.accept()
    poller = select.epoll()
    poller.register(conn.fileno(), select.EPOLLIN)
    buffer = bytearray(1 << 16)
    view = memoryview(buffer)
    latencies, held = [], 0
    deadline = time.monotonic() + DEADLINE
    while len(latencies) < count and time.monotonic() < deadline:
        if not poller.poll(1.0):
            continue
        got = conn.recv_into(view[held:])
        if not got:
            break
        now, held = time.monotonic_ns(), held + got
        whole = held - held % MESSAGE
        latencies += [(now - STAMP.unpack_from(buffer, at)[0]) / 1000 for at in range(0, whole, MESSAGE)]
        buffer[:held - whole] = buffer[whole:held]
        held -= whole
    latencies.sort()
    p50, p99 = (latencies[int(len(latencies) * q)] if latencies else float("nan") for q in (0.5, 0.99))
    os.write(result_fd, struct.pack("ddq", p50, p99, len(latencies)))


def _send(port: int, count: int, rate: float) -> None:
    sock = _connect(port)
    padding = bytes(MESSAGE - STAMP.size)
    for _ in range(count):
        sock.send(STAMP.pack(time.monotonic_ns()) + padding)
        time.sleep(1 / rate)


def _ingress(listener: socket.socket, ring: mmap.mmap, wakeup: int) -> None:
    """Read the connection, append to the shared buffer, publish the end, wake the other process."""
    conn, _ = listener.accept()
    poller = select.epoll()
    poller.register(conn.fileno(), select.EPOLLIN)
    buffer, end = bytearray(1 << 16), 0
    while True:
        poller.poll()
        got = conn.recv_into(buffer)
        if not got or end + got > len(ring) - 8:
            return
        ring[8 + end:8 + end + got] = buffer[:got]
        end += got
        STAMP.pack_into(ring, 0, end)
        os.eventfd_write(wakeup, 1)


def _egress(port: int, ring: mmap.mmap, wakeup: int) -> None:
    """Sleep on the eventfd; send what was published since the last wake-up."""
    sock = _connect(port)
    poller = select.epoll()
    poller.register(wakeup, select.EPOLLIN)
    sent = 0
    while True:
        poller.poll()
        try:
            os.eventfd_read(wakeup)
        except BlockingIOError:
            continue
        end = STAMP.unpack_from(ring, 0)[0]
        sock.sendall(ring[8 + sent:8 + end])
        sent = end


def _relay(listener: socket.socket, port: int) -> None:
    """One process between the two connections."""
    conn, _ = listener.accept()
    out = _connect(port)
    poller = select.epoll()
    poller.register(conn.fileno(), select.EPOLLIN)
    buffer = bytearray(1 << 16)
    view = memoryview(buffer)
    while True:
        poller.poll()
        got = conn.recv_into(buffer)
        if not got:
            return
        out.sendall(view[:got])


def run(shape: str, count: int, rate: float) -> dict:
    """p50/p99 latency (µs) of `count` messages at `rate` a second through `shape`:
    "direct", "one process" or "two processes"."""
    result_r, result_w = os.pipe()
    receiver_listener = _listener()
    children: list[int] = []
    owned: list = [receiver_listener]         # closed in this process at the end

    def fork(target, *args) -> None:
        pid = os.fork()
        if pid == 0:
            try:
                target(*args)
            finally:
                os._exit(0)
        children.append(pid)

    try:
        fork(_receive, receiver_listener, count, result_w)
        port = receiver_listener.getsockname()[1]
        if shape == "two processes":
            ring = mmap.mmap(-1, 8 + count * MESSAGE + (1 << 16))
            wakeup = os.eventfd(0, os.EFD_NONBLOCK)
            front = _listener()
            owned += [ring, front]
            owned.append(_FileDescriptor(wakeup))
            fork(_egress, port, ring, wakeup)
            fork(_ingress, front, ring, wakeup)
            port = front.getsockname()[1]
        elif shape == "one process":
            front = _listener()
            owned.append(front)
            fork(_relay, front, port)
            port = front.getsockname()[1]
        fork(_send, port, count, rate)
        ready, _, _ = select.select([result_r], [], [], DEADLINE + 5)
        if not ready:
            raise RuntimeError(f"the {shape} relay run produced no result within {DEADLINE + 5} s")
        p50, p99, received = struct.unpack("ddq", os.read(result_r, 24))
        return {"p50": round(p50, 1), "p99": round(p99, 1), "received": received}
    finally:
        for pid in children:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
        for thing in owned + [_FileDescriptor(result_r), _FileDescriptor(result_w)]:
            thing.close()


class _FileDescriptor:
    def __init__(self, fd: int):
        self.fd = fd

    def close(self) -> None:
        os.close(self.fd)


NATIVE_SHAPES = {"direct": "direct", "one process": "one", "two processes": "two"}


@functools.cache
def _native_binary() -> str | None:
    """bench/relay_floor.c built once per run (None: no C compiler on this machine)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    binary = Path(tempfile.mkdtemp(prefix="relay-floor-")) / "relay_floor"
    subprocess.run([compiler, "-O2", "-o", str(binary), str(Path(__file__).with_suffix(".c"))],
                   check=True, capture_output=True, timeout=120)
    return str(binary)


def run_native(shape: str, count: int, rate: float) -> dict | None:
    """Like run(), in C; None when there is no C compiler."""
    binary = _native_binary()
    if binary is None:
        return None
    out = subprocess.run([binary, NATIVE_SHAPES[shape], str(count), str(int(rate))], capture_output=True,
                         text=True, timeout=DEADLINE + 5)
    words = out.stdout.split()
    if len(words) != 6:
        raise RuntimeError(f"relay_floor ({shape}) printed {out.stdout!r}, stderr {out.stderr!r}")
    return {"p50": float(words[1]), "p99": float(words[3]), "received": int(words[5])}
