"""The admin socket in the supervisor: a ZeroMQ ROUTER socket served from the supervisor's loop.

ROUTER, because an asynchronous command (topics) answers later: the reply is addressed by the
client's identity whenever it is ready, while other requests go on being served. The socket is
`ipc://<runtime dir>/<name>.admin`, mode 0600 (it accepts commands without authentication, so only
the router's user may connect), or what `<daemon><admin>` says (tcp:// on loopback only; the
configuration validator enforces that). The socket file is removed at shutdown.
"""
from __future__ import annotations

import logging
import os
import socket

import zmq
from zmq.utils.monitor import recv_monitor_message

from router.admin.dispatch import dispatch, malformed
from router.admin.protocol import MAX_REQUEST_BYTES, Errno, encode_reply
from router.eventlog import event
from router.log_rate import LogRate, unsaid
from router.runtime import admin_endpoint

log = logging.getLogger(__name__)

# ZeroMQ drops a peer that sends a bigger frame without telling it; below this, oversized
# requests get a proper REQUEST_TOO_LARGE reply, above it memory is protected. ZeroMQ does not
# tell the router either: the socket's monitor says only that a connection ended, so a connection
# that ended after its ZeroMQ handshake without delivering a request is counted as cut off. (Raw
# bytes not starting with ZMTP 3's signature are taken for ZeroMQ 2's protocol, whose messages carry
# no source descriptor: such a peer's end counts as cut off whatever it delivered.)
HARD_FRAME_LIMIT = 16 * MAX_REQUEST_BYTES
_CONNECTION_EVENTS = (zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
                      | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
_HANDSHAKE_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                     zmq.EVENT_HANDSHAKE_FAILED_AUTH)
MAX_FRAMES = 8                 # identity, REQ delimiter, payload: more is not a request
REPLY_LINGER_MS = 500          # let the reply to `stop` leave before the socket closes
# Requests answered per turn of the supervisor's loop. The loop also dispatches signals, reaps and
# restarts workers and checks their heartbeats: a client asking as fast as it can (a script polling
# `status` in a loop, many at once) must not keep it answering for ever. The rest wait a turn.
REQUESTS_PER_TURN = 64


