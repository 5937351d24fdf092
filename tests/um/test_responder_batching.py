"""The responder sends the first message a loop turn brings for a connection at once (a requester
waits for it) and the rest of that turn's in one more system call: a router relays a read of
late-join answers, hundreds for one requester, and sending each on its own cost more than
relaying it. Whatever TCP takes of it, the bytes arrive whole and in order."""
from __future__ import annotations

import socket
import threading

from router.um import responder
from router.um.responder import ResponseSender
from tests.support.processes import wait_for


class _CountedSocket(socket.socket):
    """A real socket that counts the sends the responder makes on it."""
    sends = 0

    def send(self, *args):
        type(self).sends += 1
        return super().send(*args)

    def sendmsg(self, *args):
        type(self).sends += 1
        return super().sendmsg(*args)


class _Sockets:
    def __getattr__(self, name):
        return getattr(socket, name)

    socket = _CountedSocket


def _listener(receive_buffer: int = 0) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer:                     # inherited by the accepted connection
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return listener


def _receive(listener: socket.socket, received: bytearray, start: threading.Event) -> threading.Thread:
    def serve() -> None:
        connection, _ = listener.accept()
        start.wait(30)
        with connection:
            while data := connection.recv(65536):
                received.extend(data)
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def _frames(first: int, count: int, size: int) -> list[bytes]:
    return [(n).to_bytes(4, "big") * (size // 4) for n in range(first, first + count)]


def test_the_first_of_a_turn_goes_at_once_and_the_rest_of_the_turn_together(loop, monkeypatch):
    monkeypatch.setattr(responder, "socket", _Sockets())
    monkeypatch.setattr(_CountedSocket, "sends", 0)
    listener, received, start = _listener(), bytearray(), threading.Event()
    start.set()
    thread = _receive(listener, received, start)
    sender = ResponseSender(loop, 8192)
    address = listener.getsockname()

    def one_turn(frames: list[bytes]) -> None:
        for frame in frames:
            sender.send_frames(address, frame)
    try:
        first, second = _frames(0, 300, 100), _frames(300, 300, 100)
        loop.call_and_wait(one_turn, first)              # queued while connecting: sent once connected
        wait_for(lambda: len(received) == 30_000, 10, message="the first turn's frames received")
        assert _CountedSocket.sends == 1
        loop.call_and_wait(one_turn, second)             # connected: the first at once, the rest after
        wait_for(lambda: len(received) == 60_000, 10, message="the second turn's frames received")
        assert bytes(received) == b"".join(first + second)
        assert _CountedSocket.sends == 3
        loop.call_and_wait(one_turn, _frames(600, 1, 100))   # one alone: at once, nothing after it
        wait_for(lambda: len(received) == 60_100, 10, message="the lone frame received")
        loop.call_and_wait(lambda: None)                 # the turn it came in is over
        assert _CountedSocket.sends == 4
        assert sender.counters["uim_frames_sent"] == 601
    finally:
        loop.call_and_wait(sender.close)
        listener.close()
        thread.join(5)


def test_what_tcp_takes_in_part_is_sent_on_from_where_it_stopped(loop, monkeypatch):
    """A requester that reads nothing for a while: the sends stop part-way through a response,
    go on when it reads, and it gets every byte once, in order."""
    monkeypatch.setattr(responder, "socket", _Sockets())
    listener, received, start = _listener(receive_buffer=4096), bytearray(), threading.Event()
    thread = _receive(listener, received, start)
    sender = ResponseSender(loop, 8192, max_queue=64 * 1024 * 1024)
    address = listener.getsockname()
    frames = _frames(0, 16_000, 1000)
    sent: list[bool] = []

    def one_turn(turn: list[bytes]) -> None:
        for frame in turn:
            sender.send_frames(address, frame, sent.append)
    try:
        for turn in range(0, len(frames), 2000):
            loop.call_and_wait(one_turn, frames[turn:turn + 2000])
        wait_for(lambda: loop.call_and_wait(lambda: sender.connections[address].writer_armed), 10,
                 message="TCP took part of it and the rest waits")
        assert len(sent) < len(frames)
        start.set()
        wait_for(lambda: len(received) == 16_000_000, 30, message="everything received")
        assert bytes(received) == b"".join(frames)
        assert sent == [True] * len(frames) and sender.counters["uim_frames_sent"] == len(frames)
        assert not loop.call_and_wait(sender.busy)
    finally:
        loop.call_and_wait(sender.close)
        listener.close()
        thread.join(5)
