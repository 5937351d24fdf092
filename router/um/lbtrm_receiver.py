"""The receiver side of LBT-RM: one socket per multicast group and port, one stream per session.

A context joins each (group, destination port) it has sources on once (`LbtrmGroup`): the socket
is bound to the group, so it hears only that group, and its datagrams go to the session they name
(source address, source port, session id). Datagrams of sessions nobody here joined are counted and
dropped, as UM does. Each joined session is an `LbtrmSessionClient`, a FrameStream: its
ReceiveWindow (router.um.lbtrm_receive_window) puts datagrams in order, NAKs gaps by unicast to the
source's port, and gives up what cannot be repaired (counted as lost). The session ends (EOS) when
neither data nor a session message came for `transport_lbtrm_activity_timeout`.

The environment variable LBTRM_LOSS_RATE (a percentage, as in UM) makes receivers drop that share of
the DATA datagrams they receive, on purpose: loss on loopback, to exercise recovery.
"""
from __future__ import annotations

import logging
import os
import random
import socket
import time
from typing import Callable

from router.um.datagrams import pending_datagrams
from router.um.frame_stream import FrameStream
from router.um.lbtrm_receive_window import ReceiveWindow
from router.um.wire.errors import WireError
from router.um.wire.lbtrm import LbtrmData, LbtrmNcf, LbtrmSm, decode_lbtrm, encode_lbtrm_nak

log = logging.getLogger(__name__)

_IP_MULTICAST_ALL = getattr(socket, "IP_MULTICAST_ALL", 49)
_RECEIVE_BATCH = 256
_NAKS_PER_PACKET = 1024
_FRAGMENT_GRACE = 1.0             # seconds past the NAK generation interval a partial message may wait


def _loss_rate() -> float:
    try:
        return max(0.0, min(100.0, float(os.environ.get("LBTRM_LOSS_RATE", "0")))) / 100.0
    except ValueError:
        return 0.0


class LbtrmGroup:
    """The socket of one (group, destination port) and the sessions joined on it."""

    def __init__(self, loop, interface: str, group: str, port: int, receive_buffer: int,
                 on_empty: Callable[["LbtrmGroup"], None]):
        self.loop = loop
        self.interface, self.group, self.port = interface, group, port
        self.on_empty = on_empty
        self.sessions: dict[tuple[str, int, int], "LbtrmSessionClient"] = {}
        self.paused: set["LbtrmSessionClient"] = set()
        self.counters = {"datagrams": 0, "dgrams_dropped_sid": 0, "dgrams_dropped_hdr": 0,
                         "dgrams_dropped_simulated": 0}
        self.loss_rate = _loss_rate()
        self.rng = random.Random()
        if self.loss_rate:
            log.warning("LBT-RM group %s:%d: dropping %.1f%% of received DATA datagrams on purpose (LBTRM_LOSS_RATE)",
                        group, port, self.loss_rate * 100)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.setsockopt(socket.IPPROTO_IP, _IP_MULTICAST_ALL, 0)
            try:        # bursts wait here while the loop is busy; the kernel caps it at rmem_max
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            except OSError:
                pass
            sock.bind((group, port))
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                            socket.inet_aton(group) + socket.inet_aton(interface))
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.sock = sock
        # NAKs leave from a unicast socket: the group socket's address is the group's.
        self.nak_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.nak_sock.bind((interface, 0))
        self.nak_sock.setblocking(False)
        self.reading = True
        loop.add_reader(sock.fileno(), self._readable)

    def add(self, client: "LbtrmSessionClient") -> None:
        self.sessions[client.address] = client

    def remove(self, client: "LbtrmSessionClient") -> None:
        if self.sessions.get(client.address) is client:
            del self.sessions[client.address]
        self.paused.discard(client)
        self._update_reading()
        if not self.sessions:
            self.close()

    def pause(self, client: "LbtrmSessionClient") -> None:
        """A consumer cannot take more (a router's ring is full): stop reading the group. Loss
        the kernel then takes is repaired by NAKs, as UM's receivers would."""
        self.paused.add(client)
        self._update_reading()

    def resume(self, client: "LbtrmSessionClient") -> None:
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

    def send_nak(self, datagram: bytes, address: tuple[str, int]) -> bool:
        try:
            self.nak_sock.sendto(datagram, address)
            return True
        except OSError:
            return False

    def _readable(self) -> None:
        sock = self.sock
        if sock is None or not self.reading:
            return
        now = time.monotonic()
        for datagram, address in pending_datagrams(sock, _RECEIVE_BATCH, f"LBT-RM group {self.group}:{self.port}"):
            self.counters["datagrams"] += 1
            try:
                packet = decode_lbtrm(datagram)
            except WireError as err:
                count = self.counters["dgrams_dropped_hdr"] = self.counters["dgrams_dropped_hdr"] + 1
                if not count & (count - 1):
                    log.warning("LBT-RM datagram from %s:%d on %s:%d: %s; dropped (%d so far)",
                                address[0], address[1], self.group, self.port, err, count)
                continue
            client = self.sessions.get((address[0], address[1], packet.session_id))
            if client is None:
                self.counters["dgrams_dropped_sid"] += 1      # a session nobody here joined
                continue
            if self.loss_rate and isinstance(packet, LbtrmData) and self.rng.random() < self.loss_rate:
                self.counters["dgrams_dropped_simulated"] += 1
                continue
            client.packet(packet, now)
            if not self.reading:
                return                # a consumer paused us mid-batch

    def close(self) -> None:
        if self.sock is None:
            return
        if self.reading:
            self.loop.remove_reader(self.sock.fileno())
        self.sock.close()
        self.nak_sock.close()
        self.sock = None
        self.on_empty(self)


