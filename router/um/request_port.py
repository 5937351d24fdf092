"""The requester's end of responses: a context's request port and the UIM connections made to it.

A context opens its request port on first use only: a context that never sends a request holds no
port (UM's default range, request_tcp_port_low..high, has five ports, and many contexts share a
host). Each responder's context connects once and sends its responses as LBMC MESSAGE frames whose
topic index is the request index (router.um.requests); fragments are reassembled per connection by
(qidx, first_sqn), each set aside in full on its first piece: at most MAX_PARTIAL_BYTES a
connection and PORT_MAX_PARTIAL_BYTES the whole port, whatever size first pieces claim on however
many connections. A whole response goes to `on_response(qidx, data, source)`. A connection that
breaks the framing is counted, logged and closed; the port and the other connections go on. One
that begins a response over MAX_PARTIAL_BYTES is closed the same way, counted apart
(responses_too_large): a responder's application, not its library, is likely at fault. A client
may do either in a loop: each refusal is counted, the log gets one line per kind every interval.
So does a callback that fails on what a client sends (callback_errors), frame after frame.
A requester never sends on these connections, so it cannot tell one whose responder vanished
without a word (a crashed host, a dropped NAT entry) from one that is merely quiet, and a client
may connect again and again and never send: the port holds at most MAX_CONNECTIONS; beyond that
the one silent the longest is closed (counted, response_connections_evicted), so over months the
descriptors held stay bounded. A live responder reconnects with its next response.
Frames that are not responses (late join's CONTROL requests and answers, its RETRANS messages:
router.um.late_join) go whole to `on_other(frame, connection)`; without it they are counted.
"""
from __future__ import annotations

import logging
import socket
from typing import Callable

from router.log_rate import LogRate, unsaid
from router.um.accepting import accept_pending, listen_in_range
from router.um.received_ranges import ReceivedRanges
from router.um.requests import MAX_RESPONSE_BYTES, RequestPortUnavailable
from router.um.wire.lbmc import FRAG_HEADER, LBMC_TYPE_MESSAGE, MESSAGE_HEADER, NHDR_DATA, NHDR_FRAG
from router.um.wire.lbmc_constants import NHDR_DESTINATION

log = logging.getLogger(__name__)

OnResponse = Callable[[int, bytes, str], None]
OnOther = Callable[[bytes, "UimConnection"], None]
_READ_SIZE = 256 * 1024
# As a receiver of source streams does (tcp_receiver): a large response arrives in few, full segments.
_RECEIVE_BUFFER = 4 * 1024 * 1024
# What one connection may hold in responses not yet whole: a responder cannot make us keep more.
MAX_PARTIAL_BYTES = MAX_RESPONSE_BYTES
# What all of a port's connections may hold: a few of the largest responses at once, however many
# clients each send a small first piece claiming one (every claim is set aside in full).
PORT_MAX_PARTIAL_BYTES = 4 * MAX_PARTIAL_BYTES
# Far more responders than a requester (or a router's portal) answers to at once; well below the
# descriptors a process has.
MAX_CONNECTIONS = 1024
_REFUSAL_LOG_INTERVAL = 10.0    # s: a client connecting in a loop gets one log line per interval
_MESSAGE_SIZE = MESSAGE_HEADER.size
_FRAGMENT_OVERHEAD = MESSAGE_HEADER.size + FRAG_HEADER.size
_unpack_message = MESSAGE_HEADER.unpack_from
_unpack_frag = FRAG_HEADER.unpack_from


class MalformedResponse(ValueError):
    """A frame that breaks the stream (bad length, impossible fragment): the connection goes."""


class OversizedResponse(MalformedResponse):
    """A response larger than any request port takes: counted apart (responses_too_large), since
    its responder may be well-behaved and only its application mistaken."""


class PartialBytes:
    """The bytes a request port's connections hold in responses not yet whole, and their bound."""

    __slots__ = ("held", "limit")

    def __init__(self, limit: int = PORT_MAX_PARTIAL_BYTES):
        self.held = 0
        self.limit = limit


