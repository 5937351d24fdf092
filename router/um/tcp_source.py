"""The source side of LBT-TCP: one listening session and its receivers' connections.

Sources of a context share one session (as in UM), each with its own topic index; the stream is a
plain concatenation of LBMC frames (batched by batching_session.BatchingSession). Sockets are
non-blocking; each connection has an output queue. When a queue passes its limit the session either
blocks the sending thread until the receiver catches up (applications: TCP flow control reaches the
publisher) or drops the batch for that connection and counts it (the router: one slow receiver must
not stall the others).

A router's proxy source exists because a receiver in its domain showed interest, but that receiver
connects only once it has heard the proxy's advertisement: what the proxy forwards in between (a
requester's first request, typically) would reach nobody. So a session made with
`hold_for_receiver` keeps what it sends while no receiver is connected, up to `max_queue` bytes and
for at most that many seconds, and gives it to the first receiver that connects
(router.um.held_batches).
"""
from __future__ import annotations

import errno
import logging
import os
import select
import socket
import time

from router.um.accepting import accept_pending, listen_in_range
from router.um.batching_session import BatchingSession
from router.um.held_batches import HeldBatches
from router.um.wire.lbmc import CONTROL_HEADER, LBMC_TYPE_CONTROL, NHDR_NONE, NHDR_TCP_SID, TCP_SID_HEADER
from router.um.wire.lbmr import TcpInfo
from router.um.wire.otid import tcp_otid

log = logging.getLogger(__name__)


CLOSE_DRAIN_TIMEOUT = 5.0      # s a closing session gives its receivers to take what is queued
CLOSE_DRAIN_CHECK = 0.05       # s between looks, when the loop's thread closed it
_LOCK_RETRY = 0.005            # s the loop waits to try again for a lock a sending thread holds


class _Connection:
    __slots__ = ("sock", "peer", "queue", "writer_armed", "dropped_batches", "dropped_bytes", "progress")

    def __init__(self, sock: socket.socket, peer):
        self.sock, self.peer = sock, peer
        self.queue = bytearray()
        self.progress = 0.0             # time.monotonic() of the last send while data was queued
        self.writer_armed = False
        self.dropped_batches = 0
        self.dropped_bytes = 0


