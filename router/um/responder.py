"""The responder's end: responses sent to requesters' request ports (lbm_send_response).

One outgoing TCP connection per request port (ipaddr, port), opened on the first response to it
and kept while the requester keeps it open. Each response becomes LBMC MESSAGE frames with the
request's index as topic index and the connection's own sequence numbers (router.um.requests).
Everything happens on the context's loop: `respond` may be called from any thread and only hands
the response over. What a connection cannot send yet waits in its queue, up to `max_queue` bytes
(a response into an empty queue is always taken, whatever its size); a response beyond that, or
queued on a connection that fails, is dropped, counted (responses_dropped) and logged with the
requester's address. The other frames sent on these connections — unicast immediate messages
(router.um.unicast_immediate) and late join's requests and answers — count apart: uim_frames_sent,
uim_frames_dropped.
"""
from __future__ import annotations

import errno
import logging
import socket
import time
from collections import deque

from router.um.requests import RequestOrigin, message_frames

log = logging.getLogger(__name__)

DEFAULT_MAX_QUEUE = 8 * 1024 * 1024
WARNING_INTERVAL = 10.0          # s: drops to one requester are logged at most this often


class _Outgoing:
    """One connection to one request port, and the responses waiting for it."""

    __slots__ = ("address", "sock", "connected", "queue", "queued", "sqn", "writer_armed")

    def __init__(self, address: tuple[str, int], sock: socket.socket):
        self.address = address
        self.sock = sock
        self.connected = False
        self.queue: deque[list] = deque()      # [bytes left, is a response]: one entry per response
        self.queued = 0
        self.sqn = 0
        self.writer_armed = False


