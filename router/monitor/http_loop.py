"""A small, read-only HTTP/1.1 server driven by the supervisor's event loop.

Why not http.server in a thread: the supervisor is single-threaded by design (signal handlers
enqueue, the loop dispatches), and what a page shows (the workers table, the configuration, the
bus's interest table) changes under reload on that loop; reading it from another thread would
race. Serving on the loop reads it where it lives, and a page that needs the workers' answers
(proxy lists) simply responds when they arrive, without blocking anything.

Each connection: read the request head (bounded), call `handler(request, respond)`, write the
response without blocking, close. No keep-alive, no bodies: a monitoring page needs neither.
Slow or silent clients are cut off after IDLE_TIMEOUT; at most MAX_CONNECTIONS at once, and when
all are taken a new client takes the place of the oldest that has not sent its request yet.
"""
from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from typing import Callable
from urllib.parse import unquote, urlsplit

from router.log_rate import LogRate
from router.um.accepting import accept_pending

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 * 1024
MAX_CONNECTIONS = 64
IDLE_TIMEOUT = 10.0
METHODS = ("GET", "HEAD")


@dataclass
class HttpRequest:
    method: str
    path: str            # percent-decoded, without the query string
    query: str


Respond = Callable[[int, str, bytes], None]


class HttpServer:
    def __init__(self, loop, host: str, port: int, handler: Callable[[HttpRequest, Respond], None]):
        self.loop, self.handler = loop, handler
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.socket.bind((host, port))
            self.socket.listen(64)
        except OSError:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.address = self.socket.getsockname()[:2]
        self.connections: set[_Connection] = set()
        self.silent_evicted = 0     # connections closed for a newer one while still without a request
        self._evictions_said = LogRate()    # said, but not once per connection of a flood
        loop.add_reader(self.socket.fileno(), self._accept)

    def _accept(self) -> None:
        for sock, _ in accept_pending(self.socket, "web monitor", self.loop, self._accept):
            if len(self.connections) >= MAX_CONNECTIONS and not self._evict_a_silent_client():
                sock.close()
                continue
            self.connections.add(_Connection(self, sock))

    def _evict_a_silent_client(self) -> bool:
        """Make room for a new connection by closing the oldest one still waiting for its request.
        Refusing the newcomer instead would let a client that opens connections and never finishes
        a request (a leaking scraper, a slowloris) hold every slot, again and again, so that nobody
        else is ever served; a real client sends its request at once and is answered before it
        could become the oldest. Connections already answering are never cut off."""
        waiting = [connection for connection in self.connections if connection.reading]
        if not waiting:
            return False
        oldest = min(waiting, key=lambda connection: connection.opened)
        self.silent_evicted += 1
        if self._evictions_said.due() is not None:
            log.warning("web monitor: all %d connections taken; closed one that sent no request in %.1f s "
                        "(%d so far)", MAX_CONNECTIONS, time.monotonic() - oldest.opened, self.silent_evicted)
        oldest.close()
        return True

    def close(self) -> None:
        self.loop.remove_reader(self.socket.fileno())
        self.socket.close()
        for connection in list(self.connections):
            connection.close()


class _Connection:
    def __init__(self, server: HttpServer, sock: socket.socket):
        self.server, self.loop, self.socket = server, server.loop, sock
        sock.setblocking(False)
        self.fd = sock.fileno()
        self.head = b""
        self.out = b""
        self.answered = False
        self.closed = False
        self.reading = True                     # until its request head is complete (or too large)
        self.opened = time.monotonic()
        self.timer = self.loop.call_later(IDLE_TIMEOUT, self.close)
        self.loop.add_reader(self.fd, self._readable)

    def _readable(self) -> None:
        try:
            chunk = self.socket.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        if not chunk:
            self.close()
            return
        self.head += chunk
        if b"\r\n\r\n" in self.head or b"\n\n" in self.head:
            self.loop.remove_reader(self.fd)      # one request per connection
            self.reading = False
            self._dispatch()
        elif len(self.head) > MAX_HEAD_BYTES:
            self.loop.remove_reader(self.fd)
            self.reading = False
            self.respond(431, "text/plain", b"request header too large\n")

    def _dispatch(self) -> None:
        request_line = self.head.split(b"\n", 1)[0].decode("latin-1").strip()
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            self.respond(400, "text/plain", b"bad request\n")
            return
        method, target, _ = parts
        if method not in METHODS:
            self.respond(405, "text/plain", b"read-only: GET and HEAD only\n")
            return
        try:
            url = urlsplit(target)
        except ValueError:                  # e.g. "//[x": an unbalanced IPv6 bracket
            self.respond(400, "text/plain", b"bad request target\n")
            return
        request = HttpRequest(method, unquote(url.path) or "/", url.query)
        try:
            self.server.handler(request, self.respond)
        except Exception:
            log.exception("web monitor: %s failed", request.path)
            self.respond(500, "text/plain", b"internal error (see the router's log)\n")

    def respond(self, status: int, content_type: str, body: bytes) -> None:
        if self.answered or self.closed:
            return
        self.answered = True
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Status"
        head = (f"HTTP/1.1 {status} {phrase}\r\nDate: {formatdate(usegmt=True)}\r\n"
                f"Server: umrouter\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
                + ("Allow: GET, HEAD\r\n" if status == 405 else "") + "Connection: close\r\n\r\n")
        head_only = self.head.startswith(b"HEAD ")
        self.out = head.encode("latin-1") + (b"" if head_only else body)
        self.loop.add_writer(self.fd, self._writable)

    def _writable(self) -> None:
        try:
            sent = self.socket.send(self.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        self.out = self.out[sent:]
        if not self.out:
            try:
                self.socket.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.timer.cancel()
        self.loop.remove_reader(self.fd)
        self.loop.remove_writer(self.fd)
        self.socket.close()
        self.server.connections.discard(self)