class TcpSourceSession(BatchingSession):
    """A listening LBT-TCP session. Thread-safe: applications send from their own threads while the
    context's loop accepts connections and drains queues."""

    def __init__(self, loop, interface: str, port_low: int, port_high: int, *, fixed_port: int = 0,
                 datagram_max_size: int = 65535, batching_minimum_length: int = 2048,
                 batching_interval: float = 0.2, overflow: str = "block",
                 max_queue: int = 8 * 1024 * 1024, nodelay: bool = True, hold_for_receiver: float = 0.0,
                 send_buffer: int = 0):
        super().__init__(loop, datagram_max_size=datagram_max_size, batching_minimum_length=batching_minimum_length,
                         batching_interval=batching_interval, overflow=overflow, max_queue=max_queue)
        self.interface = interface
        self.session_id = int.from_bytes(os.urandom(4), "big") or 1
        self.nodelay = nodelay
        self.send_buffer = send_buffer          # SO_SNDBUF of each connection (0: the kernel's)
        self.connections: list[_Connection] = []
        self.counters["connections_accepted"] = 0
        self.hold_for_receiver = hold_for_receiver
        self.held = HeldBatches(max_queue, hold_for_receiver, self.counters)   # sent while nobody was connected
        self.listener = self._listen(interface, port_low, port_high, fixed_port)
        self.port = self.listener.getsockname()[1]
        loop.add_reader(self.listener.fileno(), self._accept)

    @staticmethod
    def _listen(interface: str, low: int, high: int, fixed: int) -> socket.socket:
        ports = [fixed] if fixed else range(low, high + 1)
        sock = listen_in_range(interface, ports)
        if sock is not None:
            return sock
        raise OSError(errno.EADDRINUSE, f"no free TCP port in {ports[0]}..{ports[-1]} on {interface}")

    # -- connections -----------------------------------------------------------------------------
    def _accept(self) -> None:
        for sock, peer in accept_pending(self.listener, f"TCP session port {self.port}", self.loop, self._accept):
            if self.nodelay:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.send_buffer:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
            connection = _Connection(sock, peer)
            # The TCP_SID control message ties this stream to the session id in our TIRs.
            sid = TCP_SID_HEADER.pack(NHDR_NONE, TCP_SID_HEADER.size, 0, self.session_id)
            connection.queue += CONTROL_HEADER.pack(LBMC_TYPE_CONTROL, NHDR_TCP_SID, 4 + len(sid)) + sid
            self._add_connection(connection)

    def _add_connection(self, connection: _Connection) -> None:
        """A receiver connected: it joins the session under its lock. A sending thread may hold
        that lock for long (waiting for a slow receiver): the loop does not wait for it, it
        tries again shortly."""
        if self.closed:
            connection.sock.close()
            return
        if not self._lock_or_later(self._add_connection, connection):
            return
        try:
            self._give_held(connection)
            self.connections.append(connection)
            self.counters["connections_accepted"] += 1
            self._write(connection)
        finally:
            self.lock.release()
        self.loop.add_reader(connection.sock.fileno(), lambda c=connection: self._readable(c))

    def _lock_or_later(self, retry, *args) -> bool:
        """On the loop's thread: take the session lock if it is free, else call `retry(*args)`
        shortly and say no. A sending thread may hold it for long (waiting for a slow receiver),
        and the loop must not wait for it: every other socket and timer of the context would."""
        if self.lock.acquire(blocking=False):
            return True
        self.loop.call_later(_LOCK_RETRY, retry, *args)
        return False

    def _readable(self, connection: _Connection) -> None:
        """Receivers send nothing we need; reading tells us when they hang up."""
        try:
            data = connection.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop_connection(connection)

    def _drop_connection(self, connection: _Connection) -> None:
        if not self._lock_or_later(self._drop_connection, connection):
            return
        try:
            if connection not in self.connections:
                return
            self.connections.remove(connection)
        finally:
            self.lock.release()
        self.loop.remove_reader(connection.sock.fileno())
        self.loop.remove_writer(connection.sock.fileno())
        connection.sock.close()

    def advertised_info(self) -> TcpInfo:
        return TcpInfo(self.interface, self.port, self.session_id)

    def otid(self, index: int, context_id: int) -> bytes:
        return tcp_otid(self.interface, self.port, index, ctx_id=context_id, session_id=self.session_id)

    @property
    def receiver_count(self) -> int:
        return len(self.connections)

    def _deliver(self, data) -> None:
        """Send a batch on every connection (lock held): straight to the socket when nothing is
        queued before it, the rest into the connection's queue; a full queue blocks or drops."""
        if not self.connections and self.hold_for_receiver > 0:
            self.held.hold(data)
            return
        for connection in list(self.connections):
            if connection.queue:
                if len(connection.queue) + len(data) > self.max_queue:
                    if self.overflow == "drop":
                        connection.dropped_batches += 1
                        connection.dropped_bytes += len(data)
                        self.count_dropped(data)
                        continue
                    if not self.loop.in_loop_thread():
                        self.wait_drained(self.max_queue // 2, connection)
                    # (The loop's thread, the batching timer's short batch: queued past the limit,
                    # never waited for there; the next send from the application's thread waits.)
                connection.queue += data
                self._write(connection)
                continue
            sent = self._send(connection, data)
            if sent is not None and sent < len(data):
                connection.queue += memoryview(data)[sent:]
                connection.progress = time.monotonic()      # the backlog starts now
                self._want_writable(connection)

    def _give_held(self, connection: _Connection) -> None:
        """The first receiver to connect takes what was held, in order, after its TCP_SID (lock held)."""
        for batch in self.held.take():
            connection.queue += batch

    def _send(self, connection: _Connection, data) -> int | None:
        """What the socket takes of `data` now, in bytes; None if the connection broke (it is
        dropped on the loop's next turn). Lock held."""
        try:
            sent = connection.sock.send(data)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:
            self.loop.call_soon_threadsafe(self._drop_connection, connection)
            return None
        connection.progress = time.monotonic()
        return sent

    def _write(self, connection: _Connection) -> None:
        """Send what the socket takes of the queue now; arm the loop's writer for the rest. Lock held."""
        queue = connection.queue
        while queue:
            sent = self._send(connection, queue)
            if sent is None:
                queue.clear()
                return
            if not sent:
                break
            del queue[:sent]
        self._want_writable(connection)

    def _want_writable(self, connection: _Connection) -> None:
        if connection.queue and not connection.writer_armed:
            connection.writer_armed = True
            self.loop.call_soon_threadsafe(self._arm_writer, connection)

    def _arm_writer(self, connection: _Connection) -> None:
        if connection in self.connections:
            self.loop.add_writer(connection.sock.fileno(), lambda: self._writable(connection))

    def _writable(self, connection: _Connection) -> None:
        if not self._lock_or_later(self._arm_writer, connection):
            # Set aside meanwhile, still armed: a writable socket would call us on every turn.
            if connection in self.connections:
                self.loop.remove_writer(connection.sock.fileno())
            return
        try:
            self._write(connection)
            if not connection.queue:
                connection.writer_armed = False
                self.loop.remove_writer(connection.sock.fileno())
        finally:
            self.lock.release()

    def wait_drained(self, limit: int, only: _Connection | None = None, timeout: float | None = None) -> bool:
        """Block the calling thread until every queue holds at most `limit` bytes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self.lock:
                waiting = [c for c in ([only] if only else self.connections)
                           if c in self.connections and len(c.queue) > limit]
                for connection in waiting:
                    self._write(connection)
                waiting = [c for c in waiting if len(c.queue) > limit]
            if not waiting:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            # poll, not select: a router's or a busy application's descriptors pass 1024, where
            # select() refuses them (and this loop would spin).
            poller = select.poll()
            try:
                for connection in waiting:
                    poller.register(connection.sock, select.POLLOUT)
                poller.poll(50)
            except (OSError, ValueError):       # a connection closed meanwhile: look again
                time.sleep(0.001)

    def queued_bytes(self) -> int:
        """What waits to be sent: in connections' queues, and held for a first receiver."""
        return sum(len(c.queue) for c in self.connections) + self.held.bytes

    def queued_for_receivers(self) -> int:
        """What waits because receivers' connections do not take it now."""
        return sum(len(c.queue) for c in self.connections)

    def backlog(self) -> float | None:
        """None if some receiver's connection takes data now; else (every connection has data
        queued) the time.monotonic() of the last send that made progress."""
        connections = self.connections
        if not connections:
            return None
        latest = 0.0
        for connection in connections:
            if not connection.queue:
                return None
            latest = max(latest, connection.progress)
        return latest

    def close(self) -> None:
        """Flush what is batched, let receivers drain it, then hang up (receivers see EOS), giving
        them CLOSE_DRAIN_TIMEOUT. An application's thread waits for that. The loop's own thread (a
        router deleting its last proxy source on the session) must not: a stopped receiver would
        stall every portal of its worker that long. There the connections drain as the loop runs
        and are closed once empty, or at the timeout with what is left counted as dropped."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self._flush_locked()
            self.held.discard()               # nobody connected in time: counted
        if self.loop.in_loop_thread():
            self._close_when_drained(time.monotonic() + CLOSE_DRAIN_TIMEOUT)
            return
        self.wait_drained(0, timeout=CLOSE_DRAIN_TIMEOUT)
        self.loop.call_and_wait(self._close_sockets)

    def _close_when_drained(self, deadline: float) -> None:
        with self.lock:
            left = [c for c in self.connections if c.queue]
        if left and time.monotonic() < deadline:
            self.loop.call_later(CLOSE_DRAIN_CHECK, self._close_when_drained, deadline)
            return
        if left:
            lost = sum(len(c.queue) for c in left)
            self.counters["dropped_would_block_batches"] += len(left)
            self.counters["dropped_would_block_bytes"] += lost
            peers = ", ".join(f"{c.peer[0]}:{c.peer[1]}" for c in left)
            log.warning("LBT-TCP session on port %d closed with %d bytes its receiver(s) %s had not taken "
                        "within %.0f s; dropped", self.port, lost, peers, CLOSE_DRAIN_TIMEOUT)
        self._close_sockets()

    def _close_sockets(self) -> None:
        self.loop.remove_reader(self.listener.fileno())
        self.listener.close()
        for connection in list(self.connections):
            self._drop_connection(connection)
