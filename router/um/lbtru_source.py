"""The source side of LBT-RU: a transport session sending LBMC frames by unicast UDP to each receiver
that connected, repairing each one's loss on its NAKs.

Sources of a context share a session (as in UM). The session binds one UDP socket on a port of the
context's `transport_lbtru_port_low..high` and advertises {interface, port, session id}. A
receiver connects with a CREQ; the session answers with a session message carrying the SYN flag
(its lead tells the receiver where its stream starts) and from then on sends it every DATA
datagram. Receivers keep the connection alive with ACKs (and NAKs, CREQs); one silent for
`transport_lbtru_client_activity_timeout` is forgotten. A NAK or ACK from a receiver this session
does not know is answered with an RST, which makes the receiver connect again; a CREQ for
another session (the one this port had before a restart) is counted and not answered. Rates, the
transmission window and the answers to NAKs are router.um.repairing_source's: retransmissions and
NCFs go to the receiver that asked, session messages to every receiver. The data rate is charged
for every copy sent. When the session closes it sends each receiver an RST.

A router's proxy source exists because a receiver in its domain showed interest, but that receiver
connects only once it has heard the proxy's advertisement. A session made with `hold_for_receiver`
(seconds) therefore remembers which datagrams it sent while no receiver was connected, and gives a
receiver that connects within that time those still in its transmission window: its SM SYN's lead
is set just before them, and they follow it (counted as held_batches_delivered; the rest expire).
"""
from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass
from typing import Callable

from router.um.datagrams import pending_datagrams
from router.um.repairing_source import WRAP, RepairingSourceSession, bind_in_range
from router.um.wire.errors import WireError
from router.um.wire.lbmr import LbtruInfo
from router.um.wire.lbtru import (FLAG_RETRANSMISSION, HEADER_SIZE, RETRANSMISSION_BYTE, LbtruAck, LbtruCreq,
                                  LbtruNak, data_header, decode_lbtru, encode_lbtru_ncf, encode_lbtru_rst,
                                  encode_lbtru_sm)
from router.um.wire.otid import lbtru_otid

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LbtruClient:
    address: tuple[str, int]
    client_id: int
    last_heard: float


