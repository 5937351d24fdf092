"""The receiver side of LBT-RU: one unicast socket per context, one connected stream per session.

A context receives every LBT-RU session it joins on one UDP socket (`LbtruPort`, a SessionSocket)
bound to a port of the receiver's `transport_lbtru_port_low..high`; datagrams go to the session
their (source address, source port, session id) names. Each joined session is an
`LbtruSessionClient`, a RepairingStream with a connection:

- it sends a CREQ every `transport_lbtru_connect_interval` until the source answers (an SM with the
  SYN flag, or data), and gives up after `transport_lbtru_maximum_connect_attempts`: the stream
  ends (EOS) and the failure is logged (no attempt is made, or counted, while the port is not
  read: flow control, router.um.session_socket);
- connected, it sends an ACK every `transport_lbtru_acknowledgement_interval` (the last sequence
  number delivered in order), which keeps the source from forgetting it, and NAKs gaps, all from
  the same socket, so the source answers to where its data goes;
- an RST from the source (it forgot this receiver, or closed) makes it connect again; a source
  that is gone does not answer, and the stream ends after the connection attempts.
"""
from __future__ import annotations

import logging
import os
import socket
from typing import Callable

from router.um.frame_stream import FrameStream
from router.um.lbtrm_receive_window import ReceiveWindow
from router.um.repairing_source import WRAP, bind_in_range
from router.um.repairing_stream import RepairingStream
from router.um.session_socket import SessionSocket
from router.um.wire.lbtru import (HEADER_SIZE, LbtruData, LbtruNcf, LbtruRst, LbtruSm, decode_lbtru, encode_lbtru_ack,
                                  encode_lbtru_creq, encode_lbtru_nak, peek_new_data)

log = logging.getLogger(__name__)

class LbtruPort(SessionSocket):
    """A context's LBT-RU receiving socket and the sessions joined on it."""

    kind = "LBT-RU"
    loss_variable = "LBTRU_LOSS_RATE"
    data_type = LbtruData
    peek_new_data = staticmethod(peek_new_data)
    data_header_size = HEADER_SIZE

    def __init__(self, loop, interface: str, port_low: int, port_high: int, receive_buffer: int,
                 on_empty: Callable[["LbtruPort"], None]):
        sock = bind_in_range(interface, port_low, port_high, "LBT-RU receiver")
        try:        # bursts wait here while the loop is busy; the kernel caps it at rmem_max
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        except OSError:
            pass
        self.interface = interface
        self.port = sock.getsockname()[1]
        super().__init__(loop, sock, f"LBT-RU receiver port {interface}:{self.port}", on_empty)

    def decode(self, datagram):
        return decode_lbtru(datagram)

    def unknown_session(self, packet, address) -> None:
        if isinstance(packet, LbtruRst):
            # An RST names no session: it is for every session of that source port.
            for client in [c for key, c in self.sessions.items() if key[:2] == tuple(address[:2])]:
                client.reset()
            return
        super().unknown_session(packet, address)

    def send(self, datagram: bytes, address: tuple[str, int]) -> bool:
        sock = self.sock
        if sock is None:
            return False
        try:
            sock.sendto(datagram, address)
            return True
        except OSError:
            return False


class LbtruSessionClient(RepairingStream):
    """One joined LBT-RU session: connected, its datagrams in order, its frames dispatched by topic index."""

    def __init__(self, loop, port: LbtruPort, source_ip: str, source_port: int, session_id: int,
                 on_closed: Callable[[FrameStream], None], *, activity_timeout: float = 60.0,
                 connect_interval: float = 0.1, maximum_connect_attempts: int = 50,
                 acknowledgement_interval: float = 0.1, window: ReceiveWindow | None = None):
        self.port = port
        self.session_id = session_id
        self.client_id = int.from_bytes(os.urandom(4), "big") or 1
        self.connect_interval = connect_interval
        self.maximum_connect_attempts = maximum_connect_attempts
        self.connected = False
        self.attempts = 0
        super().__init__(loop, ("lbtru", source_ip, source_port, session_id), port,
                         (source_ip, source_port, session_id),
                         f"LBT-RU session {source_ip}:{source_port}:{session_id:08X}",
                         on_closed, activity_timeout=activity_timeout, window=window)
        self.counters.update({"creqs_sent": 0, "acks_sent": 0, "rsts_rcved": 0, "connects": 0})
        self.connect_timer = loop.call_every(connect_interval, self._connect_tick)
        self.ack_timer = loop.call_every(acknowledgement_interval, self._ack_tick)
        loop.call_later(0, self._connect_tick)

    # -- the connection --------------------------------------------------------------------------
    def _connect_tick(self) -> None:
        if self.closed or self.connected:
            return
        if not self.listening():
            # The port is not read (flow control): the source's answer would wait unread, and
            # an attempt it cannot answer for us is not one it failed to answer.
            return
        if self.attempts >= self.maximum_connect_attempts:
            log.warning("%s: no answer to %d connection requests; ended", self.description, self.attempts)
            self.close()
            return
        self.attempts += 1
        if self.port.send(encode_lbtru_creq(self.session_id, self.client_id), self.address[:2]):
            self.counters["creqs_sent"] += 1

    def _connected(self) -> None:
        if not self.connected:
            self.connected = True
            self.attempts = 0
            self.counters["connects"] += 1

    def reset(self) -> None:
        """The source sent an RST: connect again. While connecting, an RST is the answer to a
        request (the source does not know this session any more): the next request waits its
        connect interval, so the attempts still span what they are configured to."""
        if self.closed:
            return
        self.counters["rsts_rcved"] += 1
        was_connected, self.connected = self.connected, False
        if was_connected:
            log.info("%s: reset by the source; connecting again", self.description)
            # The attempts run from this first one: the timer that ran since the client started
            # could tick a moment after it, and the attempts would end short of their interval.
            self.connect_timer.cancel()
            self.connect_timer = self.loop.call_every(self.connect_interval, self._connect_tick)
            self._connect_tick()

    def _ack_tick(self) -> None:
        if self.closed or not self.connected:
            return
        expected = self.window.expected
        if expected is None:
            return
        if self.port.send(encode_lbtru_ack(self.session_id, self.client_id, (expected - 1) % WRAP),
                          self.address[:2]):
            self.counters["acks_sent"] += 1

    # -- datagrams -------------------------------------------------------------------------------
    def in_order_data(self, sqn: int, payload, now: float) -> bool:
        """Connected, as DATA makes it; until then DATA goes the whole way (it connects)."""
        return self.connected and super().in_order_data(sqn, payload, now)

    def packet(self, packet, now: float) -> None:
        if self.closed or not self._believable(packet):
            return
        self.last_heard = now
        if isinstance(packet, LbtruData):
            self._connected()
            self._data(packet.sqn, packet.payload, now, packet.retransmission, packet.trail_sqn)
        elif isinstance(packet, LbtruSm):
            if packet.syn:
                self._connected()
            if self.connected:
                self._sm(packet.lead_sqn, packet.trail_sqn, now)
        elif isinstance(packet, LbtruNcf):
            self._ncf(packet.sqns, packet.reason, packet.trail_sqn, now)
        else:
            self.counters["malformed"] += 1         # NAK, ACK or CREQ: what receivers send

    def _send_naks(self, sqns: list[int]) -> bool:
        return self.port.send(encode_lbtru_nak(self.session_id, self.client_id, sqns), self.address[:2])

    def _close_transport(self) -> None:
        self.connect_timer.cancel()
        self.ack_timer.cancel()
        super()._close_transport()

