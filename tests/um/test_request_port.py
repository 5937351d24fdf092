"""A request port's connection (router/um/request_port.py) putting responses in pieces back together:
a response is delivered once every byte of it came, and a stream that contradicts itself is closed;
and the port itself, holding no more than its connections from clients that never send."""
import logging
import socket

import pytest

from router.um.request_port import MalformedResponse, RequestPort, UimConnection
from router.um.requests import message_frames
from tests.support.processes import wait_for


def response_frames(qidx: int, sqn: int, payload: bytes, max_size: int) -> list[bytes]:
    return [head + bytes(piece) for head, piece in message_frames(qidx, sqn, payload, max_size)]


def connection():
    delivered = []
    counters = {"response_frames_unknown": 0}
    return UimConnection(None, ("10.0.0.9", 40000), lambda qidx, data, source: delivered.append((qidx, data)),
                         counters), delivered


def test_a_piece_that_comes_twice_does_not_complete_a_response():
    conn, delivered = connection()
    body = bytes(range(256)) * 40                                  # 10,240 bytes: three pieces of 4 KB
    pieces = response_frames(7, 0, body, 4096)
    assert len(pieces) == 3
    conn.take(pieces[0] + pieces[0] + pieces[1])
    assert delivered == []                                         # the last third never came
    conn.take(pieces[2])
    assert delivered == [(7, body)] and not conn.partial and conn.partial_bytes == 0


def test_a_piece_of_another_length_under_the_same_key_breaks_the_stream():
    conn, delivered = connection()
    first = response_frames(7, 0, b"a" * 10_000, 4096)[0]
    other = response_frames(7, 0, b"b" * 9_000, 4096)[1]          # same (qidx, first_sqn), 9,000 bytes long
    conn.take(first)
    with pytest.raises(MalformedResponse, match="9000-byte response where one of 10000 bytes"):
        conn.take(other)
    assert delivered == []


@pytest.mark.integration
def test_clients_that_connect_and_never_send_cannot_hold_more_than_the_ports_connections(domain, loop):
    """A client that connects again and again and never sends (or responders whose hosts vanished
    without a word: the requester never sends, so it never notices) would hold a descriptor per
    connection for good. Past max_connections, the connection silent the longest is closed and
    counted; one that has just delivered a response is kept."""
    responses = []
    port = loop.call_and_wait(lambda: RequestPort(loop, "127.0.0.1", domain.request_low, domain.request_high,
                                                  lambda qidx, data, source: responses.append((qidx, data)),
                                                  max_connections=3))
    clients = []
    try:
        active = socket.create_connection(port.address, timeout=10)
        clients.append(active)
        silent = [socket.create_connection(port.address, timeout=10) for _ in range(2)]
        clients += silent
        wait_for(lambda: len(port.connections) == 3, 10, message="three connections accepted")
        active.sendall(response_frames(9, 0, b"still here", 65535)[0])
        wait_for(lambda: responses == [(9, b"still here")], 10, message="the active client's response")
        for _ in range(2):                      # each newcomer costs the one silent the longest
            clients.append(socket.create_connection(port.address, timeout=10))
        # Asked on the port's loop: between an eviction and the newcomer's arrival it holds two.
        wait_for(lambda: loop.call_and_wait(lambda: (port.counters["response_connections_evicted"],
                                                     len(port.connections))) == (2, 3), 10, message="two evicted")
        for gone in silent:
            assert gone.recv(10) == b""         # hung up on
        active.sendall(response_frames(9, 1, b"and again", 65535)[0])
        wait_for(lambda: len(responses) == 2, 10, message="the active client is still heard")
        assert responses[1] == (9, b"and again")
    finally:
        for client in clients:
            client.close()
        loop.call_and_wait(port.close)


