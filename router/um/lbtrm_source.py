"""The source side of LBT-RM: a transport session multicasting LBMC frames, repairing loss on NAKs.

Sources of a context share a session (as in UM), each with its own topic index. The session binds
one UDP socket on a port of `transport_lbtrm_source_port_low..high`: it multicasts DATA, session
messages, retransmissions and NCFs to its group and `transport_lbtrm_destination_port`, and
receives the NAKs receivers send by unicast to that port. Rates, the transmission window and the
answers to NAKs are router.um.repairing_source's.
"""
from __future__ import annotations

import socket
import time

from router.um.datagrams import pending_datagrams
from router.um.repairing_source import RepairingSourceSession, bind_in_range
from router.um.wire.errors import WireError
from router.um.wire.lbmr import LbtrmInfo
from router.um.wire.lbtrm import (DATA_HEADER, FLAG_RETRANSMISSION, FLAG_UCAST_NAKS, HEADER_SIZE, LBTRM_NHDR_DATA,
                                  LBTRM_TYPE_DATA, LbtrmNak, decode_lbtrm, encode_lbtrm_ncf, encode_lbtrm_sm)
from router.um.wire.otid import lbtrm_otid

_FLAGS_OFFSET = 16                      # flags_fec_type in a DATA packet


class LbtrmSourceSession(RepairingSourceSession):
    """One LBT-RM transport session."""

    header_size = HEADER_SIZE
    retransmission_flag = (_FLAGS_OFFSET, FLAG_RETRANSMISSION)
    kind = "LBT-RM"
    rate_limit_option = "transport_lbtrm_data_rate_limit"

    def __init__(self, loop, interface: str, group: str, dest_port: int, port_low: int, port_high: int, *,
                 ttl: int = 16, datagram_max_size: int = 8192, data_rate_limit: int = 10_000_000,
                 retransmit_rate_limit: int = 5_000_000, rate_interval: float = 0.1,
                 window_size: int = 24 * 1024 * 1024, window_limit: int = 0, ignore_interval: float = 0.5,
                 sm_minimum_interval: float = 0.2, sm_maximum_interval: float = 10.0,
                 batching_minimum_length: int = 2048, batching_interval: float = 0.2,
                 overflow: str = "block", max_queue: int = 8 * 1024 * 1024):
        sock = bind_in_range(interface, port_low, port_high, "LBT-RM source")
        try:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(interface))
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, ttl)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        except OSError:
            sock.close()
            raise
        self.interface, self.group, self.dest_port = interface, group, dest_port
        self.destination = (group, dest_port)
        self.flags = FLAG_UCAST_NAKS
        super().__init__(loop, sock, datagram_max_size=datagram_max_size, data_rate_limit=data_rate_limit,
                         retransmit_rate_limit=retransmit_rate_limit, rate_interval=rate_interval,
                         window_size=window_size, window_limit=window_limit, ignore_interval=ignore_interval,
                         sm_minimum_interval=sm_minimum_interval, sm_maximum_interval=sm_maximum_interval,
                         batching_minimum_length=batching_minimum_length, batching_interval=batching_interval,
                         overflow=overflow, max_queue=max_queue)

    # -- what receivers learn --------------------------------------------------------------------
    def advertised_info(self) -> LbtrmInfo:
        return LbtrmInfo(self.interface, self.group, self.session_id, self.dest_port, self.port)

    def otid(self, index: int, context_id: int) -> bytes:
        return lbtrm_otid(self.interface, self.port, self.group, self.dest_port, self.session_id, index,
                          ctx_id=context_id)

    @property
    def receiver_count(self) -> None:
        """None: a multicast source does not know its receivers (UM's LBT-RM sources do not either;
        Source.interest_heard says whether any asked for the topic)."""
        return None

    # -- the multicast group ---------------------------------------------------------------------
    def _data_header(self, sqn: int, trail: int) -> bytes:
        return DATA_HEADER.pack(LBTRM_TYPE_DATA, LBTRM_NHDR_DATA, self.port, self.session_id, sqn, trail,
                                self.flags, 0, 0)

    def _send_data(self, sqn: int, datagram) -> None:
        self._sendto(datagram, self.destination)

    def _send_retransmission(self, datagram, to) -> bool:
        return self._sendto(datagram, self.destination)

    def _send_ncf(self, to, trail: int, reason: int, sqns: list[int]) -> None:
        self._sendto(encode_lbtrm_ncf(self.session_id, self.port, trail, reason, sqns), self.destination)

    def _send_sm(self, now: float) -> None:
        lead, trail = self._lead_trail()
        if self._sendto(encode_lbtrm_sm(self.session_id, self.port, self.sm_sqn, lead, trail, self.flags),
                        self.destination):
            self.counters["sms_sent"] += 1

    def _readable(self) -> None:
        for datagram, address in pending_datagrams(self.sock, 64, self.description):
            try:
                packet = decode_lbtrm(datagram)
            except WireError as err:
                self._malformed(address, str(err))
                continue
            if not isinstance(packet, LbtrmNak) or packet.session_id != self.session_id:
                self._malformed(address, f"{type(packet).__name__} for session {packet.session_id:08X}")
                continue
            self._answer(packet.sqns, address, time.monotonic())