class UimConnection:
    """One responder context's connection: a byte stream of response frames."""

    def __init__(self, sock: socket.socket, peer: tuple, on_response: OnResponse, counters: dict[str, int],
                 on_other: OnOther | None = None, shared: PartialBytes | None = None):
        self.sock = sock
        self.source = f"TCP:{peer[0]}:{peer[1]}"
        self.on_response = on_response
        self.on_other = on_other
        self.late_join: dict[int, list] = {}     # topic index -> the LateJoinClients its RETRANS may be for
        self.counters = counters
        self.buffer = bytearray()
        self.partial: dict[tuple[int, int], list] = {}     # (qidx, first_sqn) -> [bytearray, ReceivedRanges]
        self.partial_bytes = 0
        self.shared = shared if shared is not None else PartialBytes()     # the whole port's

    def take(self, data: bytes) -> None:
        """Add what the socket gave; deliver every whole response. MalformedResponse on bad framing."""
        self.buffer += data
        buffer = bytes(self.buffer)
        offset, end = 0, len(buffer)
        try:
            while end - offset >= 4:
                msglen = (buffer[offset + 2] << 8) | buffer[offset + 3]
                if msglen < 4:
                    raise MalformedResponse(f"frame length {msglen}")
                if end - offset < msglen:
                    break
                self._frame(buffer, offset, msglen)
                offset += msglen
        finally:
            del self.buffer[:offset]

    def _frame(self, buffer: bytes, offset: int, msglen: int) -> None:
        ver_type, next_hdr, _, qidx, sqn = _unpack_message(buffer, offset) if msglen >= _MESSAGE_SIZE \
            else (buffer[offset], buffer[offset + 1], 0, 0, 0)
        if ver_type != LBMC_TYPE_MESSAGE or msglen < _MESSAGE_SIZE or qidx == 0 or next_hdr == NHDR_DESTINATION:
            # Not a plain response (a request index is never 0): a unicast immediate message, a
            # response routed from another domain (DESTINATION first), or late join's controls and
            # retransmissions; the context sorts them.
            if self.on_other is not None:
                self.on_other(buffer[offset:offset + msglen], self)
            else:
                self.counters["response_frames_unknown"] += 1   # controls a UM context may send: not ours
        elif next_hdr == NHDR_DATA:
            self.on_response(qidx, buffer[offset + _MESSAGE_SIZE:offset + msglen], self.source)
        elif next_hdr == NHDR_FRAG:
            self._fragment(buffer, offset, msglen, qidx)
        else:
            self.counters["response_frames_unknown"] += 1

    @property
    def is_open(self) -> bool:
        return self.sock.fileno() != -1

    def release(self) -> None:
        """The connection is gone: what it held goes back to the port."""
        self.shared.held -= self.partial_bytes
        self.partial.clear()
        self.partial_bytes = 0

    def _fragment(self, buffer: bytes, offset: int, msglen: int, qidx: int) -> None:
        if msglen < _FRAGMENT_OVERHEAD:
            raise MalformedResponse("fragment shorter than its headers")
        next_hdr, _, _, first_sqn, piece_offset, total = _unpack_frag(buffer, offset + _MESSAGE_SIZE)
        if next_hdr != NHDR_DATA:
            self.counters["response_frames_unknown"] += 1
            return
        piece = buffer[offset + _FRAGMENT_OVERHEAD:offset + msglen]
        key = (qidx, first_sqn)
        entry = self.partial.get(key)
        if entry is None:
            if total > MAX_PARTIAL_BYTES:
                raise OversizedResponse(f"fragmented response of {total} bytes (at most {MAX_PARTIAL_BYTES})")
            if self.partial_bytes + total > MAX_PARTIAL_BYTES:
                raise MalformedResponse(f"fragmented response of {total} bytes, with {self.partial_bytes} "
                                        f"bytes of others pending (at most {MAX_PARTIAL_BYTES})")
            if self.shared.held + total > self.shared.limit:
                raise MalformedResponse(f"fragmented response of {total} bytes, with {self.shared.held} bytes "
                                        f"pending on the port's connections (at most {self.shared.limit})")
            entry = self.partial[key] = [bytearray(total), ReceivedRanges()]
            self.partial_bytes += total
            self.shared.held += total
        if total != len(entry[0]):
            raise MalformedResponse(f"fragment of a {total}-byte response where one of {len(entry[0])} bytes "
                                    f"has the same index and first sequence number")
        if piece_offset + len(piece) > total:
            raise MalformedResponse("fragment beyond the response's length")
        entry[0][piece_offset:piece_offset + len(piece)] = piece
        entry[1].add(piece_offset, piece_offset + len(piece))     # a piece that came twice counts once
        if entry[1].covered >= total:
            del self.partial[key]
            self.partial_bytes -= len(entry[0])
            self.shared.held -= len(entry[0])
            self.on_response(qidx, bytes(entry[0]), self.source)


