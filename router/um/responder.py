"""The responder's end: responses sent to requesters' request ports (lbm_send_response).

One outgoing TCP connection per request port (ipaddr, port), opened on the first response to it
and kept while the requester keeps it open and something goes out on it: once everything queued on
it has been handed to TCP and nothing more comes for `idle_timeout` seconds (UM's
response_tcp_deletion_timeout, 2 s by default), it is closed and counted
(response_connections_closed_idle); the next response opens a new one. So a requester whose host
vanished without closing its connections holds none of a responder's (or a router's) descriptors
for longer than that. Each response becomes LBMC MESSAGE frames with the request's index as topic
index and the connection's own sequence numbers (router.um.requests). Everything happens on the
context's loop: `respond` may be called from any thread and only hands the response over. What a
connection cannot send yet waits in its queue, up to `max_queue` bytes (a response into an empty
queue is always taken, whatever its size); a response beyond that, or queued on a connection that
fails, is dropped, counted (responses_dropped) and logged with the requester's address. A caller
that passes `outcome` hears which of the two befell what it sent (a router's portal counts it as
sent or dropped). The other frames sent on these connections — unicast immediate messages
(router.um.unicast_immediate) and late join's requests and answers — count apart: uim_frames_sent,
uim_frames_dropped.
"""
from __future__ import annotations

import errno
import itertools
import logging
import socket
import time
from collections import deque
from typing import Callable

from router.um.requests import RequestOrigin, message_frames

log = logging.getLogger(__name__)

DEFAULT_MAX_QUEUE = 8 * 1024 * 1024
DEFAULT_IDLE_TIMEOUT = 2.0       # s: UM's response_tcp_deletion_timeout default
WARNING_INTERVAL = 10.0          # s: drops to one requester are logged at most this often
MAX_GATHER = 512                 # responses handed to TCP in one system call (IOV_MAX is 1024)


class _Outgoing:
    """One connection to one request port, and the responses waiting for it."""

    __slots__ = ("address", "sock", "connected", "queue", "queued", "sqn", "writer_armed", "write_due",
                 "idle_since", "idle_timer")

    def __init__(self, address: tuple[str, int], sock: socket.socket):
        self.address = address
        self.sock = sock
        self.connected = False
        # [bytes left, is a response, outcome callback or None]: one entry per response
        self.queue: deque[list] = deque()
        self.queued = 0
        self.sqn = 0
        self.writer_armed = False
        self.write_due = False            # a write at the end of this loop turn is on its way
        self.idle_since = 0.0             # when its queue last emptied
        self.idle_timer = None            # the pending idle check, if any


