"""Multicast immediate messaging (MIM): messages sent to a topic, or to no topic, without a source.

A context sends an immediate message as one LBT-RM DATA datagram (router.um.wire.lbtrm) to
`mim_outgoing_address`:`mim_outgoing_destination_port`, holding one LBMC MESSAGE with

    CTXINST   the sending context's instance: with the LBMC sequence number it names the message
              wherever it goes (routers keep both), so copies can be told apart
    TOPICNAME the topic (absent for a topicless message)
    DATA      the payload

A router adds ODOMAIN, the domain id the message came from, when it floods it into other domains.

A message larger than one datagram (`transport_lbtrm_datagram_max_size`) goes as fragments
(router.um.immediate_fragments), each with a FRAG header, in datagrams of their own.

Every context listening (one with a receiver, a topicless-message callback or a router portal)
joins `mim_incoming_address`:`mim_incoming_destination_port`. What arrives goes through delivery
control (router.um.immediate_delivery: each message, or fragment, once); each frame then goes to
`on_frame` (a router forwards frames, fragments as they are) and each whole message, put back
together if it came in fragments, to `on_message` (the context hands it to the topic's receivers,
or a topicless one to its immediate-message callbacks). What does not parse is counted and logged.

There is no retransmission: like UM's MIM, a lost datagram is lost, and UM advises against MIM
for messaging traffic (seed §2.7).
"""
from __future__ import annotations

import logging
import os
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Callable

from router.log_rate import LogRate, unsaid
from router.um.config import UMConfig
from router.um.datagrams import pending_datagrams
from router.um.expiry_timer import ExpiryTimer
from router.um.immediate_delivery import ImmediateDeliveryControl
from router.um.immediate_fragments import MAX_MESSAGE, ImmediateReassembly, fragment_frames
from router.um.wire.errors import WireError
from router.um.wire.lbmc import (CtxInst, Frag, LbmcMessage, ODomain, TopicName, decode_lbmc, encode_lbmc,
                                 peek_msglen)
from router.um.wire.lbmc_constants import LBMC_TYPE_MESSAGE, NHDR_CTXINST
from router.um.wire.lbtrm import HEADER_SIZE, decode_lbtrm_data, encode_lbtrm_data

log = logging.getLogger(__name__)

_IP_MULTICAST_ALL = 49          # Linux: deliver only groups this socket joined
_RECEIVE_BATCH = 64             # datagrams read per readiness event before yielding to the loop
_MALFORMED_LOG_INTERVAL = 10.0  # seconds between log lines about unparsable datagrams
_ORIGIN_FROM_ADDRESS = struct.Struct(">4sHH")
# A router adds ODOMAIN (8 bytes) to each message it floods: what we send leaves room for it, so a
# message that fits one datagram here still fits one in the next domain.
_ROOM_FOR_ROUTERS = 8


@dataclass(frozen=True, slots=True)
class ImmediateMessage:
    topic: str | None           # None: a topicless message
    data: bytes
    sqn: int                    # the originating context's immediate-message sequence number
    origin: bytes               # the originating context's instance (8 bytes)
    origin_domain: int | None   # ODOMAIN: set by the router that brought it into this domain
    source: str                 # the transport it arrived on: LBTRM:ip:port:session:group:port
    frame: bytes                # the LBMC message as it arrived (routers forward it); b"" once reassembled
    fragment: Frag | None = None   # this frame is one piece of a larger message