@pytest.mark.integration
def test_responses_in_pieces_on_many_connections_hold_no_more_than_the_ports_share(domain, loop):
    """A first piece is one small frame that may claim a 64 MB response: without a bound for the
    whole port, every connection could make the requester set aside that much. A piece that would
    take the port past max_partial_bytes is refused (counted, its connection closed); what the
    others hold completes, and what a closed connection held is given back."""
    responses = []
    port = loop.call_and_wait(lambda: RequestPort(loop, "127.0.0.1", domain.request_low, domain.request_high,
                                                  lambda qidx, data, source: responses.append((qidx, data)),
                                                  max_partial_bytes=1_000_000))
    bodies = [bytes([n]) * 400_000 for n in range(3)]
    pieces = [response_frames(n + 1, 0, body, 65535) for n, body in enumerate(bodies)]
    clients = []
    try:
        clients = [socket.create_connection(port.address, timeout=10) for _ in range(3)]
        for client, frames in zip(clients[:2], pieces):
            client.sendall(frames[0])
        wait_for(lambda: sum(c.partial_bytes for _, c in list(port.connections.values())) == 800_000, 10,
                 message="two responses begun")
        clients[2].sendall(pieces[2][0])                    # 1,200,000 bytes in all: one too many
        assert clients[2].recv(10) == b""
        assert port.counters["responses_malformed"] == 1
        clients[0].close()                                  # what it held is given back
        wait_for(lambda: len(port.connections) == 1, 10, message="the first client gone")
        clients[1].sendall(b"".join(pieces[1][1:]))
        wait_for(lambda: responses == [(2, bodies[1])], 10, message="the second response whole")
        again = socket.create_connection(port.address, timeout=10)
        clients.append(again)
        again.sendall(b"".join(pieces[2]))
        wait_for(lambda: len(responses) == 2, 10, message="a response the port has room for again")
        assert responses[1] == (3, bodies[2]) and port.counters["responses_malformed"] == 1
    finally:
        for client in clients:
            client.close()
        loop.call_and_wait(port.close)


def _port_log_lines(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "router.um.request_port"]


@pytest.mark.integration
def test_a_client_sending_garbage_in_a_loop_is_counted_each_time_and_logged_once(domain, loop, caplog):
    """Each refused stream was a warning of its own: a client reconnecting in a loop filled the log.
    The counter has every refusal; the log one line per interval."""
    caplog.set_level(logging.DEBUG, logger="router.um.request_port")
    port = loop.call_and_wait(lambda: RequestPort(loop, "127.0.0.1", domain.request_low, domain.request_high,
                                                  lambda qidx, data, source: None))
    try:
        for refused in range(1, 6):
            with socket.create_connection(port.address, timeout=10) as client:
                client.sendall(b"\x00\x00\x00\x01")         # a frame length below its own header
                assert client.recv(10) == b""               # hung up on
            wait_for(lambda: loop.call_and_wait(lambda: port.counters["responses_malformed"]) == refused, 10,
                     message=f"refusal {refused} counted")
        lines = _port_log_lines(caplog)
        assert len(lines) == 1 and "refused (frame length 1)" in lines[0], lines
    finally:
        loop.call_and_wait(port.close)


@pytest.mark.integration
def test_clients_evicted_in_a_loop_are_counted_each_time_and_logged_once(domain, loop, caplog):
    caplog.set_level(logging.DEBUG, logger="router.um.request_port")
    port = loop.call_and_wait(lambda: RequestPort(loop, "127.0.0.1", domain.request_low, domain.request_high,
                                                  lambda qidx, data, source: None, max_connections=1))
    clients = []
    try:
        for evicted in range(6):
            clients.append(socket.create_connection(port.address, timeout=10))
            wait_for(lambda: loop.call_and_wait(lambda: (port.counters["response_connections"],
                                                         port.counters["response_connections_evicted"]))
                     == (evicted + 1, evicted), 10, message=f"connection {evicted + 1} accepted")
        lines = _port_log_lines(caplog)
        assert len(lines) == 1 and "silent the longest, closed (1 so far)" in lines[0], lines
    finally:
        for client in clients:
            client.close()
        loop.call_and_wait(port.close)


def _failing_callback(*args):
    raise ValueError("the handler's own mistake")


@pytest.mark.integration
@pytest.mark.parametrize("failing", ["on_response", "on_other"])
def test_a_callback_failing_on_every_frame_is_counted_each_time_and_logged_once(domain, loop, caplog, failing):
    """Each failure was a traceback of its own, counted nowhere: a client sending what the handler
    trips on (a response, or a frame that is not one) filled the log with one per frame."""
    caplog.set_level(logging.DEBUG, logger="router.um.request_port")
    callbacks = {"on_response": lambda qidx, data, source: None, "on_other": lambda frame, connection: None}
    callbacks[failing] = _failing_callback
    port = loop.call_and_wait(lambda: RequestPort(loop, "127.0.0.1", domain.request_low, domain.request_high,
                                                  **callbacks))
    qidx = 7 if failing == "on_response" else 0         # a request index is never 0: not a response
    try:
        with socket.create_connection(port.address, timeout=10) as client:
            client.sendall(b"".join(response_frames(qidx, sqn, b"answer", 8192)[0] for sqn in range(5)))
            wait_for(lambda: loop.call_and_wait(lambda: port.counters["callback_errors"]) == 5, 10,
                     message="every failure counted")
        lines = _port_log_lines(caplog)
        assert len(lines) == 1 and "(1 so far)" in lines[0], lines
    finally:
        loop.call_and_wait(port.close)
