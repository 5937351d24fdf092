"""Multicast immediate messaging (MIM): messages sent to a topic, or to no topic, without a source.

A context sends an immediate message as one LBT-RM DATA datagram (router.um.wire.lbtrm) to
`mim_outgoing_address`:`mim_outgoing_destination_port`, holding one LBMC MESSAGE with

    CTXINST   the sending context's instance: with the LBMC sequence number it names the message
              wherever it goes (routers keep both), so copies can be told apart
    TOPICNAME the topic (absent for a topicless message)
    DATA      the payload

A router adds ODOMAIN, the domain id the message came from, when it floods it into other domains.

Every context listening (one with a receiver, a topicless-message callback or a router portal)
joins `mim_incoming_address`:`mim_incoming_destination_port`. What arrives goes through delivery
control (router.um.immediate_delivery: each message once) and then to the context: topic messages
to that topic's receivers, topicless ones to its immediate-message callbacks, and every one to a
router's listener with its frame as it came. What does not parse is counted and logged.

There is no retransmission: like UM's MIM, a lost datagram is lost, and UM advises against MIM
for messaging traffic (seed §2.7). A message must fit one datagram
(`transport_lbtrm_datagram_max_size`); a larger one is refused with a clear error.
"""
from __future__ import annotations

import logging
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Callable

from router.um.config import UMConfig
from router.um.immediate_delivery import ImmediateDeliveryControl
from router.um.wire.errors import WireError
from router.um.wire.lbmc import CtxInst, LbmcMessage, ODomain, TopicName, decode_lbmc, encode_lbmc, peek_msglen
from router.um.wire.lbmc_constants import LBMC_TYPE_MESSAGE, NHDR_CTXINST
from router.um.wire.lbtrm import HEADER_SIZE, decode_lbtrm_data, encode_lbtrm_data

log = logging.getLogger(__name__)

_IP_MULTICAST_ALL = 49          # Linux: deliver only groups this socket joined
_RECEIVE_BATCH = 64             # datagrams read per readiness event before yielding to the loop
_MALFORMED_LOG_INTERVAL = 10.0  # seconds between log lines about unparsable datagrams
_ORIGIN_FROM_ADDRESS = struct.Struct(">4sHH")


@dataclass(frozen=True, slots=True)
class ImmediateMessage:
    topic: str | None           # None: a topicless message
    data: bytes
    sqn: int                    # the originating context's immediate-message sequence number
    origin: bytes               # the originating context's instance (8 bytes)
    origin_domain: int | None   # ODOMAIN: set by the router that brought it into this domain
    source: str                 # the transport it arrived on: LBTRM:ip:port:session:group:port
    frame: bytes                # the whole LBMC message as it arrived (routers forward it)


