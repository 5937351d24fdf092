"""A peer portal's TCP link to its companion on another router, driven by an EventLoop.

One side is the initiator (connects to ``<initiator><address>:<port>``, and again every
``reconnect-interval`` after a failure or a loss, each failure logged with its attempt number),
the other the acceptor (listens on ``<listen-port>`` and serves one companion at a time: a
second concurrent connection is accepted only to be closed, and logged, and the current one is
sent a keepalive query at once, so one its host no longer knows is found). On connect both sides
send the handshake (peer_handshake.py) and check the companion's; then the link is up: LBMC
messages both ways, DRO keepalives with RTT (peer_keepalive.py), batching and a bounded queue
(peer_outbound.py). A link that hears nothing for the keepalive timeout, a malformed byte stream
(counted in ``link_malformed``), or a closed socket takes the link down; nothing raises into the
owner's loop.

The owner gets ``on_up(peer_name, node_id)``, ``on_down(reason)`` and ``on_message(message)``
(every message but the handshake and keepalives) and calls :meth:`PeerLink.send_control` /
:meth:`PeerLink.send_data`. The lifecycle is the table in peer_link_states.py (zguide style): a
(state, event) pair names the next state and the action; pairs not in the table are ignored.
"""
from __future__ import annotations

import errno
import logging
import os
import socket
import time
from collections import deque
from typing import Callable

from router.eventlog import event
from router.monitor.counters import PortalCounters
from router.portals import peer_outbound, peer_sockets, peer_stream
from router.portals.peer_handshake import HandshakeError, build_handshake, is_handshake, parse_handshake
from router.portals.peer_keepalive import KeepaliveMonitor, keepalive_header
from router.portals.peer_udp import PeerUdpPath
from router.portals.queue_episodes import QueueEpisodes
from router.portals.peer_link_states import (ACCEPTOR_TRANSITIONS, INITIATOR_TRANSITIONS, LinkEvent,
                                             LinkState)
from router.portals.immediate import is_immediate
from router.portals.peer_late_join import is_late_join_answer
from router.portals.peer_responses import is_unicast
from router.um.accepting import accept_pending
from router.um.frame_runs import MIN_RUN, equal_frames, frames_and_last_sequence_numbers
from router.um.wire.lbmc_constants import NHDR_DESTINATION, NHDR_ODOMAIN, NHDR_REQUEST
from router.um.wire.lbmc import (KA_QUERY, KA_RESPONSE, LBMC_TYPE_CONTROL, LBMC_TYPE_MESSAGE, LbmcMessage,
                                 WireError, check_message_start, decode_lbmc, encode_lbmc)

log = logging.getLogger(__name__)

RECV_CHUNK = 262144
# The link reads into one buffer, in place: a read's bytes after the part of a message the last one
# left (an LBMC message is at most 64 KB). A fresh bytes object per read cost more than the bytes:
# the allocator handed the heap back and took it again, each time new zeroed pages.
RECEIVE_BUFFER = 2 * RECV_CHUNK
# Pieces of messages (responses in pieces) that wait for room in the queue, at most: one of the
# largest messages UM puts back together (router.um.unicast_immediate.MAX_MESSAGE).
MAX_HELD_PIECES = 64 * 1024 * 1024
# Data messages that are not a stream's: requests, responses and immediate messages (ODOMAIN first).
_NOT_STREAM_DATA = (NHDR_REQUEST, NHDR_DESTINATION, NHDR_ODOMAIN)

S, E = LinkState, LinkEvent