class LbtruSourceSession(RepairingSourceSession):
    """One LBT-RU transport session."""

    header_size = HEADER_SIZE
    retransmission_flag = (RETRANSMISSION_BYTE, FLAG_RETRANSMISSION >> 8)
    kind = "LBT-RU"
    rate_limit_option = "transport_lbtru_data_rate_limit"
    # A receiver sharing this socket (a peer link's UDP path, router.portals.peer_udp) may take
    # its steady DATA before it is decoded: (datagram, address, now) -> taken.
    receiver_data: Callable[[bytes, tuple, float], bool] | None = None

    def __init__(self, loop, interface: str, port_low: int, port_high: int, *, datagram_max_size: int = 8192,
                 data_rate_limit: int = 10_000_000, retransmit_rate_limit: int = 5_000_000,
                 rate_interval: float = 0.1, window_size: int = 24 * 1024 * 1024, window_limit: int = 0,
                 ignore_interval: float = 0.5,
                 sm_minimum_interval: float = 0.2, sm_maximum_interval: float = 10.0,
                 client_activity_timeout: float = 10.0, batching_minimum_length: int = 2048,
                 batching_interval: float = 0.2, overflow: str = "block", max_queue: int = 8 * 1024 * 1024,
                 hold_for_receiver: float = 0.0):
        sock = bind_in_range(interface, port_low, port_high, "LBT-RU source")
        self.interface = interface
        self.clients: dict[tuple[str, int], LbtruClient] = {}
        # What sending threads read: replaced whole when a receiver comes or goes, never changed.
        self.destinations: tuple[tuple[str, int], ...] = ()
        self.client_activity_timeout = client_activity_timeout
        self.hold_for_receiver = hold_for_receiver
        self.held: collections.deque[tuple[float, int]] = collections.deque()   # (when sent, sqn), nobody there
        super().__init__(loop, sock, datagram_max_size=datagram_max_size, data_rate_limit=data_rate_limit,
                         retransmit_rate_limit=retransmit_rate_limit, rate_interval=rate_interval,
                         window_size=window_size, window_limit=window_limit, ignore_interval=ignore_interval,
                         sm_minimum_interval=sm_minimum_interval, sm_maximum_interval=sm_maximum_interval,
                         batching_minimum_length=batching_minimum_length, batching_interval=batching_interval,
                         overflow=overflow, max_queue=max_queue)
        self.counters.update({"clients_connected": 0, "clients_timed_out": 0, "creqs_rcved": 0, "acks_rcved": 0,
                              "rsts_sent": 0, "creqs_other_session": 0, "held_batches_delivered": 0,
                              "held_batches_expired": 0})

    def _start(self) -> None:
        super()._start()
        if self.sock.fileno() >= 0:
            self._client_timer = self.loop.call_every(min(1.0, max(self.client_activity_timeout / 4, 0.05)),
                                                      self._check_clients)

    # -- what receivers learn --------------------------------------------------------------------
    def advertised_info(self) -> LbtruInfo:
        return LbtruInfo(self.interface, self.port, self.session_id)

    def otid(self, index: int, context_id: int) -> bytes:
        return lbtru_otid(self.interface, self.port, self.session_id, index, ctx_id=context_id)

    @property
    def receiver_count(self) -> int:
        return len(self.destinations)

    # -- each receiver ---------------------------------------------------------------------------
    def _data_header(self, sqn: int, trail: int) -> bytes:
        return data_header(self.session_id, sqn, trail)

    def _data_cost(self, size: int) -> int:
        return size * max(1, len(self.destinations))

    def _send_data(self, sqn: int, datagram) -> None:
        destinations = self.destinations
        if not destinations and self.hold_for_receiver > 0:
            self._hold(sqn)
        for address in destinations:
            self._sendto(datagram, address)

    def _hold(self, sqn: int) -> None:
        """Remember `sqn` for the receiver to come (lock held)."""
        now = time.monotonic()
        self._expire_held(now)
        self.held.append((now, sqn))

    def _expire_held(self, now: float) -> None:
        held = self.held
        while held and now - held[0][0] > self.hold_for_receiver:
            held.popleft()
            self.counters["held_batches_expired"] += 1

    def _retransmission_scope(self, to):
        return to

    def _send_retransmission(self, datagram, to) -> bool:
        return to in self.clients and self._sendto(datagram, to)

    def _send_ncf(self, to, trail: int, reason: int, sqns: list[int]) -> None:
        self._sendto(encode_lbtru_ncf(self.session_id, trail, reason, sqns), to)

    def _send_sm(self, now: float) -> None:
        lead, trail = self._lead_trail()
        datagram = encode_lbtru_sm(self.session_id, self.sm_sqn, lead, trail)
        for address in self.destinations:
            if self._sendto(datagram, address):
                self.counters["sms_sent"] += 1

    # -- what receivers send ---------------------------------------------------------------------
    def _readable(self) -> None:
        now = time.monotonic()
        receiver_data = self.receiver_data
        for datagram, address in pending_datagrams(self.sock, 64, self.description):
            if receiver_data is not None and receiver_data(datagram, address, now):
                continue
            try:
                packet = decode_lbtru(datagram)
            except WireError as err:
                self._malformed(address, str(err))
                continue
            self._handle(packet, address, now)

    def _handle(self, packet, address: tuple[str, int], now: float) -> None:
        """One packet from a receiver."""
        if not isinstance(packet, (LbtruNak, LbtruAck, LbtruCreq)):
            self._malformed(address, f"{type(packet).__name__}, which only sources send")
            return
        if packet.session_id != self.session_id:
            if isinstance(packet, LbtruCreq):
                # A request for the session this port had before (its process restarted, say).
                # An RST names no session: the receiver would take it for every session it has
                # from this port, ours too, at each request. Unanswered, it gives up after its
                # connection attempts, as for a source that is gone.
                self.counters["creqs_other_session"] += 1
                return
            # A receiver that was connected to that session: the RST makes it connect again,
            # and learn it is gone.
            self._malformed(address, f"{type(packet).__name__} for session {packet.session_id:08X}")
            self._reset(address)
            return
        if isinstance(packet, LbtruCreq):
            self.counters["creqs_rcved"] += 1
            self._connect(address, packet.client_id, now)
            return
        client = self.clients.get(address)
        if client is None or client.client_id != packet.client_id:
            self._reset(address)
            return
        client.last_heard = now
        if isinstance(packet, LbtruAck):
            self.counters["acks_rcved"] += 1
        else:
            self._answer(packet.sqns, address, now)

    def _connect(self, address: tuple[str, int], client_id: int, now: float) -> None:
        """Answer a CREQ with SM SYN: the receiver's stream starts after its lead."""
        # The receiver joins the destinations, gets what was held and the SYN in one step under
        # the session's lock, so no datagram reaches it ahead of its SYN. A sending thread may
        # hold that lock for a while (waiting for the data rate): the loop must not wait for it.
        if self.sock.fileno() < 0:
            return                                 # closed while this waited for the lock
        if not self.lock.acquire(blocking=False):
            self.loop.call_later(0.005, self._connect, address, client_id, time.monotonic())
            return
        try:
            client = self.clients.get(address)
            if client is None or client.client_id != client_id:
                self.clients[address] = LbtruClient(address, client_id, now)
                self.destinations = tuple(self.clients)
                self.counters["clients_connected"] += 1
                log.info("%s: receiver %s:%d connected (client %08X)", self.description, *address, client_id)
            else:
                client.last_heard = now            # its SYN went missing: it asks again
            held = self._take_held(now)
            lead, trail = self._lead_trail()
            if held:
                lead = (held[0][0] - 1) % WRAP          # its stream starts at the first held datagram
            if self._sendto(encode_lbtru_sm(self.session_id, self.sm_sqn, lead, trail, syn=True), address):
                self.counters["sms_sent"] += 1
            for _, datagram in held:
                self._sendto(datagram, address)
        finally:
            self.lock.release()

    def _take_held(self, now: float) -> list[tuple[int, bytes]]:
        """The held datagrams still in the window, oldest first (lock held)."""
        self._expire_held(now)
        taken = []
        with self.window_lock:
            for _, sqn in self.held:
                datagram = self.window.get(sqn)
                if datagram is None:
                    self.counters["held_batches_expired"] += 1
                else:
                    taken.append((sqn, datagram))
        self.held.clear()
        self.counters["held_batches_delivered"] += len(taken)
        return taken

    def _reset(self, address: tuple[str, int]) -> None:
        if self._sendto(encode_lbtru_rst(), address):
            self.counters["rsts_sent"] += 1

    def _check_clients(self) -> None:
        now = time.monotonic()
        silent = [c for c in self.clients.values() if now - c.last_heard >= self.client_activity_timeout]
        for client in silent:
            del self.clients[client.address]
            self.counters["clients_timed_out"] += 1
            log.info("%s: receiver %s:%d silent for %.1f s; forgotten", self.description, *client.address,
                     self.client_activity_timeout)
        if silent:
            self.destinations = tuple(self.clients)

    def _close_socket(self) -> None:
        if self.sock.fileno() < 0:
            return
        timer = getattr(self, "_client_timer", None)
        if timer is not None:
            timer.cancel()
        for address in self.destinations:
            self._reset(address)
        self.clients.clear()
        self.destinations = ()
        super()._close_socket()