class ImmediateChannel:
    """One context's MIM sockets: send always; listen once something wants what arrives."""

    def __init__(self, config: UMConfig, loop, interface: str, ctxinst: bytes,
                 on_message: Callable[[ImmediateMessage], None],
                 on_frame: Callable[[ImmediateMessage], None] | None = None):
        get = config.get
        address = get("context", "mim_address")
        port = get("context", "mim_destination_port")
        self.incoming = (get("context", "mim_incoming_address") or address,
                         get("context", "mim_incoming_destination_port") or port)
        self.outgoing = (get("context", "mim_outgoing_address") or address,
                         get("context", "mim_outgoing_destination_port") or port)
        self.datagram_max_size = get("context", "transport_lbtrm_datagram_max_size")
        self.receive_buffer = get("context", "transport_lbtrm_receiver_socket_buffer")
        self.loop = loop
        self.interface = interface
        self.ctxinst = ctxinst
        self.on_message = on_message
        self.on_frame = on_frame
        self.on_duplicate: Callable[[int], None] | None = None     # a router counts the copies it drops
        self.delivery = ImmediateDeliveryControl(get("context", "mim_sqn_window_size"),
                                                 get("context", "mim_src_deletion_timeout") / 1000)
        self.reassembly = ImmediateReassembly(get("context", "mim_src_deletion_timeout") / 1000)
        self._expiry = ExpiryTimer(loop, self.reassembly)
        self.session_id = int.from_bytes(os.urandom(4), "big")
        self.counters = {"mim_messages_sent": 0, "mim_bytes_sent": 0, "mim_send_errors": 0,
                         "mim_messages_received": 0, "mim_bytes_received": 0, "mim_duplicates": 0,
                         "mim_malformed": 0, "mim_listen_errors": 0}
        self._lock = threading.Lock()           # applications send from their own threads
        self._datagram_sqn = 0
        self._message_sqn = 0
        self._malformed_said = LogRate(_MALFORMED_LOG_INTERVAL)
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
        """Send one immediate message (topicless if `topic` is None), in fragments if it does not
        fit one datagram; returns its (first) sequence number. ValueError if it is larger than
        64 MiB; OSError if the socket refuses it (counted)."""
        data = bytes(data)
        if len(data) > MAX_MESSAGE:
            raise ValueError(f"an immediate message of {len(data)} bytes is larger than {MAX_MESSAGE}")
        headers = [CtxInst(self.ctxinst, NHDR_CTXINST)]
        if topic is not None:
            headers.append(TopicName(topic))
        with self._lock:
            sqn = self._message_sqn
            room = self.datagram_max_size - HEADER_SIZE - _ROOM_FOR_ROUTERS
            frame = encode_lbmc(LbmcMessage(LBMC_TYPE_MESSAGE, headers, data, tidx=0, sqn=sqn)) \
                if len(data) < room else b""
            frames = [frame] if frame and len(frame) <= room else fragment_frames(headers, data, sqn, room)
            self._message_sqn = (sqn + len(frames)) & 0xFFFFFFFF
            for frame in frames:
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
            try:        # a burst waits here while the loop is busy; the kernel caps it at rmem_max
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
            except OSError:
                pass
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
        for datagram, address in pending_datagrams(sock, _RECEIVE_BATCH, "MIM"):
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
                self._malformed(address, WireError(f"LBMC message type 0x{message.msg_type:x} where an "
                                                   f"immediate message belongs"))
                continue
            topic, origin, origin_domain, fragment = None, fallback, None, None
            for header in message.headers:
                if isinstance(header, TopicName):
                    topic = header.topic
                elif isinstance(header, CtxInst) and header.header_type == NHDR_CTXINST:
                    origin = header.ctxinst
                elif isinstance(header, ODomain):
                    origin_domain = header.domain
                elif isinstance(header, Frag):
                    fragment = header
            self.counters["mim_messages_received"] += 1
            self.counters["mim_bytes_received"] += len(frame)
            if not self.delivery.is_new(origin, message.sqn):
                self.counters["mim_duplicates"] += 1
                if self.on_duplicate is not None:
                    self.on_duplicate(len(frame))
                continue
            arrived = ImmediateMessage(topic, message.payload, message.sqn, origin, origin_domain, source, frame,
                                       fragment)
            if self.on_frame is not None:
                self.on_frame(arrived)
            if fragment is None:
                self.on_message(arrived)
                continue
            whole = self.reassembly.add(origin, fragment, message.payload)
            if whole is not None:
                self.on_message(ImmediateMessage(topic, whole, fragment.first_sqn, origin, origin_domain, source, b""))
            elif self.reassembly.pending:
                self._expiry.arm()

    def _malformed(self, address: tuple, err: WireError) -> None:
        self.counters["mim_malformed"] += 1
        count = self._malformed_said.due()
        if count is not None:
            log.warning("malformed immediate message from %s:%d: %s (counted as mim_malformed)%s",
                        address[0], address[1], err, unsaid(count))

    def close(self) -> None:
        """On the loop thread."""
        self.closed = True
        self._expiry.close()
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