class ResponseSender:
    def __init__(self, loop, datagram_max_size: int, max_queue: int = DEFAULT_MAX_QUEUE,
                 idle_timeout: float = DEFAULT_IDLE_TIMEOUT):
        self.loop = loop
        self.datagram_max_size = datagram_max_size
        self.max_queue = max_queue
        self.idle_timeout = idle_timeout
        self.connections: dict[tuple[str, int], _Outgoing] = {}
        self.counters = {"responses_sent": 0, "responses_dropped": 0, "uim_frames_sent": 0, "uim_frames_dropped": 0,
                         "response_connections_closed_idle": 0}
        self.warned: dict[tuple[str, int], float] = {}    # requester -> when its drops were last logged
        self.closed = False

    def respond(self, origin: RequestOrigin, data, outcome: Callable[[bool], None] | None = None) -> None:
        """Send a response to `origin` (thread-safe; never blocks, never raises for the network).
        `outcome(sent)`, on the loop thread: True once all of it was handed to TCP, False if it
        was dropped (on the caller's thread when the context is already closed)."""
        if self.closed:                       # the loop may be gone: do not wake it
            self._drop((origin.ipaddr, origin.port), 1, "the context is closed", outcome=outcome)
        elif self.loop.in_loop_thread():
            self._respond(origin, data, outcome)
        else:
            self.loop.call_soon_threadsafe(self._respond, origin, bytes(data), outcome)

    def send_unicast(self, address: tuple[str, int], frames: list[bytes], first_sqn_at: int = 0,
                     response: bool = False, outcome: Callable[[bool], None] | None = None) -> None:
        """A unicast immediate message's frames (router.um.unicast_immediate.uim_frames) to the
        request port at `address`, numbered with the connection's next sequence numbers, and, in
        each piece of a message in pieces, the first one's number at `first_sqn_at` (FRAG's
        first_sqn). Thread-safe; never blocks. `response`: a response routed to another domain;
        `outcome` as respond's."""
        if self.closed:
            self._drop(address, 1, "the context is closed", response, outcome)
        elif self.loop.in_loop_thread():
            self._send_unicast(address, frames, first_sqn_at, response, outcome)
        else:
            self.loop.call_soon_threadsafe(self._send_unicast, address, frames, first_sqn_at, response, outcome)

    def _send_unicast(self, address: tuple[str, int], frames: list[bytes], first_sqn_at: int, response: bool,
                      outcome: Callable[[bool], None] | None = None) -> None:
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
        self._enqueue(address, frames_of, response, outcome)

    def drop(self, address: tuple[str, int], count: int, reason: str,
             outcome: Callable[[bool], None] | None = None) -> None:
        """Responses to `address` that could not even be queued (from any thread): counted, logged."""
        if self.closed or self.loop.in_loop_thread():        # closed: its loop may be gone
            self._drop(address, count, reason, outcome=outcome)
        else:
            self.loop.call_soon_threadsafe(lambda: self._drop(address, count, reason, outcome=outcome))

    def send_frames(self, address: tuple[str, int], frames: bytes,
                    outcome: Callable[[bool], None] | None = None) -> None:
        """Send LBMC frames as they are to the request port at `address` (late join's requests
        and answers, router.um.late_join; a router's unicast immediate messages); on the loop
        thread. `outcome` as respond's."""
        self._enqueue(address, lambda connection: frames, response=False, outcome=outcome)

    # -- on the loop -------------------------------------------------------------------------------
    def _respond(self, origin: RequestOrigin, data, outcome: Callable[[bool], None] | None = None) -> None:
        def frames_of(connection: _Outgoing) -> bytes:
            frames, connection.sqn = self._frames(origin.qidx, connection.sqn, data)
            return frames
        self._enqueue((origin.ipaddr, origin.port), frames_of, outcome=outcome)

    def _enqueue(self, address: tuple[str, int], frames_of, response: bool = True,
                 outcome: Callable[[bool], None] | None = None) -> None:
        if self.closed:
            self._drop(address, 1, "the context is closed", response, outcome)
            return
        connection = self.connections.get(address) or self._connect(address, response, outcome)
        if connection is None:
            return
        frames = frames_of(connection)
        if connection.queue and connection.queued + len(frames) > self.max_queue:
            self._drop(address, 1, f"{connection.queued} bytes already wait for this slow receiver "
                                   f"(at most {self.max_queue})", response, outcome)
            return
        connection.queue.append([memoryview(frames), response, outcome])
        connection.queued += len(frames)
        if connection.connected and not connection.writer_armed and not connection.write_due:
            # The first of a loop turn goes at once (a requester waits for it); what more the turn
            # brings goes in one write at its end: a router relays a read of late-join answers,
            # hundreds for one requester, and wrote each with a system call of its own.
            self._write(connection)
            connection.write_due = True
            self.loop.call_soon_threadsafe(self._write_at_turn_end, connection)

    def _frames(self, qidx: int, sqn: int, data) -> tuple[bytes, int]:
        parts = []
        for headers, piece in message_frames(qidx, sqn, data, self.datagram_max_size):
            parts += (headers, piece)
            sqn = (sqn + 1) & 0xFFFFFFFF
        return b"".join(parts), sqn

    def _connect(self, address: tuple[str, int], response: bool = True,
                 outcome: Callable[[bool], None] | None = None) -> _Outgoing | None:
        try:
            # The host may refuse a socket (its open-files limit reached): that response is
            # dropped like one whose requester cannot be reached, and the next one tries again.
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        except OSError as err:
            self._drop(address, 1, f"no socket: {err.strerror or err}", response, outcome)
            return None
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)     # a requester is waiting
        try:
            code = sock.connect_ex(address)
        except (OSError, OverflowError, TypeError) as err:
            code = getattr(err, "errno", None) or errno.EINVAL
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            self._drop(address, 1, f"cannot connect: {errno.errorcode.get(code, code)}", response, outcome)
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

    def _write_at_turn_end(self, connection: _Outgoing) -> None:
        connection.write_due = False
        if connection.queue and not connection.writer_armed and self.connections.get(connection.address) is connection:
            self._write(connection)

    def _write(self, connection: _Outgoing) -> None:
        """As much of the queue as TCP takes, up to MAX_GATHER responses per system call."""
        queue = connection.queue
        while queue:
            pieces = [entry[0] for entry in itertools.islice(queue, MAX_GATHER)]
            try:
                sent = connection.sock.sendmsg(pieces) if len(pieces) > 1 else connection.sock.send(pieces[0])
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as err:
                self._fail(connection, str(err))
                return
            connection.queued -= sent
            whole = sent == sum(len(piece) for piece in pieces)
            while queue and sent >= len(queue[0][0]):
                sent -= len(queue[0][0])
                _, response, outcome = queue.popleft()
                self.counters["responses_sent" if response else "uim_frames_sent"] += 1
                if outcome is not None:
                    outcome(True)
            if not whole:
                if sent:
                    queue[0][0] = queue[0][0][sent:]
                break
        wanted = bool(queue)
        if wanted != connection.writer_armed:
            connection.writer_armed = wanted
            if wanted:
                self.loop.add_writer(connection.sock.fileno(), lambda: self._write(connection))
            else:
                self.loop.remove_writer(connection.sock.fileno())
        if not wanted:
            connection.idle_since = time.monotonic()
            if connection.idle_timer is None:      # one check per idle spell, not one per response
                connection.idle_timer = self.loop.call_later(self.idle_timeout, self._check_idle, connection)

    def _check_idle(self, connection: _Outgoing) -> None:
        """Close a connection that has had nothing to send for idle_timeout; one that got more
        meanwhile is checked again when its queue empties (or when the rest of the wait is up)."""
        connection.idle_timer = None
        if self.connections.get(connection.address) is not connection or connection.queue:
            return
        wait = connection.idle_since + self.idle_timeout - time.monotonic()
        if wait > 0:
            connection.idle_timer = self.loop.call_later(wait, self._check_idle, connection)
            return
        del self.connections[connection.address]
        self.counters["response_connections_closed_idle"] += 1
        fd = connection.sock.fileno()
        self.loop.remove_reader(fd)
        self.loop.remove_writer(fd)
        connection.sock.close()               # all it carried was handed to TCP: it still goes out
        log.debug("response connection to %s:%d closed: idle for %g s", *connection.address, self.idle_timeout)

    def _fail(self, connection: _Outgoing, reason: str) -> None:
        """The connection is gone: what waited on it is lost; the next response reconnects."""
        if self.connections.get(connection.address) is connection:
            del self.connections[connection.address]
        if connection.idle_timer is not None:
            connection.idle_timer.cancel()
            connection.idle_timer = None
        fd = connection.sock.fileno()
        if fd >= 0:
            self.loop.remove_reader(fd)
            self.loop.remove_writer(fd)
        connection.sock.close()
        if connection.queue:
            lost = list(connection.queue)
            connection.queue.clear()
            connection.queued = 0
            responses = sum(1 for _, response, _ in lost if response)
            if responses:
                self._drop(connection.address, responses, reason)
            if len(lost) > responses:
                self._drop(connection.address, len(lost) - responses, reason, response=False)
            for _, _, outcome in lost:
                if outcome is not None:
                    outcome(False)
        else:
            log.debug("response connection to %s:%d closed: %s", *connection.address, reason)

    def _drop(self, address: tuple[str, int], count: int, reason: str, response: bool = True,
              outcome: Callable[[bool], None] | None = None) -> None:
        """`count` responses (or, not `response`, other frames: unicast immediate messages, late
        join's) to `address` could not be sent: counted, and logged at most every WARNING_INTERVAL;
        `outcome`, the caller's, hears it."""
        counter, what = ("responses_dropped", "response(s) to the requester") if response \
            else ("uim_frames_dropped", "unicast message(s) to the request port")
        self.counters[counter] += count
        if outcome is not None:
            outcome(False)
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