class ImmediateChannel:
    """One context's MIM sockets: send always; listen once something wants what arrives."""

    def __init__(self, config: UMConfig, loop, interface: str, ctxinst: bytes,
                 deliver: Callable[[ImmediateMessage], None]):
        get = config.get
        address = get("context", "mim_address")
        port = get("context", "mim_destination_port")
        self.incoming = (get("context", "mim_incoming_address") or address,
                         get("context", "mim_incoming_destination_port") or port)
        self.outgoing = (get("context", "mim_outgoing_address") or address,
                         get("context", "mim_outgoing_destination_port") or port)
        self.datagram_max_size = get("context", "transport_lbtrm_datagram_max_size")
        self.loop = loop
        self.interface = interface
        self.ctxinst = ctxinst
        self.deliver = deliver
        self.on_duplicate: Callable[[int], None] | None = None     # a router counts the copies it drops
        self.delivery = ImmediateDeliveryControl(get("context", "mim_sqn_window_size"),
                                                 get("context", "mim_src_deletion_timeout") / 1000)
        self.session_id = int.from_bytes(os.urandom(4), "big")
        self.counters = {"mim_messages_sent": 0, "mim_bytes_sent": 0, "mim_send_errors": 0,
                         "mim_messages_received": 0, "mim_bytes_received": 0, "mim_duplicates": 0,
                         "mim_malformed": 0, "mim_listen_errors": 0}
        self._lock = threading.Lock()           # applications send from their own threads
        self._datagram_sqn = 0
        self._message_sqn = 0
        self._last_malformed_log = 0.0
        self.receiver: socket.socket | None = None
        self.sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(interface))
        self.sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, get("context", "mim_ttl"))
        self.sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        self.sender.bind((interface, 0))
        self.own_address = self.sender.getsockname()
        self.closed = False

    # -- sending -----------------------------------------------------------------------------------
    def send(self, topic: str | None, data) -> int:
        """Send one immediate message (topicless if `topic` is None); returns its sequence number.
        ValueError if it does not fit one datagram; OSError if the socket refuses it (counted)."""
        with self._lock:
            sqn = self._message_sqn
            headers = [CtxInst(self.ctxinst, NHDR_CTXINST)]
            if topic is not None:
                headers.append(TopicName(topic))
            frame = encode_lbmc(LbmcMessage(LBMC_TYPE_MESSAGE, headers, bytes(data), tidx=0, sqn=sqn))
            self._check_size(len(frame))
            self._message_sqn = (sqn + 1) & 0xFFFFFFFF
            self._send_locked(frame)
            return sqn

    def send_frames(self, frames: bytes) -> None:
        """Send whole LBMC messages as they are, in one datagram of this context's session (a router
        forwarding messages other contexts originated). ValueError if they do not fit."""
        with self._lock:
            self._check_size(len(frames))
            self._send_locked(frames)

    def remember(self, origin: bytes, sqn: int) -> bool:
        """Note a message as had here (on the loop thread); False if it was already. A router asks
        before sending one into this domain: if another router brought it first, the domain has it,
        and a copy it hears later is known for one."""
        return self.delivery.is_new(origin, sqn)

    def _check_size(self, frame_length: int) -> None:
        if frame_length + HEADER_SIZE > self.datagram_max_size:
            raise ValueError(f"an immediate message of {frame_length + HEADER_SIZE} bytes on the wire does not fit "
                             f"one datagram (transport_lbtrm_datagram_max_size {self.datagram_max_size})")

    def _send_locked(self, frames: bytes) -> None:
        datagram = encode_lbtrm_data(self.session_id, self._datagram_sqn, frames)
        self._datagram_sqn = (self._datagram_sqn + 1) & 0xFFFFFFFF
        try:
            self.sender.sendto(datagram, self.outgoing)
        except OSError:
            self.counters["mim_send_errors"] += 1
            raise
        self.counters["mim_messages_sent"] += 1
        self.counters["mim_bytes_sent"] += len(datagram)

    # -- receiving ---------------------------------------------------------------------------------
    def listen(self) -> None:
        """Join the incoming MIM group (on the loop thread); `mim_incoming_address` 0.0.0.0 turns
        receiving off, as in UM."""
        if self.receiver is not None or self.closed or self.incoming[0] == "0.0.0.0":
            return
        group, port = self.incoming
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.setsockopt(socket.IPPROTO_IP, _IP_MULTICAST_ALL, 0)
            sock.bind((group, port))
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                            socket.inet_aton(group) + socket.inet_aton(self.interface))
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.receiver = sock
        self.loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        sock = self.receiver
        if sock is None:
            return
        for _ in range(_RECEIVE_BATCH):
            try:
                datagram, address = sock.recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:
                log.warning("MIM receive failed: %s", err)
                return
            if address == self.own_address:
                continue            # our own datagram, looped back: never news to us
            self._on_datagram(datagram, address)

    def _on_datagram(self, datagram: bytes, address: tuple) -> None:
        try:
            packet = decode_lbtrm_data(datagram)
            messages = _split(packet.payload)
        except WireError as err:
            self._malformed(address, err)
            return
        group, port = self.incoming
        source = f"LBTRM:{address[0]}:{address[1]}:{packet.session_id:08x}:{group}:{port}"
        fallback = _ORIGIN_FROM_ADDRESS.pack(socket.inet_aton(address[0]), address[1], packet.session_id & 0xFFFF)
        for message, frame in messages:
            if message.msg_type != LBMC_TYPE_MESSAGE:
                continue
            topic, origin, origin_domain = None, fallback, None
            for header in message.headers:
                if isinstance(header, TopicName):
                    topic = header.topic
                elif isinstance(header, CtxInst) and header.header_type == NHDR_CTXINST:
                    origin = header.ctxinst
                elif isinstance(header, ODomain):
                    origin_domain = header.domain
            self.counters["mim_messages_received"] += 1
            self.counters["mim_bytes_received"] += len(frame)
            if not self.delivery.is_new(origin, message.sqn):
                self.counters["mim_duplicates"] += 1
                if self.on_duplicate is not None:
                    self.on_duplicate(len(frame))
                continue
            self.deliver(ImmediateMessage(topic, message.payload, message.sqn, origin, origin_domain, source, frame))

    def _malformed(self, address: tuple, err: WireError) -> None:
        self.counters["mim_malformed"] += 1
        now = time.monotonic()
        if now - self._last_malformed_log >= _MALFORMED_LOG_INTERVAL:
            self._last_malformed_log = now
            log.warning("malformed immediate message from %s:%d: %s (counted as mim_malformed)",
                        address[0], address[1], err)

    def close(self) -> None:
        """On the loop thread."""
        self.closed = True
        if self.receiver is not None:
            self.loop.remove_reader(self.receiver.fileno())
            self.receiver.close()
            self.receiver = None
        self.sender.close()


def _split(payload) -> list[tuple[LbmcMessage, bytes]]:
    """Each LBMC message of a datagram with its bytes; WireError if any is malformed or cut short."""
    data = bytes(payload)
    found, offset = [], 0
    while offset < len(data):
        msglen = peek_msglen(data, offset)
        if msglen is None or offset + msglen > len(data):
            raise WireError(f"LBMC: message cut short at offset {offset} of a {len(data)}-byte datagram")
        message, end = decode_lbmc(data, offset)
        found.append((message, data[offset:end]))
        offset = end
    if not found:
        raise WireError("LBT-RM DATA datagram without an LBMC message")
    return found
