"""The receiver side of LBT-RM: one socket per multicast group and port, one stream per session.

A context joins each (group, destination port) it has sources on once (`LbtrmGroup`, a
SessionSocket): the socket is bound to the group, so it hears only that group, and its datagrams go
to the session they name. Each joined session is an `LbtrmSessionClient`, a RepairingStream: it
NAKs gaps by unicast to the source's port, from the group's unicast socket.
"""
from __future__ import annotations

import socket
from typing import Callable

from router.um.frame_stream import FrameStream
from router.um.lbtrm_receive_window import ReceiveWindow
from router.um.repairing_stream import RepairingStream
from router.um.session_socket import SessionSocket
from router.um.wire.lbtrm import (HEADER_SIZE, LbtrmData, LbtrmNcf, LbtrmSm, decode_lbtrm, encode_lbtrm_nak,
                                  peek_new_data)

_IP_MULTICAST_ALL = getattr(socket, "IP_MULTICAST_ALL", 49)


class LbtrmGroup(SessionSocket):
    """The socket of one (group, destination port) and the sessions joined on it."""

    kind = "LBT-RM"
    loss_variable = "LBTRM_LOSS_RATE"
    data_type = LbtrmData
    peek_new_data = staticmethod(peek_new_data)
    data_header_size = HEADER_SIZE

    def __init__(self, loop, interface: str, group: str, port: int, receive_buffer: int,
                 on_empty: Callable[["LbtrmGroup"], None]):
        self.interface, self.group, self.port = interface, group, port
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
        except OSError:
            sock.close()
            raise
        # NAKs leave from a unicast socket: the group socket's address is the group's.
        self.nak_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.nak_sock.bind((interface, 0))
        self.nak_sock.setblocking(False)
        super().__init__(loop, sock, f"LBT-RM group {group}:{port}", on_empty)

    def decode(self, datagram):
        return decode_lbtrm(datagram)

    def send_nak(self, datagram: bytes, address: tuple[str, int]) -> bool:
        try:
            self.nak_sock.sendto(datagram, address)
            return True
        except OSError:
            return False

    def _closed(self) -> None:
        self.nak_sock.close()


class LbtrmSessionClient(RepairingStream):
    """One joined LBT-RM session: datagrams in order, their frames dispatched by topic index."""

    def __init__(self, loop, group: LbtrmGroup, source_ip: str, source_port: int, session_id: int,
                 on_closed: Callable[[FrameStream], None], *, activity_timeout: float = 60.0,
                 window: ReceiveWindow | None = None):
        self.group = group
        self.session_id = session_id
        super().__init__(loop, ("lbtrm", source_ip, source_port, session_id, group.group, group.port), group,
                         (source_ip, source_port, session_id),
                         f"LBT-RM session {source_ip}:{source_port}:{session_id:08X} on {group.group}:{group.port}",
                         on_closed, activity_timeout=activity_timeout, window=window)

    def packet(self, packet, now: float) -> None:
        if self.closed or not self._believable(packet):
            return
        self.last_heard = now
        if isinstance(packet, LbtrmData):
            self._data(packet.sqn, packet.payload, now, packet.retransmission, packet.trail_sqn)
        elif isinstance(packet, LbtrmSm):
            self._sm(packet.lead_sqn, packet.trail_sqn, now)
        elif isinstance(packet, LbtrmNcf):
            self._ncf(packet.sqns, packet.reason, packet.trail_sqn, now)
        # else a NAK from another receiver (multicast NAKs): not ours to answer

    def _send_naks(self, sqns: list[int]) -> bool:
        return self.group.send_nak(encode_lbtrm_nak(self.session_id, self.address[1], sqns), self.address[:2])

