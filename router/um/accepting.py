"""Listening on the first free port of a range, and taking every connection a non-blocking listener
has ready (the loops' readable callback).

A listener's fd is readable once for several waiting connections: accept until it would block.
A failed accept is logged, not raised. When it failed for want of a resource (EMFILE: the process
is out of descriptors, ENFILE, ENOBUFS, ENOMEM) the connection stays queued, so the listener stays
readable and the loop would call again at once, spinning and logging on every turn: the listener
is set aside for RESOURCE_PAUSE seconds instead, then tried again. A connection the client already
abandoned (ECONNABORTED, EPROTO) is skipped quietly.
"""
from __future__ import annotations

import errno
import logging
import socket
from typing import Callable, Iterator

log = logging.getLogger(__name__)

RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
RESOURCE_PAUSE = 1.0            # seconds a listener is not read after such an error


def listen_in_range(interface: str, ports, backlog: int = 64, receive_buffer: int = 0,
                    errors: list[OSError] | None = None) -> socket.socket | None:
    """A non-blocking socket listening on `interface` at the first port of `ports` free to listen
    on, or None if none is (each port's error is appended to `errors`, if given, for the message).
    `receive_buffer` (SO_RCVBUF) is set before listening, so accepted connections inherit it and
    their window scale is agreed on it."""
    for port in ports:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if receive_buffer:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        try:
            sock.bind((interface, port))
            # With SO_REUSEADDR two applications starting at once can both bind a port that
            # nobody listens on yet; the second to listen is refused, and takes the next port.
            sock.listen(backlog)
        except OSError as err:
            sock.close()
            if errors is not None:
                errors.append(err)
            continue
        sock.setblocking(False)
        return sock
    return None


def accept_pending(listener: socket.socket, what: str, loop=None,
                   on_readable: Callable[[], None] | None = None) -> Iterator[tuple[socket.socket, tuple]]:
    """Yield (non-blocking socket, peer address) for each connection waiting on `listener`.
    `loop` and `on_readable` (the listener's reader on it): where a resource error pauses it."""
    while True:
        try:
            sock, peer = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as err:
            if err.errno in (errno.ECONNABORTED, errno.EPROTO):
                return
            if err.errno in RESOURCE_ERRORS and loop is not None and on_readable is not None:
                log.warning("%s: accept failed: %s; not accepting for %g s", what, err, RESOURCE_PAUSE)
                _pause(loop, listener, on_readable)
            else:
                log.warning("%s: accept failed: %s", what, err)
            return
        sock.setblocking(False)
        yield sock, peer


def _pause(loop, listener: socket.socket, on_readable: Callable[[], None]) -> None:
    loop.remove_reader(listener)

    def resume() -> None:
        if listener.fileno() >= 0:          # not closed meanwhile
            loop.add_reader(listener, on_readable)
    loop.call_later(RESOURCE_PAUSE, resume)
