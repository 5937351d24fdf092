"""A peer link's UDP data path (`<udp>`, spec/dro.md §1.5): LBT-RU between two routers' peer portals.

With `<udp>` configured on both sides of a peer link, the TCP connection carries the handshake and
the DRO keepalives, and every other message (data, advertisements, EOS, interest, route info)
takes UDP. They take it together because the link's messages are ordered: an advertisement comes
before its data and an EOS after it, which two paths could not keep.

Each side binds `<udp><port>` on the link's interface and puts that port and the session id of its
sending side in its handshake (a CTXINFO header, router.portals.peer_handshake). Once the link is
up each side has:

- a `PeerUdpSender`, an LBT-RU source session (router.um.lbtru_source) whose one receiver is the
  companion: data within `<peer-rate-limit>`, a `<transmission-window>`, NAKs answered after
  `<nak-handling ignore-interval>`, session messages at `<session-message>` intervals; what the
  rate holds back waits up to `<max-queue>` bytes and data beyond is refused and counted (control
  messages wait whatever the queue holds);
- a `PeerUdpReceiver`, an LBT-RU receiver (router.um.lbtru_receiver) connected to the companion's
  session at its TCP address and learned UDP port: it asks `<connect max-attempts>` times,
  `attempt-interval` apart, NAKs loss after the `<nak-handling>` intervals, and hands each
  datagram's LBMC messages to the link.

Both share the one socket: DATA, SM, NCF and RST are the receiver's, NAK, ACK and CREQ the
sender's. The companion's next DATA in a steady session is read from its header and handed on
without being decoded, as an LBT-RU receiver's own socket does (router.um.session_socket). The
path fails, and the link goes down and reconnects, when the companion's session does not answer
the connection requests or is silent for `<session-message activity-timeout>`.
LBTRU_LOSS_RATE (a percentage, router.um.session_socket) drops received DATA on purpose, as for
LBT-RU receivers.
"""
from __future__ import annotations

import logging
import random
import socket
import time
from typing import Callable

from router.um.frame_runs import whole_frames_within
from router.um.lbtrm_receive_window import ReceiveWindow
from router.um.lbtru_receiver import LbtruSessionClient
from router.um.lbtru_source import LbtruSourceSession
from router.um.session_socket import loss_rate
from router.um.wire.lbtru import HEADER_SIZE, MAX_DATAGRAM, LbtruData, LbtruNcf, LbtruRst, LbtruSm, peek_new_data

log = logging.getLogger(__name__)

_RECEIVER_PACKETS = (LbtruData, LbtruSm, LbtruNcf, LbtruRst)


