"""A TCP source whose receivers' sockets are numbered past 1024, as in a router with many sessions
or a busy application: waiting for them to drain must sleep, not spin (select() refuses descriptors
from 1024 on; poll does not)."""
import os
import socket
import time

from router.um.tcp_source import TcpSourceSession

from tests.support.processes import wait_for


def test_waiting_for_a_receiver_numbered_past_1024_to_drain_sleeps(loop, domain):
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]      # the next descriptors are > 1024
    session = TcpSourceSession(loop, "127.0.0.1", domain.tcp_low, domain.tcp_high, batching_minimum_length=1,
                               overflow="drop", max_queue=64 << 20)
    slow = socket.socket()
    try:
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(("127.0.0.1", session.port))                # and never reads
        wait_for(lambda: session.receiver_count == 1, 10, message="the loop accepted the receiver")
        assert max(c.sock.fileno() for c in session.connections) > 1024
        number = 0
        while session.queued_for_receivers() < 8 << 20 and number < 20_000:     # beyond any socket buffer
            session.send(1, number, b"x" * 4000, flush=True)
            number += 1
        assert session.queued_for_receivers() >= 8 << 20, "the receiver's socket never filled"
        began, cpu_began = time.monotonic(), time.thread_time()
        assert not session.wait_drained(0, timeout=1.0)         # nobody reads: it times out
        waited, cpu = time.monotonic() - began, time.thread_time() - cpu_began
        assert cpu < 0.5 * waited, f"waiting {waited:.2f} s took {cpu:.2f} s of CPU: it spun"
    finally:
        slow.close()
        session.close()
        for fd in filler:
            os.close(fd)