class LbtrmSessionClient(FrameStream):
    """One joined LBT-RM session: datagrams in order, their frames dispatched by topic index."""

    def __init__(self, loop, group: LbtrmGroup, source_ip: str, source_port: int, session_id: int,
                 on_closed: Callable[[FrameStream], None], *, activity_timeout: float = 60.0,
                 window: ReceiveWindow | None = None):
        super().__init__(loop, ("lbtrm", source_ip, source_port, session_id, group.group, group.port), on_closed)
        self.group = group
        self.address = (source_ip, source_port, session_id)
        self.session_id = session_id
        self.description = f"LBT-RM session {source_ip}:{source_port}:{session_id:08X} on {group.group}:{group.port}"
        self.window = window or ReceiveWindow()
        self.counters.update(self.window.counters)
        self.window.counters = self.counters          # one set of counters, UM's UDPReceive names
        self.counters.update({"nak_pckts_sent": 0, "sms_rcved": 0, "ncfs_rcved": 0})
        self.activity_timeout = activity_timeout
        self.last_heard = time.monotonic()
        self.nak_timer = None
        self.nak_due: float | None = None
        self.ending: list[Callable[[], None]] = []        # subscriptions to end once repair is done
        self.ending_since = 0.0
        self.sm_since_ending = False
        group.add(self)
        self._activity = loop.call_every(min(1.0, max(activity_timeout / 4, 0.05)), self._check_activity)

    # -- datagrams -------------------------------------------------------------------------------
    def packet(self, packet, now: float) -> None:
        if self.closed:
            return
        self.last_heard = now
        window = self.window
        if isinstance(packet, LbtrmData):
            payloads = window.data(packet.sqn, bytes(packet.payload), now, packet.retransmission, packet.trail_sqn)
        elif isinstance(packet, LbtrmSm):
            self.counters["sms_rcved"] += 1
            self.sm_since_ending = True
            payloads = window.sm(packet.lead_sqn, packet.trail_sqn, now)
        elif isinstance(packet, LbtrmNcf):
            self.counters["ncfs_rcved"] += 1
            payloads = window.ncf(packet.sqns, packet.reason, packet.trail_sqn, now)
        else:
            return                      # a NAK from another receiver (multicast NAKs): not ours to answer
        for payload in payloads:
            self._frames(payload)
        self._arm_naks()
        if self.ending:
            self._check_ending()

    def end_when_repaired(self, callback: Callable[[], None]) -> None:
        """Run `callback` (end a subscription: its source sent a final advertisement) once what the
        source sent last is here: a session message heard since (its lead tells of a lost tail)
        and nothing missing. At most nak_generation_interval later, as loss would be given up."""
        if not self.ending:
            self.ending_since = time.monotonic()
            self.sm_since_ending = False
            self.loop.call_later(self.window.nak_generation, self._check_ending)
        self.ending.append(callback)
        self._check_ending()

    def _check_ending(self) -> None:
        if not self.ending or self.closed:
            return
        window = self.window
        repaired = self.sm_since_ending and not window.missing and not window.buffered
        if repaired or time.monotonic() - self.ending_since >= window.nak_generation:
            callbacks, self.ending = self.ending, []
            for callback in callbacks:
                callback()

    def _frames(self, payload: bytes) -> None:
        self.counters["bytes"] += len(payload)
        if self._parse(payload) != len(payload):
            self._malformed("a datagram that is not whole frames", close=False)

    def _arm_naks(self) -> None:
        due = self.window.next_deadline()
        if due is None or (self.nak_due is not None and self.nak_due <= due):
            return
        if self.nak_timer is not None:
            self.nak_timer.cancel()
        self.nak_due = due
        self.nak_timer = self.loop.call_later(max(0.0, due - time.monotonic()), self._naks_due)

    def _naks_due(self) -> None:
        self.nak_timer = self.nak_due = None
        if self.closed:
            return
        naks, payloads = self.window.due(time.monotonic())
        for start in range(0, len(naks), _NAKS_PER_PACKET):
            datagram = encode_lbtrm_nak(self.session_id, self.address[1], naks[start:start + _NAKS_PER_PACKET])
            if self.group.send_nak(datagram, self.address[:2]):
                self.counters["nak_pckts_sent"] += 1
        for payload in payloads:
            self._frames(payload)
        self._arm_naks()
        if self.ending:
            self._check_ending()

    def _check_activity(self) -> None:
        if self.closed:
            return
        now = time.monotonic()
        if now - self.last_heard >= self.activity_timeout:
            log.info("%s: nothing heard for %.1f s; ended", self.description, self.activity_timeout)
            self.close()
        elif self.fragments:
            # A message whose fragments straddle loss that was given up never completes: once
            # repair has had its whole NAK generation interval, what is still partial goes.
            self.expire_fragments(now - self.window.nak_generation - _FRAGMENT_GRACE)

    # -- flow control ----------------------------------------------------------------------------
    def pause(self) -> None:
        if not self.paused and not self.closed:
            self.paused = True
            self.group.pause(self)

    def resume(self) -> None:
        if self.paused and not self.closed:
            self.paused = False
            self.group.resume(self)

    def _close_transport(self) -> None:
        self._activity.cancel()
        if self.nak_timer is not None:
            self.nak_timer.cancel()
        self.group.remove(self)