class PeerUdpSender(LbtruSourceSession):
    """The sending half, and the owner of the path's socket."""

    kind = "peer UDP"
    rate_limit_option = "<peer-rate-limit data>"

    def __init__(self, loop, interface: str, udp, *, max_queue: int, batching_minimum_length: int,
                 batching_interval: float, on_receiver_packet: Callable):
        connect_window = udp.connect_attempt_interval * udp.connect_max_attempts / 1000
        super().__init__(loop, interface, udp.port, udp.port, datagram_max_size=MAX_DATAGRAM,
                         data_rate_limit=udp.rate_limit_data, retransmit_rate_limit=udp.rate_limit_retransmit,
                         rate_interval=udp.rate_limit_interval / 1000, window_size=udp.transmission_window_size,
                         window_limit=udp.transmission_window_limit,
                         ignore_interval=udp.nak_ignore_interval / 1000,
                         sm_minimum_interval=udp.session_min_interval / 1000,
                         sm_maximum_interval=udp.session_max_interval / 1000,
                         client_activity_timeout=udp.session_activity_timeout / 1000,
                         batching_minimum_length=batching_minimum_length, batching_interval=batching_interval,
                         overflow="drop", max_queue=max_queue,
                         # What is sent before the companion's receiver connects is its, for as
                         # long as it may take to connect.
                         hold_for_receiver=connect_window)
        for option, size in ((socket.SO_RCVBUF, udp.receive_buffer), (socket.SO_SNDBUF, udp.send_buffer)):
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, option, size)
            except OSError:
                pass
        self.on_receiver_packet = on_receiver_packet
        self.companion_ip: str | None = None
        self.reading_paused = False

    def _handle(self, packet, address: tuple[str, int], now: float) -> None:
        if isinstance(packet, _RECEIVER_PACKETS):
            self.on_receiver_packet(packet, address, now)
        elif address[0] != self.companion_ip:
            self._malformed(address, "a datagram from someone other than the companion")
        else:
            super()._handle(packet, address, now)

    def pause_reading(self, paused: bool) -> None:
        """Stop reading the socket (the ring the receiver feeds is full): the kernel holds what
        comes, and what it drops is NAKed once reading resumes."""
        if paused == self.reading_paused or self.sock.fileno() < 0:
            return
        self.reading_paused = paused
        if paused:
            self.loop.remove_reader(self.sock.fileno())
        else:
            self._companion_heard_now()
            self.loop.add_reader(self.sock.fileno(), self._readable)
            self.loop.call_later(0, self._readable)

    def _check_clients(self) -> None:
        """The companion's ACKs wait unread in the kernel while reading is paused: its silence
        then is ours, and forgetting it would stop our data and session messages to it (its
        receiver would then end the path for a pause of ours)."""
        if self.reading_paused:
            self._companion_heard_now()
        else:
            super()._check_clients()

    def _companion_heard_now(self) -> None:
        now = time.monotonic()
        for client in self.clients.values():
            client.last_heard = now

    def send_control_now(self, data: bytes) -> None:
        """Append `data` and send the batch now, within the rate, queued beyond `max_queue` if it
        must be (forced): the path's control messages are few and small, and losing one loses
        the link's order (an EOS, an advertisement), which data drops never do. The batch's
        data goes with it: PeerUdpPath.send took it within `max_queue` already."""
        with self.lock:
            self.batch += data
            batch, self.batch = self.batch, bytearray()
            self._deliver(batch, force=True)
            self._count_batch(len(batch))

    def close_now(self) -> None:
        """Close at once (the TCP link is gone, and the port is bound again by the next one)."""
        with self.lock:
            self.closed = True
            self.batch.clear()
            self.pending.clear()
            self.pending_bytes = 0
        self._close_socket()


class _SharedSocket:
    """What an LBT-RU receiver needs of its socket, served by the sender's."""

    reading_batch = False       # each datagram goes to the link as it comes (PeerUdpReceiver._frames)

    def __init__(self, sender: PeerUdpSender):
        self.sender = sender
        self.sessions: dict = {}

    @property
    def reading(self) -> bool:
        """Whether the companion's datagrams are read now: while the link's reading is paused
        (flow control), its silence is ours and must not end the path (RepairingStream.listening)."""
        return not self.sender.reading_paused

    def add(self, client) -> None:
        self.sessions[client.address] = client

    def remove(self, client) -> None:
        self.sessions.pop(client.address, None)
        self.sender.pause_reading(False)

    def pause(self, client) -> None:
        self.sender.pause_reading(True)

    def resume(self, client) -> None:
        self.sender.pause_reading(False)

    def send(self, datagram: bytes, address: tuple[str, int]) -> bool:
        return self.sender._sendto(datagram, address)


