"""A router's proxy source holds what it sends while no receiver is connected (the receiver that
caused it connects only once it has heard its advertisement); an application's source does not."""
import socket
import time

from router.um.tcp_source import TcpSourceSession
from router.um.wire.lbmc import LBMC_TYPE_CONTROL, LBMC_TYPE_MESSAGE, MESSAGE_HEADER

from tests.support.processes import wait_for


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


def _fill(session, sock: socket.socket, queued_at_least: int = 1) -> int:
    """Send until the receiver's socket buffers are full and the session queues at least
    `queued_at_least` bytes; the next number."""
    number = 0
    while sum(len(c.queue) for c in session.connections) < queued_at_least:
        session.send(1, number, bytes(60_000), flush=True)
        number += 1
        assert number < 10_000, "the session never queued"
    return number


def test_closed_from_its_loop_it_does_not_wait_and_a_reading_receiver_still_gets_everything(loop, domain):
    """A router deletes its last proxy source on a session from the loop's own thread: close must
    not block that thread (every portal of the worker would stall) yet a receiver that is merely
    behind still gets all that was queued for it, then the end of the session."""
    session = _session(loop, domain, send_buffer=65536)       # fixed buffers: the queue cannot vanish into them
    with socket.socket() as receiver:
        receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        receiver.connect(("127.0.0.1", session.port))
        wait_for(lambda: session.receiver_count == 1, 10, message="the receiver connected")
        sent = _fill(session, receiver, queued_at_least=256 * 1024)
        loop.call_and_wait(session.close)                 # returns with data still queued
        assert session.connections and any(c.queue for c in session.connections)
        assert len(_messages(receiver, sent, timeout=30)) == sent, "everything queued was delivered"
        receiver.settimeout(10)
        wait_for(lambda: not session.connections, 10, message="the session hung up once drained")
        assert session.counters["dropped_would_block_bytes"] == 0


def test_closed_from_its_loop_what_a_stuck_receiver_never_takes_is_dropped_and_counted(loop, domain, caplog,
                                                                                       monkeypatch):
    monkeypatch.setattr("router.um.tcp_source.CLOSE_DRAIN_TIMEOUT", 0.5)
    # Both ends' buffers fixed and far more queued than they hold: with the kernel's autotuned
    # buffers a few bytes queued at the fill's end could still fit in a grown send buffer.
    session = _session(loop, domain, send_buffer=65536)
    with socket.socket() as stuck:                                           # never reads
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        stuck.connect(("127.0.0.1", session.port))
        wait_for(lambda: session.receiver_count == 1, 10, message="the receiver connected")
        _fill(session, stuck, queued_at_least=1024 * 1024)
        queued = sum(len(c.queue) for c in session.connections)
        loop.call_and_wait(session.close)
        wait_for(lambda: not session.connections, 10, message="closed at the drain timeout")
    assert session.counters["dropped_would_block_bytes"] >= queued > 0
    assert any("had not taken within" in r.getMessage() for r in caplog.records), caplog.text
