"""Transports under pressure: a TCP stream that lost fragments upstream does not keep their
messages' partial buffers, and a publisher waiting for a slow TCP receiver, or for an LBT-RM or
LBT-RU data rate, never stops its context's event loop (timers, new receivers, the batching timer)."""
import socket
import threading
from types import SimpleNamespace

import pytest

from router.um.lbtrm_source import LbtrmSourceSession
from router.um.lbtru_source import LbtruSourceSession
from router.um.sequence_info import SequenceInfo
from router.um.tcp_source import TcpSourceSession
from router.um.wire.lbmc import MESSAGE_HEADER
from tests.support.processes import wait_for
from tests.um.test_frame_stream import _fragment, _Messages, _Stream


def _message(tidx: int, first: int, pieces: int, size: int, lose=()) -> bytes:
    """A message of `pieces` fragments of `size` bytes from sequence number `first`, without the
    fragments numbered in `lose` (a router dropped them)."""
    return b"".join(_fragment(tidx, first + n, first, n * size, pieces * size, bytes([n]) * size)
                    for n in range(pieces) if first + n not in lose)


def test_a_tcp_stream_does_not_keep_messages_whose_fragments_were_dropped_upstream():
    """On TCP (or LBT-IPC) a router drops a slow receiver's batches, fragments of a large message
    among them: the receiver is told the gap, and the message can never complete. Its partial
    reassembly (a buffer of the whole message's size) must not be kept for the stream's life:
    a TCP stream has no timer that expires them (LBT-RM's has)."""
    stream = _Stream(None, ("test",), lambda s: None)
    sub = _Messages()
    stream.subscribe(1, sub)
    sqn = 0
    for n in range(50):
        lost = {sqn + 1} if n % 2 == 0 else {sqn} if n % 3 == 0 else set()   # a middle or a first fragment
        stream._parse(_message(1, sqn, 3, 1000, lose=lost))
        sqn += 3
    whole = [first for first, _ in sub.messages]
    assert whole == [n * 3 for n in range(50) if n % 2 and n % 3]
    assert len(sub.gaps) == sum(1 for n in range(50) if n % 2 == 0 or n % 3 == 0)
    assert len(stream.fragments) <= 1, f"{len(stream.fragments)} dead partial messages kept"
    stream._parse(_message(1, sqn, 3, 1000))          # and the next whole one still arrives
    assert sub.messages[-1] == (sqn, bytes(1000) + bytes([1]) * 1000 + bytes([2]) * 1000)
    assert not stream.fragments


# -- a publisher waiting on a slow TCP receiver must not stop its context's loop ----------------


class _Publisher:
    """An application's thread sending on a TCP session (overflow "block") until its receiver,
    which never reads, makes it wait: UM's flow control."""

    def __init__(self, session: TcpSourceSession):
        self.session, self.sent, self.stop = session, 0, False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        payload = b"x" * 4000
        while not self.stop and not self.session.closed:
            self.session.send(1, self.sent, payload)
            self.sent += 1

    def blocked(self) -> bool:
        """Waiting in flow control: the receiver's queue is past half its limit and not taken."""
        connections = self.session.connections
        return bool(connections) and len(connections[0].queue) > self.session.max_queue // 2


