"""The receiver side of LBT-TCP: a non-blocking connection to one source session.

Frames are read into a large buffer and dispatched by topic index (frame_stream.FrameStream).
The session's TCP_SID control message ties the stream to the session id in the TIR.
"""
from __future__ import annotations

import errno
import logging
import socket
import time
from typing import Callable

from router.um.frame_stream import FrameStream
from router.um.loop import SMALL_READ
from router.um.wire.lbmc import CONTROL_HEADER, NHDR_TCP_SID, TCP_SID_HEADER

log = logging.getLogger(__name__)

_BUFFER_SIZE = 4 * 1024 * 1024
# Bytes taken per read: enough to batch thousands of small frames, small enough that what one read
# brings stays in the CPU cache while it is parsed and copied on (and the next hop starts sooner).
_READ_SIZE = 256 * 1024


class TcpSessionClient(FrameStream):
    """A connection to one source session (ip, port, session id)."""

    def __init__(self, loop, ip: str, port: int, session_id: int, on_closed: Callable[[FrameStream], None],
                 receive_buffer: int):
        """`receive_buffer`: SO_RCVBUF (transport_tcp_receiver_socket_buffer; 0: the kernel's)."""
        super().__init__(loop, ("tcp", ip, port, session_id), on_closed)
        self.ip, self.port, self.session_id = ip, port, session_id
        self.description = f"LBT-TCP stream from {ip}:{port}"
        self.buffer = bytearray(_BUFFER_SIZE)
        self.view = memoryview(self.buffer)
        self.filled = 0
        self.connected = False
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setblocking(False)
        if receive_buffer:              # before connecting: the window scale is agreed then
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        code = self.sock.connect_ex((ip, port))
        if code not in (0, errno.EINPROGRESS):
            self.sock.close()
            raise OSError(code, f"cannot connect to TCP source session {ip}:{port}")
        loop.add_writer(self.sock.fileno(), self._connect_done)
        self.opened = time.monotonic()

    def pause(self) -> None:
        if self.connected and not self.paused and not self.closed:
            self.paused = True
            self.loop.remove_reader(self.sock.fileno())

    def resume(self) -> None:
        if self.paused and not self.closed:
            self.paused = False
            self.loop.add_reader(self.sock.fileno(), self._readable)
            self.loop.call_later(0, self._readable)

    def _connect_done(self) -> None:
        self.loop.remove_writer(self.sock.fileno())
        code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            log.info("connection to TCP source %s:%d failed: %s", self.ip, self.port, errno.errorcode.get(code, code))
            self.close()
            return
        self.connected = True
        self.loop.add_reader(self.sock.fileno(), self._readable)

    def _readable(self) -> None:
        if self.closed:
            return
        try:
            received = self.sock.recv_into(self.view[self.filled:self.filled + _READ_SIZE])
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            received = 0
        if not received:
            self.close()
            return
        self.filled += received
        if received < SMALL_READ:
            self.loop.read_was_small()
        consumed = self.parse_reused(self.buffer, self.filled, self.view)
        if consumed:
            remaining = self.filled - consumed
            if remaining:
                self.buffer[:remaining] = self.buffer[consumed:self.filled]
            self.filled = remaining
        self.counters["bytes"] += received        # after the frames went on: off their way

    def _control(self, data: bytes, offset: int, msglen: int, next_hdr: int) -> bool:
        if next_hdr == NHDR_TCP_SID and msglen >= CONTROL_HEADER.size + TCP_SID_HEADER.size:
            sid = TCP_SID_HEADER.unpack_from(data, offset + CONTROL_HEADER.size)[3]
            if self.session_id and sid != self.session_id:
                log.info("TCP source %s:%d has session id %08X, expected %08X: a new source on that port",
                         self.ip, self.port, sid, self.session_id)
                self.close()
                return False
        return True

    def _close_transport(self) -> None:
        fd = self.sock.fileno()
        if fd >= 0:
            self.loop.remove_reader(fd)
            self.loop.remove_writer(fd)
        self.sock.close()