class PeerUdpReceiver(LbtruSessionClient):
    """The receiving half: the companion's session, its datagrams' LBMC messages to the link."""

    def __init__(self, loop, shared: _SharedSocket, companion: tuple[str, int], session_id: int, udp,
                 on_payload: Callable[[bytes], None], on_failed: Callable[[str], None]):
        window = ReceiveWindow(nak_initial_backoff=udp.nak_initial_backoff_interval / 1000,
                               nak_backoff=udp.nak_backoff_interval / 1000,
                               nak_suppress=udp.nak_suppress_interval / 1000,
                               nak_generation=udp.nak_generation_interval / 1000, send_naks=udp.send_naks)
        activity = udp.session_activity_timeout / 1000
        self.on_payload, self.on_failed = on_payload, on_failed
        super().__init__(loop, shared, companion[0], companion[1], session_id, self._ended,
                         activity_timeout=activity, connect_interval=udp.connect_attempt_interval / 1000,
                         maximum_connect_attempts=udp.connect_max_attempts,
                         acknowledgement_interval=min(1.0, activity / 4), window=window)
        self.description = f"peer UDP session {companion[0]}:{companion[1]}:{session_id:08X}"

    def _frames(self, payload) -> None:
        self.counters["bytes"] += len(payload)
        self.on_payload(bytes(payload))     # (a view of the datagram from in_order_data: the link's own)

    def _ended(self, _stream) -> None:
        if self.connected:
            reason = f"nothing heard on the UDP path for {self.activity_timeout:.1f} s"
        else:
            reason = f"no answer on the UDP path to {self.attempts} connection requests"
        self.on_failed(reason)