def _slow_receiver(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    return sock


def _loop_runs(loop) -> bool:
    try:
        loop.call_and_wait(lambda: None, timeout=5.0)
        return True
    except TimeoutError:
        return False


@pytest.mark.parametrize("what", ["tsni", "second receiver"])
def test_a_publisher_blocked_by_a_slow_tcp_receiver_does_not_stop_the_loop(loop, domain, what):
    """The publisher's thread waits in flow control holding its session's lock; the loop's own
    work on that session (the TSNI timer every `transport_topic_sequence_number_info_interval`,
    accepting another receiver) must not wait for that lock: the loop runs every other source,
    receiver and the topic resolution of the context, and a receiver of that same context on
    the slow stream would never read again (deadlock)."""
    session = TcpSourceSession(loop, "127.0.0.1", domain.tcp_low, domain.tcp_high, batching_minimum_length=1,
                               overflow="block", max_queue=256 * 1024)
    slow = _slow_receiver(session.port)
    others = []
    publisher = None
    try:
        wait_for(lambda: session.receiver_count == 1, 5, message="the slow receiver connected")
        if what == "tsni":
            source = SimpleNamespace(last_sequence_number=lambda: publisher.sent - 1 if publisher.sent else None)
            info = SequenceInfo(session, 0.02, 0.0)
            loop.call_and_wait(info.add, 1, source)
        publisher = _Publisher(session)
        wait_for(publisher.blocked, 10, message="the publisher waiting for its slow receiver")
        if what == "second receiver":
            others.append(socket.create_connection(("127.0.0.1", session.port)))
        for _ in range(3):                  # several TSNI ticks, or the accept, came meanwhile
            assert _loop_runs(loop), "the loop stopped while a publisher waited for a slow receiver"
        assert publisher.thread.is_alive()      # still waiting: nothing was dropped
    finally:
        if publisher is not None:
            publisher.stop = True
        slow.close()                        # the publisher's wait ends: its connection broke
        for sock in others:
            sock.close()
        if publisher is not None:
            publisher.thread.join(10)
        session.close()


def test_the_batching_timer_does_not_wait_on_the_loop_for_a_slow_tcp_receiver(loop, domain):
    """A message too small to fill a batch is sent by the implicit batching timer, on the loop's
    thread. When the slow receiver's queue has no room for it, an application's session waits
    for room (flow control); the loop must not: it queues it past the limit (a batch shorter
    than `implicit_batching_minimum_length`), and the publisher's next send waits instead."""
    session = TcpSourceSession(loop, "127.0.0.1", domain.tcp_low, domain.tcp_high,
                               batching_minimum_length=64 * 1024, batching_interval=0.01,
                               overflow="block", max_queue=256 * 1024)
    slow = _slow_receiver(session.port)
    try:
        wait_for(lambda: session.receiver_count == 1, 5, message="the slow receiver connected")
        connection = session.connections[0]
        payload, sqn = b"x" * 4000, 0
        while len(connection.queue) + 2 * (len(payload) + 12) <= session.max_queue:
            session.send(1, sqn, payload, flush=True)     # fills the socket, then the queue (no wait)
            sqn += 1
        session.send(1, sqn, payload + payload)           # no room: the timer sends it
        wait_for(lambda: not session.batch, 5, message="the batching timer's flush")
        assert _loop_runs(loop), "the batching timer waited on the loop for a slow receiver"
        assert len(connection.queue) > session.max_queue - 2 * (len(payload) + 12)
    finally:
        slow.close()
        session.close()


# -- an application's LBT-RM / LBT-RU session waiting for its data rate must not stop the loop ----


def _rate_limited_session(kind: str, loop, domain):
    """An application's session (overflow "block") at 4 kbit/s: one 8 KB datagram empties its
    bucket, and the next few KB wait seconds for the rate."""
    options = dict(datagram_max_size=8192, data_rate_limit=4000, rate_interval=0.1,
                   batching_minimum_length=8192, batching_interval=0.01, overflow="block")
    if kind == "lbtrm":
        return LbtrmSourceSession(loop, "127.0.0.1", domain.lbtrm_group, domain.port, domain.tcp_low,
                                  domain.tcp_high, **options)
    return LbtruSourceSession(loop, "127.0.0.1", domain.tcp_low, domain.tcp_high, **options)


@pytest.mark.parametrize("kind", ["lbtrm", "lbtru"])
def test_the_batching_timer_does_not_sleep_on_the_loop_for_the_data_rate(loop, domain, kind):
    """A message too small to fill a batch is sent by the implicit batching timer, on the loop's
    thread. When the data rate is spent, an application's thread waits for it; the loop must not
    (it runs every other session, receiver and the topic resolution of the context): the batch
    waits in the session's queue and goes when the rate allows, in order."""
    session = _rate_limited_session(kind, loop, domain)
    try:
        session.send(1, 0, b"a" * 7000, flush=True)        # empties the bucket
        assert session.counters["msgs_sent"] == 1
        session.send(1, 1, b"b" * 3000)                    # short: the timer sends it, seconds away
        wait_for(lambda: not session.batch, 5, message="the batching timer's flush")
        sent = loop.call_and_wait(lambda: session.counters["msgs_sent"], timeout=5.0)
        assert sent == 1, "the loop slept until the data rate let the batching timer's datagram go"
        assert session.pending_bytes > 0                   # it waits for the rate, queued
        session.data_rate.rate = 0                         # (no more waiting in this test)
        session.send(1, 2, b"c" * 10, flush=True)          # the application's next send goes after it
        with session.window_lock:
            datagrams = list(session.window.values())
        assert [d[session.header_size + MESSAGE_HEADER.size:][:1] for d in datagrams] == [b"a", b"b", b"c"]
        assert not session.pending
    finally:
        session.data_rate.rate = 0                         # what waits goes at once: a quick close
        session.close()