class PeerLink:
    def __init__(self, config, loop, own_name: str, node_id: int,
                 on_up: Callable[[str, int], None] | None = None, on_down: Callable[[str], None] | None = None,
                 on_message: Callable[[LbmcMessage], None] | None = None, counters=None,
                 log_event: Callable[[str, str], None] | None = None,
                 handshake_timeout_ms: int = 5000, connect_timeout_ms: int = 5000,
                 on_data: Callable[[int, bytes, int, int], None] | None = None,
                 on_read_done: Callable[[], None] | None = None):
        link = config.link
        if link.dual or (link.initiator is None) == (link.acceptor is None):
            raise ValueError(f"peer portal {config.name}: the link needs exactly one of <initiator>/<acceptor>")
        self.config, self.link, self.loop = config, link, loop
        self.name = config.name
        self.own_name, self.node_id = own_name, node_id
        self.on_up, self.on_down, self.on_message = on_up, on_down, on_message
        # Data messages go to on_data(topic index, a run of them, count, longest), as they are, to
        # be forwarded; on_read_done follows each socket read, so the owner can hand on a read's
        # worth of data at once. A run is a view of the link's receive buffer, valid until that
        # on_read_done returns (or, if the link went down meanwhile, until the owner hears so).
        self.on_data, self.on_read_done = on_data, on_read_done
        self.counters = counters if counters is not None else PortalCounters()
        self._log_event = log_event or self._default_log_event
        self.handshake_timeout_ms, self.connect_timeout_ms = handshake_timeout_ms, connect_timeout_ms
        self.is_initiator = link.initiator is not None
        self._table = INITIATOR_TRANSITIONS if self.is_initiator else ACCEPTOR_TRANSITIONS
        keepalive = config.gateway_keepalive
        self.keepalive = KeepaliveMonitor(keepalive.interval, keepalive.timeout, keepalive.idle, self.counters)
        self.queue = peer_outbound.OutboundQueue(config.max_queue, config.batching.min_length,
                                                 config.max_datagram, self.counters)
        self.state = self._previous_state = LinkState.STOPPED
        self.peer = None                        # PeerIdentity while handshaken
        self.peer_address: tuple[str, int] | None = None
        self.connect_failures = 0               # consecutive; reset when the link comes up
        self.refused_connections = 0
        self.handshake_failures = 0
        self.dropping = False                   # in a "would block" episode (logged once per episode)
        self.queue_episodes = QueueEpisodes(self._log_event)
        self._sock: socket.socket | None = None
        self._stream = None                     # what the bytes pass through: router.portals.peer_stream
        self._tls_contexts: dict = {}
        self._listener: socket.socket | None = None
        self._receive = bytearray(RECEIVE_BUFFER)
        self._received = memoryview(self._receive)  # the owner gets runs of data as views of it
        self._filled = 0                            # bytes of it read and not yet used
        self._held_pieces: deque[bytes] = deque()     # send_pieces: waiting for room in the queue
        self._held_bytes = 0
        self._writer_registered = False
        self._reading_paused = False
        self._timers: dict[str, object] = {}
        self._generation = 0                    # bumps per connection: stale timer callbacks see it
        self.udp_path: PeerUdpPath | None = None  # with <udp>: the data path of this connection
        self._udp_counted: dict[str, int] = {}    # what of the path's counters the portal's have

    # -- the owner's side ---------------------------------------------------------------------------
    def start(self) -> None:
        try:
            self._fire(E.START)
        except BaseException:
            self._shutdown("start failed")
            self.state = S.STOPPED
            raise

    def stop(self) -> None:
        self._fire(E.STOP, "stopped")

    def drop(self, reason: str) -> None:
        """Close the connection as lost, for a reason the owner found (it is not the companion's):
        an initiator connects again after reconnect-interval, an acceptor takes the next one."""
        self._fire(E.LOST, reason)

    @property
    def is_up(self) -> bool:
        return self.state is S.UP

    @property
    def listening_port(self) -> int | None:
        return self._listener.getsockname()[1] if self._listener is not None else None

    def send_control(self, message: LbmcMessage | bytes) -> bool:
        """Send a control message now (flushing the batch ahead of it); False if the link is down."""
        self.counters.add("gateway_cntl_msgs")
        if self.state is not S.UP:
            return False
        if self.udp_path is not None:           # in order with the data, on the UDP path
            data = encode_lbmc(message) if isinstance(message, LbmcMessage) else bytes(message)
            self.udp_path.send_now(data)
            self.counters.add("gateway_cntl_msgs_sent")
            return True
        return self._queue_control(message)

    def send_data(self, message: LbmcMessage | bytes, fragments: int = 1, longest: int | None = None) -> bool:
        """Queue data for the next batch: one message, or `fragments` of them as one piece (a
        read of a stream's frames, a late-join answer behind its address; `longest`, when the
        caller knows it, the length of its longest message: with <udp>, one no longer than a
        datagram spares a walk of the piece's messages). True when all of it
        was queued; False when any of it was not: the link down, its queue full, or (with
        <udp>) a message too large for a datagram. The link counts each message either way
        (data_fragments_sent, data_fragments_dropped_*), so a caller counts none of them again.
        On TCP a piece is queued whole or not at all; the UDP path takes the whole messages that
        fit its queue and refuses the rest, so a False may follow a piece's first messages sent."""
        # A ring record's view is lent for this call only: the queue copies what the socket does
        # not take now (peer_outbound, keep_lent).
        data = encode_lbmc(message) if isinstance(message, LbmcMessage) else message
        if self.state is not S.UP:
            self.counters.add_pair("data_fragments_forwarded", "data_fragment_bytes_forwarded", fragments, len(data))
            self.counters.add_pair("data_fragments_dropped_not_operational",
                                   "data_fragment_bytes_dropped_not_operational", fragments, len(data))
            return False
        if self.udp_path is not None:
            return self._send_udp(bytes(data), fragments, longest)
        status = self.queue.add_data(data, fragments)
        if status == peer_outbound.DROPPED:
            self._dropping_would_block()
            return False
        if status == peer_outbound.BATCH_STARTED:
            self._set_timer("batch", self.config.batching.batch_interval, self._on_batch_interval)
        if self.queue.has_unwritten:
            self._write()
        self.queue.keep_lent()
        return True

    def send_pieces(self, frames: list[bytes]) -> bool:
        """The pieces of one message (a response in pieces), in order: True when all were taken.
        A message larger than `<max-queue>` (UM's responses may be megabytes) is taken whole:
        its pieces go into the queue as the socket takes the ones before them, so what waits in
        the queue stays within its bound while the rest waits beside it, up to MAX_HELD_PIECES
        bytes; a message beyond that, or with a piece larger than the queue's bound, is refused
        whole (counted "would block"), never sent in part.
        On a UDP path each piece goes as send_data sends it."""
        if self.state is not S.UP or self.udp_path is not None:
            for number, frame in enumerate(frames):
                if not self.send_data(frame):
                    rest = frames[number + 1:]
                    if rest:
                        self._count_refused(len(rest), sum(map(len, rest)),
                                            "would_block" if self.state is S.UP else "not_operational")
                    return False
            return True
        size = sum(map(len, frames))
        if self._held_bytes + size > MAX_HELD_PIECES or max(map(len, frames)) > self.config.max_queue:
            self._count_refused(len(frames), size, "would_block")
            self._dropping_would_block()
            return False
        self._held_pieces.extend(frames)
        self._held_bytes += size
        self._write()
        return True

    def _release_held_pieces(self) -> bool:
        """Held pieces into the queue, as far as its bound lets them; whether any went."""
        held, queue, moved = self._held_pieces, self.queue, False
        while held and queue.total_bytes + len(held[0]) <= self.config.max_queue:
            piece = held.popleft()
            self._held_bytes -= len(piece)
            queue.add_data(piece)
            moved = True
        if moved:
            queue.flush_batch()           # nothing to wait for: the rest of the message is behind them
        return moved

    def _discard_held_pieces(self) -> None:
        if self._held_pieces:
            self._count_refused(len(self._held_pieces), self._held_bytes, "not_operational")
            self._held_pieces.clear()
            self._held_bytes = 0

    def _count_refused(self, fragments: int, size: int, reason: str) -> None:
        self.counters.add_pair("data_fragments_forwarded", "data_fragment_bytes_forwarded", fragments, size)
        self.counters.add_pair(f"data_fragments_dropped_{reason}", f"data_fragment_bytes_dropped_{reason}",
                               fragments, size)

    def _send_udp(self, data: bytes, fragments: int, longest: int | None = None) -> bool:
        counters = self.counters
        counters.add_pair("data_fragments_forwarded", "data_fragment_bytes_forwarded", fragments, len(data))
        data, too_large, too_large_bytes = self.udp_path.fit(data, longest)
        if too_large:
            count = counters.get("transport_topic_fragments_dropped_size_error") + too_large
            counters.add_pair("transport_topic_fragments_dropped_size_error",
                              "transport_topic_fragment_bytes_dropped_size_error", too_large, too_large_bytes)
            if not (count & (count - 1)) or count == too_large:
                self._log_event("drops-size-error", f"{too_large} message(s) larger than a UDP datagram dropped "
                                              f"({count} so far); lower the sources' datagram max size")
            fragments -= too_large
            if not data:
                return False
        taken = self.udp_path.send(data)
        if taken < len(data):
            refused, _ = frames_and_last_sequence_numbers(memoryview(data)[taken:])
            counters.add_pair("data_fragments_dropped_would_block", "data_fragment_bytes_dropped_would_block",
                              refused, len(data) - taken)
            self._dropping_would_block()
            if taken:
                counters.add_pair("data_fragments_sent", "data_fragment_bytes_sent", fragments - refused, taken)
            return False
        self._end_drop_episode()
        counters.add_pair("data_fragments_sent", "data_fragment_bytes_sent", fragments, len(data))
        return not too_large

    def _dropping_would_block(self) -> None:
        """Data refused for want of room in its queue: said once per episode, as a full queue
        refuses thousands of messages a second."""
        if not self.dropping:
            self.dropping = True
            rate = " at the peer rate limit" if self.udp_path is not None else ""
            self._log_event("drops-would-block", f"{self._data_queue()[0]} full ({self.config.max_queue} bytes"
                                                 f"{rate}): dropping data until it drains")

    def _end_drop_episode(self) -> None:
        """A drop episode ends when its queue has drained, not at the first message taken between
        refusals (that would say each refusal again)."""
        if self.dropping:
            queue, drained = self._data_queue()
            if drained:
                self.dropping = False
                self._log_event("drops-ended", f"{queue} drained, no longer dropping")

    def _data_queue(self) -> tuple[str, bool]:
        """Where data waits (the UDP path's rate queue, or the TCP link's), and whether it is empty."""
        if self.udp_path is not None:
            return "UDP path queue", not self.udp_path.queued_bytes()
        return "peer link queue", not self.queue.has_unwritten and not self.queue.batch_pending

    def backlog(self) -> float | None:
        """None while the link takes data (or is down: then data is dropped, not held); else, the
        socket refusing, the time.monotonic() the companion last took some. The UDP path never
        refuses: its rate's queue drops (counted) instead."""
        if self.state is not S.UP or self.udp_path is not None or not self.queue.has_unwritten:
            return None
        return self.queue.progress

    def flush(self) -> None:
        """Send the batch being built now (the owner knows no more data is coming for a while)."""
        if self.state is S.UP and self.udp_path is not None:
            self.udp_path.flush()
        elif self.state is S.UP and self.queue.batch_pending:
            self._on_batch_interval()

    def pause_reading(self) -> None:
        """Stop reading the link (the ring it feeds is full); TCP pushes back on the companion."""
        if self._sock is not None and not self._reading_paused:
            self._reading_paused = True
            self.loop.remove_reader(self._sock)
            if self.udp_path is not None:
                self.udp_path.pause(True)

    def resume_reading(self) -> None:
        if self._reading_paused:
            self._reading_paused = False
            if self._sock is not None:
                self.loop.add_reader(self._sock, self._on_readable)
            if self.udp_path is not None:
                self.udp_path.pause(False)

    # -- the state machine ----------------------------------------------------------------------------
    def _fire(self, event_: LinkEvent, detail=None) -> None:
        transition = self._table.get((self.state, event_))
        if transition is None:
            log.debug("peer %s: %s ignored in state %s", self.name, event_.value, self.state.value)
            return
        self._previous_state, self.state = self.state, transition[0]
        getattr(self, transition[1])(detail)

    def _begin_connect(self, _detail) -> None:
        """Connect to the companion; a DNS name is resolved again at every attempt (the DRO does
        this since 6.17, so a companion whose name moved is found), off the loop."""
        self._generation += 1
        initiator = self.link.initiator
        address = peer_sockets.numeric_address(initiator.address, initiator.port)
        if address is not None:
            self._connect_to(address)
            return
        generation = self._generation
        self._set_timer("connect", self.connect_timeout_ms,
                        lambda: self._fire(E.CONNECT_FAILED,
                                           f"{initiator.address} did not resolve within {self.connect_timeout_ms} ms"))
        peer_sockets.resolve_off_loop(initiator.address, initiator.port, self.loop,
                                      lambda result: self._resolved(generation, result))

    def _resolved(self, generation: int, result) -> None:
        if generation != self._generation or self.state is not S.CONNECTING or self._sock is not None:
            return                                  # timed out, stopped or restarted meanwhile
        self._cancel_timer("connect")
        if isinstance(result, OSError):
            self._fire(E.CONNECT_FAILED, f"cannot resolve {self.link.initiator.address}: {result}")
        else:
            self._connect_to(result)

    def _connect_to(self, address: tuple[str, int]) -> None:
        self.peer_address = address
        try:
            self._sock, result = peer_sockets.start_connect(self.link, address)
        except OSError as err:
            self._fire(E.CONNECT_FAILED, str(err))
            return
        if result == 0:
            self._fire(E.CONNECTED)
        elif result in (errno.EINPROGRESS, errno.EWOULDBLOCK):
            self.loop.add_writer(self._sock, self._on_connect_ready)
            self._set_timer("connect", self.connect_timeout_ms,
                            lambda: self._fire(E.CONNECT_FAILED, f"no answer within {self.connect_timeout_ms} ms"))
        else:
            self._fire(E.CONNECT_FAILED, os.strerror(result))

    def _on_connect_ready(self) -> None:
        self.loop.remove_writer(self._sock)
        self._cancel_timer("connect")
        error = self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if error:
            self._fire(E.CONNECT_FAILED, os.strerror(error))
        else:
            self._fire(E.CONNECTED)

    def _connect_failed(self, reason: str) -> None:
        self._close_connection()
        self.connect_failures += 1
        initiator = self.link.initiator
        self._log_event("peer-connect-failed",
                        f"connect to {initiator.address}:{initiator.port} failed (attempt {self.connect_failures}): "
                        f"{reason}; retrying in {initiator.reconnect_interval} ms")
        self._schedule_retry()

    def _schedule_retry(self) -> None:
        self._set_timer("retry", self.link.initiator.reconnect_interval, lambda: self._fire(E.RETRY))

    def _listen(self, _detail) -> None:
        self._listener = peer_sockets.open_listener(self.link, self.name)
        self.loop.add_reader(self._listener, self._on_acceptable)

    def _on_acceptable(self) -> None:
        listener = self._listener
        for conn, address in accept_pending(listener, f"peer {self.name}", self.loop, self._on_acceptable):
            self._fire(E.ACCEPTED, (conn, address))
            if self._listener is not listener:      # the link closed it meanwhile
                return

    def _refuse_second(self, accepted) -> None:
        conn, address = accepted
        conn.close()
        self.refused_connections += 1
        self._log_event("peer-connection-refused",
                        f"refused a second connection from {address[0]}:{address[1]}: companion "
                        f"{self._peer_text()} is already connected (one companion per peer portal)")
        # A companion whose host restarted comes back while its old connection, gone without a
        # FIN, still looks up here (for ever with keepalives off, when nothing goes on it). Ask
        # the old one now: a restarted host answers with a reset, the link goes down, and the
        # companion's next attempt is taken; a live companion just answers the keepalive.
        self._queue_own_control(self.keepalive.make_query())

    def _replace_handshaking(self, accepted) -> None:
        """A connection while another has not completed its handshake: the newer one is heard.
        A companion sends its handshake at once; one that has not may be a stray or a client
        trickling bytes to hold the only slot, which must not keep the companion out."""
        self._reject_handshake("another connection came before its handshake")
        self._begin_handshake(accepted)

    def _begin_handshake(self, accepted) -> None:
        if accepted is not None:
            self._generation += 1
            self._sock, self.peer_address = accepted
        sock = self._sock
        peer_sockets.apply_link_options(sock, self.link)
        self._filled = 0
        self.keepalive.reset()
        try:
            self._stream = peer_stream.open_stream(sock, self.link, not self.is_initiator, self._tls_contexts)
            self._stream.start()
        except (OSError, ValueError) as err:     # a TLS file changed since the load, say
            reason = str(err)
            self._set_timer("handshake", 0, lambda: self._fire(E.HANDSHAKE_FAILED, reason))
            return
        udp = None
        if self.config.udp_path is not None:
            try:
                # <interface> may be a network (10.29.3.0/24): the path binds this host's address in it.
                interface = peer_sockets.local_address(self.link.interface) if self.link.interface else "0.0.0.0"
                self.udp_path = self._open_udp_path(interface)
            except OSError as err:
                reason = f"cannot open the UDP path on port {self.config.udp_path.port}: {err}"
                self._set_timer("handshake", 0, lambda: self._fire(E.HANDSHAKE_FAILED, reason))
                return
            udp = (interface, self.udp_path.port, self.udp_path.session_id)
        self.loop.add_reader(sock, self._on_readable)
        self._set_timer("handshake", self.handshake_timeout_ms, lambda: self._fire(
            E.HANDSHAKE_FAILED, f"no handshake from the companion within {self.handshake_timeout_ms} ms"))
        self._set_timer("tick", self.keepalive.check_interval_s() * 1000, self._tick)
        self._queue_own_control(build_handshake(self.own_name, self.node_id, udp))

    def _open_udp_path(self, interface: str) -> PeerUdpPath:
        generation = self._generation
        batching = self.config.batching
        return PeerUdpPath(self.loop, interface, self.config.udp_path,
                           max_queue=self.config.max_queue, batching_minimum_length=batching.min_length,
                           batching_interval=batching.batch_interval / 1000,
                           on_payload=self._udp_payload,
                           on_failed=lambda reason: self._udp_failed(reason, generation))

    def _udp_payload(self, payload: bytes) -> None:
        """A UDP datagram's LBMC messages, in order (the path repairs loss)."""
        if self.state is not S.UP:
            return
        try:
            used = self._consume(payload)
        except WireError as err:
            used, reason = -1, str(err)
        else:
            reason = f"{len(payload) - used} bytes of a partial message at the end"
        if used != len(payload) and self.state is S.UP:
            self.counters.add("link_malformed")
            self._log_event("malformed-input", f"peer link UDP path from {self._address_text()}: malformed "
                                               f"datagram ({reason}); dropping the connection")
            self._fire(E.LOST, f"malformed UDP datagram: {reason}")
            return
        if self.on_read_done is not None and self.state is S.UP:
            self._call_owner(self.on_read_done)

    def _udp_failed(self, reason: str, generation: int) -> None:
        if generation == self._generation and self.state is S.UP:
            self._fire(E.LOST, reason)

    def _announce_up(self, identity) -> None:
        self._cancel_timer("handshake")
        self.peer = identity
        if self.udp_path is not None and identity.udp is not None:
            self.udp_path.start(self.peer_address[0], *identity.udp)
        self.connect_failures = 0
        self.counters.add("link_connects")
        self._log_event("peer-link-up", f"peer portal {self.name} has just established a connection to gateway "
                                        f"named: {identity.name} with node id: {identity.node_id}")
        self._call_owner(self.on_up, identity.name, identity.node_id)

    def _handshake_failed(self, reason: str) -> None:
        self._reject_handshake(reason)
        if self.state is S.WAITING:
            self._schedule_retry()

    def _reject_handshake(self, reason: str) -> None:
        """Close a connection whose link did not come up: counted (link_handshakes_rejected) and said."""
        self.handshake_failures += 1
        self.counters.add("link_handshakes_rejected")
        self._log_event("peer-handshake-failed", f"connection with {self._address_text()} closed before the link "
                                                 f"came up: {reason}")
        self._close_connection()

    def _link_lost(self, reason: str) -> None:
        peer = self._peer_text()
        fragments, data_bytes = self._close_connection()
        self.counters.add("link_disconnects")
        dropped = f"; {fragments} queued data fragments ({data_bytes} bytes) dropped" if fragments else ""
        self._log_event("peer-link-down", f"link to {peer} went down: {reason}{dropped}")
        if self.state is S.WAITING:
            self._schedule_retry()
        self._call_owner(self.on_down, reason)

    def _shutdown(self, reason) -> None:
        was_up = self._previous_state is S.UP
        self._close_connection()
        for name in list(self._timers):
            self._cancel_timer(name)
        if self._listener is not None:
            self.loop.remove_reader(self._listener)
            self._listener.close()
            self._listener = None
        if was_up:
            self.counters.add("link_disconnects")
            self._call_owner(self.on_down, reason or "stopped")

    def _close_connection(self) -> tuple[int, int]:
        for name in ("connect", "handshake", "tick", "batch"):
            self._cancel_timer(name)
        sock, self._sock = self._sock, None
        self._stream = None
        udp_path = self.udp_path
        if udp_path is not None:
            self._count_udp()
            self.udp_path = None
            self._udp_counted = {}
            udp_path.close()
        if sock is not None:
            self.loop.remove_reader(sock)
            self.loop.remove_writer(sock)
            sock.close()
        self._writer_registered = False
        self._reading_paused = False
        self._filled = 0
        self.peer = None
        self.dropping = False
        discarded = self.queue.discard()
        self._discard_held_pieces()
        self.queue_episodes.discarded(time.monotonic(), "the connection closed, what waited was discarded")
        return discarded

    # -- I/O -------------------------------------------------------------------------------------------
    def _on_readable(self) -> None:
        try:
            received = self._read()
        except peer_stream.Incomplete:
            self.keepalive.note_received()  # part of a frame: the companion is alive and sending
            self._want_writable()           # TLS negotiation may have something to send
            return
        except (BlockingIOError, InterruptedError):
            self._want_writable()       # TLS negotiation may have something to send
            return
        except OSError as err:
            self._fire(E.LOST, f"receive failed: {err}")
            return
        self._want_writable()
        if not received:
            self._fire(E.LOST, "the companion closed the connection")
            return
        self.keepalive.note_received()
        try:
            used = self._consume(self._receive, self._filled)
        except WireError as err:
            self.counters.add("link_malformed")
            self._log_event("malformed-input", f"peer link from {self._address_text()}: malformed LBMC stream "
                                               f"({err}); dropping the connection")
            self._fire(E.LOST, f"malformed stream: {err}")
            return
        # The owner takes the read's data (views of the buffer) before the buffer moves.
        if self.on_read_done is not None and self.state is S.UP:
            self._call_owner(self.on_read_done)
        if self._sock is not None:
            remaining = self._filled - used
            if remaining:
                self._receive[:remaining] = self._received[used:self._filled]
            self._filled = remaining

    def _read(self) -> int:
        """Read what the companion sent into the buffer, after what is there; the bytes read, 0
        when it closed. A plain link reads in place; TLS or LZ4 hand over bytes, copied in."""
        if self._filled + RECV_CHUNK > len(self._receive):
            self._grow(self._filled + RECV_CHUNK)
        stream = self._stream
        if type(stream) is peer_stream.PlainStream:
            received = stream.sock.recv_into(self._received[self._filled:self._filled + RECV_CHUNK])
        else:
            data = stream.recv(RECV_CHUNK)
            received = len(data)
            if self._filled + received > len(self._receive):
                self._grow(self._filled + received)
            self._received[self._filled:self._filled + received] = data
        self._filled += received
        return received

    def _grow(self, size: int) -> None:
        """A larger buffer (a new one: views the owner may still hold keep the old alive)."""
        bigger = bytearray(max(size, 2 * len(self._receive)))
        bigger[:self._filled] = self._received[:self._filled]
        self._receive, self._received = bigger, memoryview(bigger)

    def _consume(self, buf, end: int | None = None) -> int:
        """Handle every complete message at the front of `buf`; return the bytes used.

        Data messages (the bulk of a busy link) are not decoded: runs of consecutive ones for one
        topic index go to `on_data` as they are. Control messages are decoded and dispatched in
        their place in the stream, after the data before them, so an advertisement is always
        seen before its data and its EOS after it.
        """
        offset, generation = 0, self._generation
        if end is None:                 # a UDP datagram's payload (bytes): all of it
            end = len(buf)
        view = self._received if buf is self._receive else memoryview(buf)
        fast = self.on_data is not None and self.state is S.UP
        run_start = run_tidx = None
        run_count = run_longest = 0
        while end - offset >= 4:
            msglen = (buf[offset + 2] << 8) | buf[offset + 3]
            check_message_start(buf, offset)      # a bad version ends the link (WireError)
            if offset + msglen > end:
                break
            # Requests, responses, immediate messages and late join's RETRANS answers (not MESSAGE)
            # leave the fast path: the owner decodes them.
            if fast and buf[offset] == LBMC_TYPE_MESSAGE and buf[offset + 1] not in _NOT_STREAM_DATA:
                tidx = int.from_bytes(buf[offset + 4:offset + 8], "big")
                if run_start is not None and tidx != run_tidx:
                    self._data_run(view, run_start, offset, run_tidx, run_count, run_longest)
                    run_start = None
                if run_start is None:
                    run_start, run_tidx, run_count, run_longest = offset, tidx, 0, 0
                same = equal_frames(buf, offset, end, msglen) if end - offset >= MIN_RUN * msglen else 0
                if same > 1:            # a stretch of equal messages: no step per message
                    run_count += same
                    run_longest = max(run_longest, msglen)
                    offset += same * msglen
                    continue
                run_count += 1
                run_longest = max(run_longest, msglen)
            else:
                if run_start is not None:
                    self._data_run(view, run_start, offset, run_tidx, run_count, run_longest)
                    run_start = None
                message, _ = decode_lbmc(buf, offset)
                self._dispatch(message, msglen, bytes(view[offset:offset + msglen]))
                if self._generation != generation or self._sock is None:
                    return offset + msglen          # a message took the link down: drop the rest
                fast = self.on_data is not None and self.state is S.UP
            offset += msglen
        if run_start is not None:
            self._data_run(view, run_start, offset, run_tidx, run_count, run_longest)
        return offset

    def _data_run(self, view: memoryview, start: int, stop: int, tidx: int, count: int, longest: int) -> None:
        """A run of data messages to the owner as a view (of the receive buffer: valid until its
        on_read_done returns; the owner copies them once, into its ring)."""
        self.counters.add_pair("data_msgs_rcvd", "data_msg_bytes_rcvd", count, stop - start)
        self._call_owner(self.on_data, tidx, view[start:stop], count, longest)

    def _dispatch(self, message: LbmcMessage, size: int, raw: bytes = b"") -> None:
        control = message.msg_type == LBMC_TYPE_CONTROL
        if control:
            self.counters.add_pair("gateway_cntl_msgs_rcvd", "gateway_cntl_msg_bytes_rcvd", 1, size)
        else:
            self.counters.add_pair("data_msgs_rcvd", "data_msg_bytes_rcvd", 1, size)
        if self.state is S.HANDSHAKING:
            try:
                self._fire(E.HANDSHAKE_OK, parse_handshake(message, self.node_id, self.config.udp_path is not None))
            except HandshakeError as err:
                self._fire(E.HANDSHAKE_FAILED, str(err))
            return
        if is_handshake(message):
            self.counters.add("link_malformed")
            self._fire(E.LOST, "protocol error: a second handshake on an established link")
            return
        if not control and self.on_data is not None and not is_unicast(message) and not is_immediate(message) \
                and not is_late_join_answer(message):
            self._call_owner(self.on_data, message.tidx, raw, 1, size)
            return
        keepalive = keepalive_header(message)
        if keepalive is not None:
            if keepalive.flags & KA_QUERY:
                self._queue_own_control(self.keepalive.make_response(keepalive))
            elif keepalive.flags & KA_RESPONSE:
                self.keepalive.on_response(keepalive)
            return
        self._call_owner(self.on_message, message)

    def _queue_own_control(self, message: LbmcMessage) -> bool:
        """The link's own control messages (handshake, keepalives): generated, as the owner's are
        (send_control), so gateway_cntl_msgs_sent never exceeds gateway_cntl_msgs."""
        self.counters.add("gateway_cntl_msgs")
        return self._queue_control(message)

    def _queue_control(self, message: LbmcMessage | bytes) -> bool:
        data = encode_lbmc(message) if isinstance(message, LbmcMessage) else bytes(message)
        if not self.queue.add_control(data):
            # The companion has read nothing for so long that even control messages pile up:
            # the link goes down (not now: the caller may be in the middle of a pass), and
            # coming up again sends the state afresh.
            generation = self._generation
            self.loop.call_later(0, lambda: generation == self._generation and self._fire(
                E.LOST, f"the companion has not read {self.queue.total_bytes} queued bytes, control messages "
                        f"among them"))
            return False
        self.counters.add("gateway_cntl_msgs_sent")
        self._write()
        return True

    def _write(self) -> None:
        stream = self._stream
        if stream is None:
            return
        try:
            stream.flush()
            written = self.queue.write_to(stream)
            while self._held_pieces and self._release_held_pieces():
                more = self.queue.write_to(stream)
                written += more
                if not more:
                    break
        except OSError as err:
            self._fire(E.LOST, f"send failed: {err}")
            return
        if written:
            self.keepalive.note_sent()
        self._want_writable()
        self._end_drop_episode()

    def _want_writable(self) -> None:
        """Be called when the socket takes more while the queue or the stream holds bytes."""
        sock = self._sock
        if sock is None:
            return
        waiting = self.queue.has_unwritten or self._stream.pending
        if waiting and not self._writer_registered:
            self.loop.add_writer(sock, self._write)
            self._writer_registered = True
        elif not waiting and self._writer_registered:
            self.loop.remove_writer(sock)
            self._writer_registered = False

    def _on_batch_interval(self) -> None:
        self.queue.flush_batch()
        self._write()

    def _count_udp(self) -> None:
        """Add what the UDP path counted since last time to the portal's counters (the path's
        start again with each connection; the portal's go on)."""
        counted = self._udp_counted
        for name, value in self.udp_path.portal_counters().items():
            delta = value - counted.get(name, 0)
            if delta:
                self.counters.add(name, delta)
                counted[name] = value

    def _tick(self) -> None:
        self._set_timer("tick", self.keepalive.check_interval_s() * 1000, self._tick)
        if self.udp_path is not None:
            self._count_udp()
        self._end_drop_episode()
        waiting = self.udp_path.queued_bytes() if self.udp_path is not None else self.queue.unwritten_bytes
        self.queue_episodes.sample(waiting, time.monotonic())
        if self.state is not S.UP:
            return
        if self._reading_paused:
            # What the companion sends waits unread (flow control): the silence is ours, and
            # it is measured again from when reading resumes.
            self.keepalive.note_received()
        if self.keepalive.is_dead() and self._unread_input():
            # The silence may be ours: a long turn of this worker (a big batch, a starved CPU)
            # ran while the companion's messages arrived, and this tick came before the loop
            # looked at the socket again. Read them before judging the companion.
            self._on_readable()
            if self.state is not S.UP:
                return
        if self.keepalive.is_dead():
            self._fire(E.LOST, f"nothing received for {self.keepalive.silent_ms():.0f} ms "
                               f"(gateway-keepalive timeout {self.config.gateway_keepalive.timeout} ms)")
        elif self.keepalive.query_due():
            self._queue_own_control(self.keepalive.make_query())       # TCP, with or without <udp>

    def _unread_input(self) -> bool:
        """Something from the companion waits in our socket: bytes, or its end."""
        if self._sock is None:
            return False
        try:
            self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True         # a reset: the read says so
        return True

    # -- helpers ------------------------------------------------------------------------------------
    def _call_owner(self, callback, *args) -> None:
        if callback is None:
            return
        try:
            callback(*args)
        except Exception:               # the owner's bug must not take the link (or a batch) down
            log.exception("peer %s: callback %r failed", self.name, callback)

    def _set_timer(self, name: str, delay_ms: float, callback: Callable[[], None]) -> None:
        self._cancel_timer(name)
        generation = self._generation

        def fire() -> None:
            if self._timers.get(name) is timer and self._generation == generation:
                del self._timers[name]
                callback()
        timer = self.loop.call_later(delay_ms / 1000, fire)
        self._timers[name] = timer

    def _cancel_timer(self, name: str) -> None:
        timer = self._timers.pop(name, None)
        if timer is not None:
            timer.cancel()

    def _peer_text(self) -> str:
        return f"{self.peer.name} (node id {self.peer.node_id})" if self.peer else self._address_text()

    def _address_text(self) -> str:
        return f"{self.peer_address[0]}:{self.peer_address[1]}" if self.peer_address else "the companion"

    def _default_log_event(self, name: str, text: str) -> None:
        event(name, text, self.name)

