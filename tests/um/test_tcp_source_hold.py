"""A router's proxy source holds what it sends while no receiver is connected (the receiver that
caused it connects only once it has heard its advertisement); an application's source does not."""
import socket
import time

import pytest

from router.um.loop import EventLoop
from router.um.tcp_source import TcpSourceSession
from router.um.wire.lbmc import LBMC_TYPE_CONTROL, LBMC_TYPE_MESSAGE, MESSAGE_HEADER

from tests.support.processes import wait_for


@pytest.fixture
def loop():
    loop = EventLoop("hold-test")
    loop.start_thread()
    yield loop
    loop.close()


def _session(loop, domain, **kwargs) -> TcpSourceSession:
    return TcpSourceSession(loop, "127.0.0.1", domain.tcp_low, domain.tcp_high, batching_minimum_length=1,
                            overflow="drop", **kwargs)


def _messages(sock: socket.socket, wanted: int, timeout: float = 10.0) -> list[bytes]:
    """Payloads of the first `wanted` MESSAGE frames on the stream (controls skipped)."""
    sock.settimeout(0.2)
    buffer, payloads, deadline = b"", [], time.monotonic() + timeout
    while len(payloads) < wanted and time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        if not chunk:
            break
        buffer += chunk
        while len(buffer) >= 4 and len(buffer) >= (length := int.from_bytes(buffer[2:4], "big")):
            if buffer[0] == LBMC_TYPE_MESSAGE:
                payloads.append(buffer[MESSAGE_HEADER.size:length])
            else:
                assert buffer[0] == LBMC_TYPE_CONTROL          # the TCP_SID first
            buffer = buffer[length:]
    return payloads


def test_what_is_sent_before_any_receiver_goes_to_the_first_one_in_order(loop, domain):
    session = _session(loop, domain, hold_for_receiver=30.0)
    try:
        for number in range(3):
            session.send(1, number, b"early %d" % number, flush=True)
        with socket.create_connection(("127.0.0.1", session.port)) as first:
            session.send(1, 3, b"late", flush=True)         # held too if the loop has not accepted yet
            assert _messages(first, 4) == [b"early 0", b"early 1", b"early 2", b"late"]
        assert session.counters["held_batches_delivered"] in (3, 4)
    finally:
        session.close()


def test_held_data_is_bounded_by_max_queue_keeping_the_newest(loop, domain):
    session = _session(loop, domain, hold_for_receiver=30.0, max_queue=100)
    try:
        for number in range(10):
            session.send(1, number, b"%02d" % number + b"." * 30, flush=True)     # 12 + 32 bytes a batch
        with socket.create_connection(("127.0.0.1", session.port)) as first:
            wait_for(lambda: session.receiver_count == 1, 10, message="the loop accepted the receiver")
            session.send(1, 10, b"10", flush=True)
            assert [p[:2] for p in _messages(first, 3)] == [b"08", b"09", b"10"]
        assert session.counters["held_batches_expired"] == 8
    finally:
        session.close()


def test_an_application_source_sends_only_to_receivers_already_there(loop, domain):
    session = _session(loop, domain)
    try:
        session.send(1, 0, b"before", flush=True)
        with socket.create_connection(("127.0.0.1", session.port)) as first:
            wait_for(lambda: session.receiver_count == 1, 10, message="the loop accepted the receiver")
            session.send(1, 1, b"after", flush=True)
            assert _messages(first, 1) == [b"after"]
    finally:
        session.close()