class RequestPort:
    """The listening request port and its connections; on the context's loop thread."""

    def __init__(self, loop, interface: str, port_low: int, port_high: int, on_response: OnResponse,
                 on_other: OnOther | None = None, max_connections: int = MAX_CONNECTIONS,
                 max_partial_bytes: int = PORT_MAX_PARTIAL_BYTES):
        self.loop = loop
        self.max_connections = max(1, max_connections)
        self.partial = PartialBytes(max_partial_bytes)
        self.on_response = on_response
        self.on_other = on_other
        errors: list[OSError] = []
        self.listener = listen_in_range(interface, range(port_low, port_high + 1), receive_buffer=_RECEIVE_BUFFER,
                                        errors=errors)
        if self.listener is None:
            last = f"; last error: {errors[-1].strerror}" if errors else ""
            raise RequestPortUnavailable(
                f"no free request port in request_tcp_port_low..high = {port_low}..{port_high} on {interface} "
                f"({max(port_high - port_low + 1, 0)} ports; widen the range, or close contexts that hold one{last})")
        self.address = (interface, self.listener.getsockname()[1])
        # By fd, the connection silent the longest first: each one heard from moves to the end.
        self.connections: dict[int, tuple[socket.socket, UimConnection]] = {}
        self.counters = {"response_connections": 0, "responses_malformed": 0, "response_frames_unknown": 0,
                         "response_connections_evicted": 0, "responses_too_large": 0, "callback_errors": 0}
        self._refusals_said = LogRate(_REFUSAL_LOG_INTERVAL)     # by kind: each has its line
        self.closed = False
        loop.add_reader(self.listener.fileno(), self._accept)

    def _accept(self) -> None:
        for sock, peer in accept_pending(self.listener, f"request port {self.address[1]}", self.loop, self._accept):
            if len(self.connections) >= self.max_connections:
                self._evict_silent()
            connection = UimConnection(sock, peer, self._deliver, self.counters, self._other, self.partial)
            self.connections[sock.fileno()] = (sock, connection)
            self.counters["response_connections"] += 1
            self.loop.add_reader(sock.fileno(), lambda fd=sock.fileno(): self._readable(fd))

    def _readable(self, fd: int) -> None:
        sock, connection = self.connections.get(fd, (None, None))
        if sock is None:
            return
        try:
            data = sock.recv(_READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(fd)
            return
        self.connections[fd] = self.connections.pop(fd)       # heard from: the last to evict
        try:
            connection.take(data)
        except MalformedResponse as err:
            counter = "responses_too_large" if isinstance(err, OversizedResponse) else "responses_malformed"
            self.counters[counter] += 1
            not_said = self._refusals_said.due(counter)
            if not_said is not None:
                log.warning("request port %d: response stream from %s refused (%s); connection closed "
                            "(%d so far)%s", self.address[1], connection.source, err, self.counters[counter],
                            unsaid(not_said))
            self._drop(fd)

    def _evict_silent(self) -> None:
        fd = next(iter(self.connections))
        _, connection = self.connections[fd]
        self.counters["response_connections_evicted"] += 1
        not_said = self._refusals_said.due("response_connections_evicted")
        if not_said is not None:
            log.warning("request port %d: %d connections held; the one from %s, silent the longest, closed "
                        "(%d so far)%s", self.address[1], len(self.connections), connection.source,
                        self.counters["response_connections_evicted"], unsaid(not_said))
        self._drop(fd)

    def _other(self, frame: bytes, connection: UimConnection) -> None:
        try:
            self.on_other(frame, connection)
        except Exception:
            self._callback_failed("on_other", "a frame from %s could not be handled", connection.source)

    def _deliver(self, qidx: int, data: bytes, source: str) -> None:
        try:
            self.on_response(qidx, data, source)
        except Exception:       # an application's callback must not cost the other responses
            self._callback_failed("on_response", "the response callback failed for request %d from %s", qidx,
                                  source)

    def _callback_failed(self, callback: str, message: str, *args) -> None:
        """Called from an except block: the traceback goes with the line, when one is said."""
        self.counters["callback_errors"] += 1
        not_said = self._refusals_said.due(callback)
        if not_said is not None:
            log.exception(f"request port %d: {message} (%d so far)%s", self.address[1], *args,
                          self.counters["callback_errors"], unsaid(not_said))

    def _drop(self, fd: int) -> None:
        sock, connection = self.connections.pop(fd, (None, None))
        if sock is not None:
            self.loop.remove_reader(fd)
            sock.close()
            connection.release()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for fd in list(self.connections):
            self._drop(fd)
        self.loop.remove_reader(self.listener.fileno())
        self.listener.close()