class AdminServer:
    def __init__(self, supervisor, endpoint: str):
        self.supervisor = supervisor
        self.endpoint = endpoint
        self.path = _ipc_path(endpoint)
        self.requests = 0
        self.rejected = 0
        self.cut_off = 0
        self._cut_off_said = LogRate()
        # Descriptor -> identities of the connections on it that delivered a request, not yet
        # matched with an end (see _connection_event).
        self._delivered: dict[int, set[bytes]] = {}
        self._held_event = None              # a connection's end, judged once its requests are read
        self._handshake_failed = False       # the next end is that of a connection never ZeroMQ's
        self._next_turn = None       # the loop's timer that reads on, while requests wait
        self.socket = supervisor.zmq.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, REPLY_LINGER_MS)
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 0)     # a client gone before its reply: drop it
        self.socket.setsockopt(zmq.MAXMSGSIZE, HARD_FRAME_LIMIT)
        self.socket.setsockopt(zmq.SNDHWM, 10_000)
        old_umask = os.umask(0o177)                          # the socket file is born 0600
        try:
            self.socket.bind(endpoint)
        finally:
            os.umask(old_umask)
        if self.path is not None:
            os.chmod(self.path, 0o600)
        self.fd = self.socket.getsockopt(zmq.FD)
        supervisor.loop.add_reader(self.fd, self._readable)
        self.monitor = self.socket.get_monitor_socket(_CONNECTION_EVENTS)
        self.monitor_fd = self.monitor.getsockopt(zmq.FD)
        supervisor.loop.add_reader(self.monitor_fd, self._connection_events)
        log.info("admin socket at %s", endpoint)

    def _readable(self) -> None:
        # ZeroMQ's fd signals edges, not levels: read until the socket says nothing is left, or
        # until this turn's share is used; then the loop's next turn reads on (no edge will come).
        if self._next_turn is not None:          # read now, by the descriptor or by that timer
            self._next_turn.cancel()
            self._next_turn = None
        for _ in range(REQUESTS_PER_TURN):
            if not self._request_waiting():
                self._connection_events()
                return
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                self._delivered.setdefault(frames[-1].get(zmq.SRCFD), set()).add(frames[0].bytes)
            except zmq.ZMQError:      # a ZeroMQ 2 (ZMTP 1.0) peer's messages carry no descriptor
                pass
            self._handle([frame.bytes for frame in frames])
        self._read_next_turn()

    def _request_waiting(self) -> bool:
        return self.socket is not None and bool(self.socket.getsockopt(zmq.EVENTS) & zmq.POLLIN)

    def _connection_events(self) -> None:
        # A connection's end is judged only when no request waits: one it sent just before it
        # ended may still be on the socket. Edge-triggered like the socket's: read until empty.
        while self.socket is not None:
            if self._held_event is None:
                try:
                    self._held_event = recv_monitor_message(self.monitor, zmq.NOBLOCK)
                except zmq.Again:
                    return
            if self._held_event["event"] == zmq.EVENT_DISCONNECTED and self._request_waiting():
                self._read_next_turn()
                return
            event, self._held_event = self._held_event, None
            self._connection_event(event["event"], event["value"])

    def _connection_event(self, kind: int, fd: int) -> None:
        if kind in _HANDSHAKE_FAILED:
            self._handshake_failed = True            # libzmq tells its end right after
        elif kind == zmq.EVENT_DISCONNECTED:
            never_zeromq, self._handshake_failed = self._handshake_failed, False
            if never_zeromq:
                return
            # The descriptor may already carry the next connection, whose requests can be read
            # before this end: any delivering connection's identity is taken for this one's. The
            # totals come out right (each delivering connection is matched with one end), a
            # cut-off frame only counted at the next connection's end instead.
            delivered = self._delivered.get(fd)
            if delivered:
                delivered.pop()
            else:
                self._delivered.pop(fd, None)
                self._count_cut_off()

    def _count_cut_off(self) -> None:
        self.cut_off += 1
        unsaid_before = self._cut_off_said.due()
        if unsaid_before is not None:
            log.warning("admin socket: a client's connection ended before a whole request came, %d so far; a "
                        "frame over %d bytes is cut off by ZeroMQ, which drops the client's connection "
                        "and the frame%s", self.cut_off, HARD_FRAME_LIMIT, unsaid(unsaid_before))

    def _read_next_turn(self) -> None:
        # A timer, not call_soon: the loop runs callbacks added by callbacks in the same turn.
        if self._next_turn is None and self.socket is not None:
            self._next_turn = self.supervisor.loop.call_later(0, self._readable)

    def _handle(self, frames: list[bytes]) -> None:
        self.requests += 1
        identity, body = frames[0], frames[1:]
        # A REQ client puts an empty delimiter before its payload and expects it back.
        prefix = [identity, b""] if body and body[0] == b"" else [identity]
        payload_frames = body[len(prefix) - 1:]
        send = lambda reply: self._send(prefix, reply)     # noqa: E731 - bound per request
        if len(frames) > MAX_FRAMES or len(payload_frames) != 1:
            self.rejected += 1
            malformed(send, f"a request is exactly one frame, got {len(payload_frames)}")
            return
        payload = payload_frames[0]
        if len(payload) > MAX_REQUEST_BYTES:
            self.rejected += 1
            send(encode_reply(None, None, Errno.REQUEST_TOO_LARGE,
                              f"request of {len(payload)} bytes; the limit is {MAX_REQUEST_BYTES}"))
            return
        dispatch(self.supervisor, payload, send)

    def _send(self, prefix: list[bytes], reply: bytes) -> None:
        if self.socket is None:
            return
        try:
            self.socket.send_multipart(prefix + [reply], zmq.NOBLOCK)
        except zmq.ZMQError as err:
            log.warning("admin reply dropped: %s", err)
        # Sending can consume the edge that announces the next request: look again soon (once,
        # however many replies this turn sent).
        self._read_next_turn()

    def close(self) -> None:
        if self.socket is None:
            return
        self.supervisor.loop.remove_reader(self.fd)
        self.supervisor.loop.remove_reader(self.monitor_fd)
        if self._next_turn is not None:
            self._next_turn.cancel()
            self._next_turn = None
        self.socket.disable_monitor()
        self.monitor.close()
        self.socket.close()
        self.socket = None
        if self.path is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def counters(self) -> dict[str, int]:
        """For `routerctl status`: requests read, those answered with an error unparsed (several
        frames, too large), and connections that ended before a whole request came (cut off)."""
        return {"requests": self.requests, "rejected": self.rejected, "cut_off": self.cut_off}


def _ipc_path(endpoint: str) -> str | None:
    """The socket file of an ipc:// endpoint (None for tcp:// and Linux's abstract '@' names)."""
    if endpoint.startswith("ipc://") and not endpoint.startswith("ipc://@"):
        return endpoint[len("ipc://"):]
    return None


def _in_use(path: str) -> bool:
    """Another live process listens on this socket file (a second router with the same name)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def start(supervisor) -> AdminServer | None:
    """The extension factory (router/extensions.py). A router whose admin socket cannot be bound
    still routes: it logs why and runs without one rather than failing its portals."""
    endpoint = supervisor.config.daemon.admin or admin_endpoint(supervisor.name, supervisor.runtime)
    path = _ipc_path(endpoint)
    if path is not None and os.path.exists(path) and _in_use(path):
        event("admin-socket-unavailable", f"admin socket {path} is in use by another router named "
                                          f"{supervisor.name}; routerctl cannot reach this one (give each "
                                          "router its own <name>)")
        return None
    try:
        return AdminServer(supervisor, endpoint)
    except (zmq.ZMQError, OSError) as err:
        event("admin-socket-unavailable", f"cannot open the admin socket {endpoint}: {err}; routerctl cannot "
                                          "reach this router")
        return None