class ResponseSender:
    def __init__(self, loop, datagram_max_size: int, max_queue: int = DEFAULT_MAX_QUEUE):
        self.loop = loop
        self.datagram_max_size = datagram_max_size
        self.max_queue = max_queue
        self.connections: dict[tuple[str, int], _Outgoing] = {}
        self.counters = {"responses_sent": 0, "responses_dropped": 0, "uim_frames_sent": 0, "uim_frames_dropped": 0}
        self.warned: dict[tuple[str, int], float] = {}    # requester -> when its drops were last logged
        self.closed = False

    def respond(self, origin: RequestOrigin, data) -> None:
        """Send a response to `origin` (thread-safe; never blocks, never raises for the network)."""
        if self.closed:                       # the loop may be gone: do not wake it
            self._drop((origin.ipaddr, origin.port), 1, "the context is closed")
        elif self.loop.in_loop_thread():
            self._respond(origin, data)
        else:
            self.loop.call_soon_threadsafe(self._respond, origin, bytes(data))

    def send_unicast(self, address: tuple[str, int], frames: list[bytes], first_sqn_at: int = 0,
                     response: bool = False) -> None:
        """A unicast immediate message's frames (router.um.unicast_immediate.uim_frames) to the
        request port at `address`, numbered with the connection's next sequence numbers, and, in
        each piece of a message in pieces, the first one's number at `first_sqn_at` (FRAG's
        first_sqn). Thread-safe; never blocks. `response`: a response routed to another domain."""
        if self.closed:
            self._drop(address, 1, "the context is closed", response)
        elif self.loop.in_loop_thread():
            self._send_unicast(address, frames, first_sqn_at, response)
        else:
            self.loop.call_soon_threadsafe(self._send_unicast, address, frames, first_sqn_at, response)

    def _send_unicast(self, address: tuple[str, int], frames: list[bytes], first_sqn_at: int, response: bool) -> None:
        def frames_of(connection: _Outgoing) -> bytes:
            first, numbered = connection.sqn, bytearray()
            for number, frame in enumerate(frames):
                start = len(numbered)
                numbered += frame
                numbered[start + 8:start + 12] = ((first + number) & 0xFFFFFFFF).to_bytes(4, "big")
                if first_sqn_at:
                    numbered[start + first_sqn_at:start + first_sqn_at + 4] = first.to_bytes(4, "big")
            connection.sqn = (first + len(frames)) & 0xFFFFFFFF
            return bytes(numbered)
        self._enqueue(address, frames_of, response)

    def drop(self, address: tuple[str, int], count: int, reason: str) -> None:
        """Responses to `address` that could not even be queued (from any thread): counted, logged."""
        if self.loop.in_loop_thread():
            self._drop(address, count, reason)
        else:
            self.loop.call_soon_threadsafe(self._drop, address, count, reason)

    def send_frames(self, address: tuple[str, int], frames: bytes) -> None:
        """Send LBMC frames as they are to the request port at `address` (late join's requests
        and answers, router.um.late_join); on the loop thread."""
        self._enqueue(address, lambda connection: frames, response=False)

    # -- on the loop -------------------------------------------------------------------------------
    def _respond(self, origin: RequestOrigin, data) -> None:
        def frames_of(connection: _Outgoing) -> bytes:
            frames, connection.sqn = self._frames(origin.qidx, connection.sqn, data)
            return frames
        self._enqueue((origin.ipaddr, origin.port), frames_of)

    def _enqueue(self, address: tuple[str, int], frames_of, response: bool = True) -> None:
        if self.closed:
            self._drop(address, 1, "the context is closed", response)
            return
        connection = self.connections.get(address) or self._connect(address, response)
        if connection is None:
            return
        frames = frames_of(connection)
        if connection.queue and connection.queued + len(frames) > self.max_queue:
            self._drop(address, 1, f"{connection.queued} bytes already wait for this slow receiver "
                                   f"(at most {self.max_queue})", response)
            return
        connection.queue.append([memoryview(frames), response])
        connection.queued += len(frames)
        if connection.connected:
            self._write(connection)

    def _frames(self, qidx: int, sqn: int, data) -> tuple[bytes, int]:
        parts = []
        for headers, piece in message_frames(qidx, sqn, data, self.datagram_max_size):
            parts += (headers, piece)
            sqn = (sqn + 1) & 0xFFFFFFFF
        return b"".join(parts), sqn

    def _connect(self, address: tuple[str, int], response: bool = True) -> _Outgoing | None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)     # a requester is waiting
        try:
            code = sock.connect_ex(address)
        except (OSError, OverflowError, TypeError) as err:
            code = getattr(err, "errno", None) or errno.EINVAL
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            self._drop(address, 1, f"cannot connect: {errno.errorcode.get(code, code)}", response)
            return None
        connection = self.connections[address] = _Outgoing(address, sock)
        self.loop.add_writer(sock.fileno(), lambda: self._connect_done(connection))
        return connection

    def _connect_done(self, connection: _Outgoing) -> None:
        fd = connection.sock.fileno()
        self.loop.remove_writer(fd)
        code = connection.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            self._fail(connection, f"cannot connect: {errno.errorcode.get(code, code)}")
            return
        connection.connected = True
        # The requester sends nothing; reading tells us when it hangs up.
        self.loop.add_reader(fd, lambda: self._readable(connection))
        self._write(connection)

    def _readable(self, connection: _Outgoing) -> None:
        try:
            data = connection.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as err:
            self._fail(connection, str(err))
            return
        if not data:
            self._fail(connection, "the requester closed the connection")

    def _write(self, connection: _Outgoing) -> None:
        queue = connection.queue
        while queue:
            try:
                sent = connection.sock.send(queue[0][0])
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as err:
                self._fail(connection, str(err))
                return
            connection.queued -= sent
            if sent < len(queue[0][0]):
                queue[0][0] = queue[0][0][sent:]
                break
            if queue.popleft()[1]:
                self.counters["responses_sent"] += 1
            else:
                self.counters["uim_frames_sent"] += 1
        wanted = bool(queue)
        if wanted != connection.writer_armed:
            connection.writer_armed = wanted
            if wanted:
                self.loop.add_writer(connection.sock.fileno(), lambda: self._write(connection))
            else:
                self.loop.remove_writer(connection.sock.fileno())

    def _fail(self, connection: _Outgoing, reason: str) -> None:
        """The connection is gone: what waited on it is lost; the next response reconnects."""
        if self.connections.get(connection.address) is connection:
            del self.connections[connection.address]
        fd = connection.sock.fileno()
        if fd >= 0:
            self.loop.remove_reader(fd)
            self.loop.remove_writer(fd)
        connection.sock.close()
        if connection.queue:
            responses = sum(1 for _, response in connection.queue if response)
            if responses:
                self._drop(connection.address, responses, reason)
            if len(connection.queue) > responses:
                self._drop(connection.address, len(connection.queue) - responses, reason, response=False)
            connection.queue.clear()
            connection.queued = 0
        else:
            log.debug("response connection to %s:%d closed: %s", *connection.address, reason)

    def _drop(self, address: tuple[str, int], count: int, reason: str, response: bool = True) -> None:
        """`count` responses (or, not `response`, other frames: unicast immediate messages, late
        join's) to `address` could not be sent: counted, and logged at most every WARNING_INTERVAL."""
        counter, what = ("responses_dropped", "response(s) to the requester") if response \
            else ("uim_frames_dropped", "unicast message(s) to the request port")
        self.counters[counter] += count
        now = time.monotonic()
        if now - self.warned.get(address, -WARNING_INTERVAL) < WARNING_INTERVAL:
            log.debug("%d %s at %s:%d dropped: %s", count, what, *address, reason)
            return
        if len(self.warned) > 1024:           # requesters come and go: forget the old ones
            self.warned.clear()
        self.warned[address] = now
        log.warning("%d %s at %s:%d dropped: %s (%d dropped in all)", count, what, *address, reason,
                    self.counters[counter])

    # -- from any thread ---------------------------------------------------------------------------
    def busy(self) -> bool:
        """Something still waits to be sent (or to connect)."""
        return any(c.queue for c in list(self.connections.values()))

    def wait_sent(self, timeout: float) -> bool:
        """Wait (from an application thread) until every response has been handed to TCP."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.loop.call_and_wait(self.busy, timeout=max(timeout, 1.0)):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)

    def close(self) -> None:
        """On the loop: hang up; what still waits is dropped and counted."""
        self.closed = True
        for connection in list(self.connections.values()):
            self._fail(connection, "the context closed")
