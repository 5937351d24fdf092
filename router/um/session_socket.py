"""A receiving socket shared by the transport sessions a context joined on it (LBT-RM, LBT-RU).

One socket serves many sessions: each datagram goes to the session its (source address, source
port, session id) names. Datagrams of sessions nobody here joined are counted and dropped, as UM
does. When a session's consumer cannot take more (a router's ring is full) the socket stops being
read, so loss the kernel then takes is repaired by NAKs, as a UM receiver's would be.

A read that brings less than router.um.loop.SMALL_READ says so to the loop: a router worker
batching a stream then lets the socket fill a little before it is woken again (read coalescing).

The environment variable `<TRANSPORT>_LOSS_RATE` (LBTRM_LOSS_RATE, LBTRU_LOSS_RATE: a percentage,
as in UM) makes a receiver drop that share of the DATA datagrams it receives, on purpose: loss on
loopback, to exercise recovery. It is said in the log.
"""
from __future__ import annotations

import logging
import os
import random
import socket
import time
from typing import Callable

from router.um.datagrams import pending_datagrams
from router.um.loop import SMALL_READ
from router.um.wire.errors import WireError

log = logging.getLogger(__name__)

_RECEIVE_BATCH = 256


def loss_rate(variable: str) -> float:
    try:
        return max(0.0, min(100.0, float(os.environ.get(variable, "0")))) / 100.0
    except ValueError:
        return 0.0


class SessionSocket:
    """Subclasses set `kind` (for logs), `loss_variable`, `data_type` (the DATA packet class) and
    implement `decode` and `session_key`; `self.description` names the socket in logs. One may
    set `peek_new_data` (the wire module's: a datagram -> (session id, sqn) of new DATA, or None)
    and `data_header_size`: a datagram it reads is offered to its session first, straight from
    the header (RepairingStream.in_order_data), and decoded only if the session does not take it."""

    kind = "?"
    loss_variable = ""
    data_type: type = type(None)
    peek_new_data: Callable[[bytes], tuple[int, int] | None] | None = None
    data_header_size = 0

    def __init__(self, loop, sock: socket.socket, description: str, on_empty: Callable[["SessionSocket"], None]):
        self.loop = loop
        self.sock: socket.socket | None = sock
        self.description = description
        self.on_empty = on_empty
        self.sessions: dict[tuple, object] = {}
        self.paused: set = set()
        self.counters = {"datagrams": 0, "dgrams_dropped_sid": 0, "dgrams_dropped_hdr": 0,
                         "dgrams_dropped_simulated": 0}
        self.loss_rate = loss_rate(self.loss_variable)
        self.rng = random.Random()
        if self.loss_rate:
            log.warning("%s: dropping %.1f%% of received DATA datagrams on purpose (%s)", description,
                        self.loss_rate * 100, self.loss_variable)
        sock.setblocking(False)
        self.reading = True
        self.reading_batch = False            # in _readable: sessions batch their datagrams till it ends
        self._batched: list = []              # the sessions holding datagrams of this read
        loop.add_reader(sock.fileno(), self._readable)

    def decode(self, datagram):
        raise NotImplementedError

    def session_key(self, packet, address) -> tuple:
        return (address[0], address[1], packet.session_id)

    def unknown_session(self, packet, address) -> None:
        """A datagram of a session nobody here joined."""
        self.counters["dgrams_dropped_sid"] += 1

    def add(self, client) -> None:
        self.sessions[client.address] = client

    def remove(self, client) -> None:
        if self.sessions.get(client.address) is client:
            del self.sessions[client.address]
        self.paused.discard(client)
        self._update_reading()
        if not self.sessions:
            self.close()

    def pause(self, client) -> None:
        self.paused.add(client)
        self._update_reading()

    def resume(self, client) -> None:
        self.paused.discard(client)
        self._update_reading()

    def _update_reading(self) -> None:
        want = not self.paused and self.sock is not None
        if want and not self.reading:
            self.reading = True
            self.loop.add_reader(self.sock.fileno(), self._readable)
            self.loop.call_later(0, self._readable)
        elif not want and self.reading and self.sock is not None:
            self.reading = False
            self.loop.remove_reader(self.sock.fileno())
        else:
            return
        # Every session's repair waits while the socket is not read (router.um.repairing_stream).
        for client in list(self.sessions.values()):
            client.reading_changed(self.reading)

    def batched(self, client) -> None:
        """`client` holds datagrams of this read: it parses them when the read ends."""
        self._batched.append(client)

    def _readable(self) -> None:
        sock = self.sock
        if sock is None or not self.reading:
            return
        self.reading_batch = True
        try:
            received = self._read(sock)
            if 0 < received < SMALL_READ:
                self.loop.read_was_small()          # a stream batched: let the socket fill (router.um.loop)
        finally:
            self.reading_batch = False
            batched, self._batched = self._batched, []
            for client in batched:
                client.parse_batch()

    def _read(self, sock: socket.socket) -> int:
        """Read what waits (up to _RECEIVE_BATCH datagrams); the bytes read."""
        now = time.monotonic()
        counters, sessions, received = self.counters, self.sessions, 0
        # Simulated loss drops DATA it decodes: every datagram goes the whole way then.
        peek = None if self.loss_rate else self.peek_new_data
        for datagram, address in pending_datagrams(sock, _RECEIVE_BATCH, self.description):
            counters["datagrams"] += 1
            received += len(datagram)
            if peek is not None and (new := peek(datagram)) is not None:
                client = sessions.get((address[0], address[1], new[0]))
                if client is not None and client.in_order_data(new[1], memoryview(datagram)[self.data_header_size:],
                                                               now):
                    if not self.reading or self.sock is not sock:
                        return received       # a consumer paused us mid-batch, or the last session ended
                    continue
            try:
                packet = self.decode(datagram)
            except WireError as err:
                count = self.counters["dgrams_dropped_hdr"] = self.counters["dgrams_dropped_hdr"] + 1
                if not count & (count - 1):
                    log.warning("%s datagram from %s:%d on %s: %s; dropped (%d so far)", self.kind,
                                address[0], address[1], self.description, err, count)
                continue
            client = sessions.get(self.session_key(packet, address))
            if client is None:
                self.unknown_session(packet, address)
                continue
            if self.loss_rate and isinstance(packet, self.data_type) and self.rng.random() < self.loss_rate:
                self.counters["dgrams_dropped_simulated"] += 1
                continue
            client.packet(packet, now)
            if not self.reading or self.sock is not sock:
                return received       # a consumer paused us mid-batch, or the last session ended
        return received

    def close(self) -> None:
        if self.sock is None:
            return
        if self.reading:
            self.loop.remove_reader(self.sock.fileno())
            self.reading = False
        self.sock.close()
        self.sock = None
        self._closed()
        self.on_empty(self)

    def _closed(self) -> None:
        """Release what a subclass holds besides the socket."""