class PeerUdpPath:
    """The UDP path of one TCP connection of a peer link: made when the connection is, closed with it."""

    def __init__(self, loop, interface: str, udp, *, max_queue: int, batching_minimum_length: int,
                 batching_interval: float, on_payload: Callable[[bytes], None], on_failed: Callable[[str], None]):
        self.loop, self.udp = loop, udp
        self.on_payload, self.on_failed = on_payload, on_failed
        self.sender = PeerUdpSender(loop, interface, udp, max_queue=max_queue,
                                    batching_minimum_length=batching_minimum_length,
                                    batching_interval=batching_interval, on_receiver_packet=self._receiver_packet)
        self.sender.receiver_data = self._receiver_data
        self.shared = _SharedSocket(self.sender)
        self.receiver: PeerUdpReceiver | None = None
        self.failed = False
        self.loss_rate = loss_rate("LBTRU_LOSS_RATE")
        self.rng = random.Random()
        if self.loss_rate:
            log.warning("peer UDP path on port %d: dropping %.1f%% of received DATA datagrams on purpose "
                        "(LBTRU_LOSS_RATE)", self.port, self.loss_rate * 100)
            self.sender.receiver_data = None        # simulated loss drops DATA it decodes: all go the whole way

    @property
    def port(self) -> int:
        return self.sender.port

    @property
    def session_id(self) -> int:
        return self.sender.session_id

    def start(self, companion_ip: str, companion_port: int, companion_session: int) -> None:
        """The link is up: connect to the companion's session."""
        self.sender.companion_ip = companion_ip
        self.receiver = PeerUdpReceiver(self.loop, self.shared, (companion_ip, companion_port), companion_session,
                                        self.udp, self.on_payload, self._failed)

    def _receiver_data(self, datagram, address, now: float) -> bool:
        """The companion's next DATA datagram in a steady session, read from its header and
        taken at once (router.um.repairing_stream: in_order_data); False: decode it."""
        receiver = self.receiver
        if receiver is None or address[0] != receiver.address[0] or address[1] != receiver.address[1]:
            return False
        new = peek_new_data(datagram)
        return (new is not None and new[0] == receiver.session_id
                and receiver.in_order_data(new[1], memoryview(datagram)[HEADER_SIZE:], now))

    def _receiver_packet(self, packet, address, now: float) -> None:
        receiver = self.receiver
        if receiver is None or tuple(address[:2]) != receiver.address[:2]:
            self.sender._malformed(address, f"{type(packet).__name__} from someone other than the companion")
        elif isinstance(packet, LbtruRst):
            receiver.reset()
        elif packet.session_id != receiver.session_id:
            self.sender._malformed(address, f"{type(packet).__name__} for session {packet.session_id:08X}, "
                                            f"not the companion's")
        elif self.loss_rate and isinstance(packet, LbtruData) and self.rng.random() < self.loss_rate:
            receiver.counters["dgrams_dropped_simulated"] = receiver.counters.get("dgrams_dropped_simulated", 0) + 1
        else:
            receiver.packet(packet, now)

    def _failed(self, reason: str) -> None:
        if not self.failed and not self.sender.closed:
            self.failed = True
            self.on_failed(reason)

    def fit(self, data: bytes, longest: int | None = None) -> tuple[bytes, int, int]:
        """`data` without the messages too large for one datagram (a 65535-byte LBMC message
        from a TCP source does not fit 65487 bytes): (what fits, messages left out, their bytes).
        `longest`: its longest message's length, if known (a ring record says it): no walk then
        when every message fits, the usual case."""
        limit = self.sender.datagram_max_size
        if len(data) <= limit or (longest is not None and longest <= limit):
            return data, 0, 0
        kept, dropped, dropped_bytes, offset = bytearray(), 0, 0, 0
        while offset + 4 <= len(data):
            length = (data[offset + 2] << 8) | data[offset + 3]
            if length < 4:
                break
            if length > limit:
                dropped += 1
                dropped_bytes += length
            else:
                kept += data[offset:offset + length]
            offset += length
        return bytes(kept), dropped, dropped_bytes

    def send(self, data: bytes) -> int:
        """Queue the whole LBMC messages of data that the rate's queue has room for beside the
        batch being built; returns how many bytes, a prefix of `data` ending at a message's end
        (the caller counts the rest dropped). Taken or refused here, so the sender never drops
        a batch later: what the portal counts sent is sent."""
        sender = self.sender
        with sender.lock:
            room = sender.max_queue - sender.pending_bytes - len(sender.batch)
            taken = len(data) if len(data) <= room else whole_frames_within(data, room)
            if taken:
                sender.send_raw(data if taken == len(data) else data[:taken])
        return taken

    def send_now(self, data: bytes) -> None:
        """Send a control message (advertisement, EOS, interest, route info, TSNI) after what
        is batched, never dropped: it is small, and the link's order depends on it."""
        self.sender.send_control_now(data)

    def flush(self) -> None:
        self.sender.flush()

    def queued_bytes(self) -> int:
        """What waits for the rate (the batch being built included)."""
        sender = self.sender
        return sender.pending_bytes + len(sender.batch)

    def pause(self, paused: bool) -> None:
        self.sender.pause_reading(paused)

    # The portal counters (router.monitor.counters.UDP_PEER_COUNTERS) and what they are here.
    # What the path's socket dropped as malformed (not LBT-RU, not from the companion, another
    # session's) is the link's bad input too: ignored, the link kept.
    _SENT = {"udp_datagrams_sent": "msgs_sent", "udp_datagram_bytes_sent": "bytes_sent",
             "udp_retransmissions_sent": "rxs_sent", "udp_naks_rcvd": "naks_rcved", "udp_naks_shed": "naks_shed",
             "link_malformed": "malformed"}
    _RECEIVED = {"udp_datagrams_rcvd": "msgs_rcved", "udp_datagram_bytes_rcvd": "bytes_rcved",
                 "udp_naks_sent": "naks_sent", "udp_retransmissions_rcvd": "retransmissions_rcved",
                 "udp_datagrams_lost": "lost"}

    def portal_counters(self) -> dict[str, int]:
        found = {name: self.sender.counters.get(key, 0) for name, key in self._SENT.items()}
        receiver = self.receiver
        if receiver is not None:
            found.update({name: receiver.counters.get(key, 0) for name, key in self._RECEIVED.items()})
        return found

    def stats(self) -> dict:
        receiver, sender = self.receiver, self.sender
        with sender.window_lock:
            window = {"datagrams": len(sender.window), "bytes": sender.window_bytes, "size": sender.window_size,
                      "limit": sender.window_limit, "bytes_counted_for_limit": sender.window_footprint()}
        return {"port": self.port, "session_id": f"{self.session_id:08X}", "transmission_window": window,
                "send": dict(sender.counters),
                "receive": dict(receiver.counters) if receiver is not None else {}}

    def close(self) -> None:
        self.failed = True                       # what closing ends is not a failure
        receiver, self.receiver = self.receiver, None
        if receiver is not None and not receiver.closed:
            receiver.close(notify=False)
        self.sender.close_now()

