"""The responder when the host refuses it a socket (the open-files limit reached, EMFILE): what
was to be sent is dropped, counted and told to whoever sent it, as any response that cannot be
sent; it does not fail the loop's callback, and the next response goes out."""
from __future__ import annotations

import errno
import socket
import threading

import pytest

from router.um import responder
from router.um.requests import RequestOrigin
from router.um.responder import ResponseSender
from tests.support.processes import wait_for


class _SocketsRefusedOnce:
    """The socket module as the responder sees it, but its first new socket is refused."""

    def __init__(self):
        self.refused = False

    def __getattr__(self, name):
        return getattr(socket, name)

    def socket(self, *args, **kwargs):
        if not self.refused:
            self.refused = True
            raise OSError(errno.EMFILE, "Too many open files")
        return socket.socket(*args, **kwargs)


@pytest.fixture
def requester():
    """A request port: a listening socket that reads whatever comes to it."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    received = bytearray()

    def serve() -> None:
        try:
            connection, _ = listener.accept()
        except OSError:
            return
        with connection:
            while data := connection.recv(65536):
                received.extend(data)
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname(), received
    listener.close()
    thread.join(timeout=5)


@pytest.mark.parametrize("send", ["respond", "send_frames"])
def test_a_response_when_the_host_refuses_a_socket_is_dropped_and_counted(loop, monkeypatch, requester, send):
    (ip, port), received = requester
    sender = ResponseSender(loop, 8192)
    monkeypatch.setattr(responder, "socket", _SocketsRefusedOnce())
    outcomes: list[bool] = []

    def send_one(data: bytes) -> None:
        if send == "respond":
            sender.respond(RequestOrigin(ip, port, 7), data, outcomes.append)
        else:                               # late join's and OTR's requests go this way
            loop.call_soon_threadsafe(sender.send_frames, (ip, port), data, outcomes.append)
    send_one(b"first")
    wait_for(lambda: outcomes == [False], 5, message="the first one told dropped")
    dropped = "responses_dropped" if send == "respond" else "uim_frames_dropped"
    assert sender.counters[dropped] == 1
    assert loop.callback_errors == 0
    send_one(b"second")
    wait_for(lambda: outcomes == [False, True], 5, message="the second one sent")
    wait_for(lambda: b"second" in received, 5, message="the second one received")
    assert b"first" not in received
    loop.call_and_wait(sender.close)
