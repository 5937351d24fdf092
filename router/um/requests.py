"""Request/response (lbm_send_request, lbm_send_response): the wire layout and the value types.

A request is a data message of the requesting source that also names who asked. It travels on the
source's transport, in order with the source's other messages; the REQUEST header says where the
answers go: the requester context's *request port* (request_tcp_port_low..high), and a request
index (qidx) that tells the requester's requests apart.

Request frame (one per piece; a request above the transport's datagram max size is fragmented
like data, every piece REQUEST -> FRAG -> DATA with the usual FRAG semantics)::

    0      1        2        4                8                12
    +------+--------+--------+----------------+----------------+
    | 0x00 | 0x04   | msglen | tidx (source's | sqn (source's  |   LBMC MESSAGE header
    | type | REQUEST|        |  topic index)  |  next sqn)     |
    +------+--------+--------+--------+-------+-------+--------+ 12 = REQUEST_HEADER_OFFSET
    | next | hdr_len| res u8 |transp. | qidx u32      |            REQUEST header, 16 bytes,
    | 0x00 | = 16   |        | 0 = TCP|               |            always the first extension
    | /0x01|        |        |        |               |            header
    +------+--------+--------+--------+-------+-------+
    | port u16      | res u16         | ipaddr u32    |            the requester's request port
    +---------------+-----------------+---------------+ 28
    | [FRAG header, 16 bytes: next 0x00, len 16, flags, first_sqn, offset, total length]
    | payload ...

qidx is per context: 1, 2, 3 ... (never 0). The REQUEST header sits at a fixed offset, so a router
can read and patch it in frames it forwards (`read_request`, `rewrite_request`) without parsing.

Response: a unicast immediate message (UIM) on a TCP connection from the responder's context to
the request port: LBMC MESSAGE frames with tidx = the request's qidx, sqn = a sequence number of
that connection (0, 1, 2 ...), chain DATA, or FRAG -> DATA above the datagram max size (reassembled
by (qidx, first_sqn)). Wireshark decodes TCP to ports 14391-14395 as such a "UIM" stream.
"""
from __future__ import annotations

import socket
import struct
import threading
from typing import Callable, Iterator, NamedTuple

from router.um.wire.errors import WireError
from router.um.wire.lbmc import (FRAG_HEADER, LBMC_TYPE_MESSAGE, MESSAGE_HEADER, NHDR_APPHDR_CHAIN, NHDR_DATA,
                                 NHDR_FRAG, NHDR_REQUEST)
from router.um.wire.lbmc_properties import APPHDR_CHAIN_SIZE, apphdr_chain

REQUEST_HEADER_OFFSET = 12
# next_hdr, hdr_len = 16, flags (reserved), transport, qidx, port, reserved, ipaddr
REQUEST_HEADER = struct.Struct(">BBBBIHHI")
REQUEST_TRANSPORT_TCP = 0
REQUEST_FRAME_MIN = REQUEST_HEADER_OFFSET + REQUEST_HEADER.size
_QIDX = struct.Struct(">I")
_PORT = struct.Struct(">H")
_QIDX_AT = REQUEST_HEADER_OFFSET + 4
_PORT_AT = REQUEST_HEADER_OFFSET + 8
_IPADDR_AT = REQUEST_HEADER_OFFSET + 12
_pack_message = MESSAGE_HEADER.pack
_pack_frag = FRAG_HEADER.pack


class RequestOrigin(NamedTuple):
    """Who asked: the requester's request port, and its index for the request. `domain`: the
    requester's domain when the request came through routers (a unicast immediate request from
    another domain, router.um.unicast_immediate): the responses go back through them."""

    ipaddr: str
    port: int
    qidx: int
    domain: int | None = None


class Response(NamedTuple):
    """One response to a request of ours; `source` is the responder's "TCP:ip:port"."""

    qidx: int
    data: bytes
    source: str


# The largest response a request port takes (router.um.request_port sets aside a response in full
# on its first piece): a responder refuses a larger one at once instead of sending what the
# requester will drop.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class ResponseTooLarge(ValueError):
    """A response larger than MAX_RESPONSE_BYTES: no requester would take it."""


class RequestPortUnavailable(OSError):
    """No port of request_tcp_port_low..high could be opened (an OSError: it is one, at heart)."""


# -- the REQUEST header in place ------------------------------------------------------------------
def pack_request_header(next_hdr: int, origin: RequestOrigin) -> bytes:
    try:
        address = struct.unpack(">I", socket.inet_aton(origin.ipaddr))[0]
        return REQUEST_HEADER.pack(next_hdr, REQUEST_HEADER.size, 0, REQUEST_TRANSPORT_TCP,
                                   origin.qidx, origin.port, 0, address)
    except (OSError, struct.error, TypeError) as err:
        raise WireError(f"LBMC REQUEST: cannot encode {origin}: {err}") from None


def read_request(buf, frame_offset: int) -> RequestOrigin:
    """The origin named by the REQUEST header of the request frame at `frame_offset`."""
    _, _, _, _, qidx, port, _, address = REQUEST_HEADER.unpack_from(buf, frame_offset + REQUEST_HEADER_OFFSET)
    return RequestOrigin(socket.inet_ntoa(address.to_bytes(4, "big")), port, qidx)


def rewrite_request(buf, frame_offset: int, qidx: int, port: int, ipaddr: str) -> None:
    """Point the request frame at `frame_offset` of a writable buffer at another request port and
    index (a router standing in for the requester); nothing else in the frame changes."""
    try:
        address = socket.inet_aton(ipaddr)
    except (OSError, TypeError) as err:
        raise WireError(f"LBMC REQUEST: {ipaddr!r} is not an IPv4 address") from err
    try:
        _QIDX.pack_into(buf, frame_offset + _QIDX_AT, qidx)
        _PORT.pack_into(buf, frame_offset + _PORT_AT, port)
    except struct.error as err:
        raise WireError(f"LBMC REQUEST: qidx {qidx} or port {port} does not fit: {err}") from None
    buf[frame_offset + _IPADDR_AT:frame_offset + _IPADDR_AT + 4] = address


def request_frame_problem(buf, offset: int, msglen: int) -> str | None:
    """What is wrong with the request frame at `offset` (its MESSAGE header says REQUEST), or None:
    the REQUEST header must be whole, 16 bytes long, and followed by DATA or a whole FRAG."""
    if msglen < REQUEST_FRAME_MIN:
        return f"request frame of {msglen} bytes, shorter than its headers"
    header = offset + REQUEST_HEADER_OFFSET
    next_hdr, hdr_len = buf[header], buf[header + 1]
    if hdr_len != REQUEST_HEADER.size:
        return f"REQUEST header of length {hdr_len}, not {REQUEST_HEADER.size}"
    if next_hdr == NHDR_DATA:
        return None
    if next_hdr != NHDR_FRAG:
        return f"REQUEST header followed by header type 0x{next_hdr:02x}, not DATA or FRAG"
    if msglen < REQUEST_FRAME_MIN + FRAG_HEADER.size:
        return "fragmented request shorter than its headers"
    return None


# -- framing a message ----------------------------------------------------------------------------
def message_frames(tidx: int, sqn: int, payload, datagram_max_size: int, origin: RequestOrigin | None = None,
                   properties_size: int = 0) -> Iterator[tuple[bytes, memoryview]]:
    """The LBMC MESSAGE frames carrying `payload`, as (headers, piece of the payload): with
    `origin` a request (the REQUEST header first in each frame); with `properties_size`, a message
    whose payload ends in a properties block that many bytes long (an APPHDR_CHAIN header first in
    each frame says so: router.um.wire.lbmc_properties); else plain data. Frame i has sequence
    number sqn + i; above `datagram_max_size` every frame carries a FRAG header."""
    view = memoryview(payload).cast("B")
    total = len(view)
    if origin is not None:
        first_header, lead, lead_size = NHDR_REQUEST, lambda nxt: pack_request_header(nxt, origin), REQUEST_HEADER.size
    elif properties_size:
        first_header, lead, lead_size = (NHDR_APPHDR_CHAIN, lambda nxt: apphdr_chain(nxt, properties_size),
                                         APPHDR_CHAIN_SIZE)
    else:
        first_header, lead, lead_size = NHDR_DATA, lambda nxt: b"", 0
    overhead = MESSAGE_HEADER.size + lead_size
    if total + overhead <= datagram_max_size:
        yield _pack_message(LBMC_TYPE_MESSAGE, first_header, overhead + total, tidx, sqn) + lead(NHDR_DATA), view
        return
    overhead += FRAG_HEADER.size
    piece = datagram_max_size - overhead
    if not lead_size:
        first_header = NHDR_FRAG
    for number, start in enumerate(range(0, total, piece)):
        chunk = view[start:start + piece]
        yield (_pack_message(LBMC_TYPE_MESSAGE, first_header, overhead + len(chunk), tidx,
                             (sqn + number) & 0xFFFFFFFF)
               + lead(NHDR_FRAG) + _pack_frag(NHDR_DATA, FRAG_HEADER.size, 0, sqn, start, total)), chunk


# -- a request waiting for its responses ----------------------------------------------------------
class PendingRequest:
    """A request sent, taking responses until `close()` (lbm_request_delete). Responses arrive on
    the context's thread, in `on_response`; a response after `close()` is counted unmatched."""

    __slots__ = ("qidx", "responses", "closed", "_on_response", "_forget")

    def __init__(self, qidx: int, on_response: Callable[[Response], None] | None,
                 forget: Callable[[int], None]):
        self.qidx = qidx
        self.responses = 0
        self.closed = False
        self._on_response = on_response
        self._forget = forget

    def deliver(self, response: Response) -> None:
        self.responses += 1
        if self._on_response is not None:
            self._on_response(response)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._forget(self.qidx)

    def __enter__(self) -> "PendingRequest":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PendingRequest(qidx={self.qidx}, responses={self.responses}, closed={self.closed})"


class RequestIndexes:
    """A context's live requests by qidx; qidx counts 1, 2, ... 2**32-1, then wraps past live ones.
    Thread-safe: applications send requests from their threads, responses arrive on the loop's."""

    def __init__(self):
        self.lock = threading.Lock()
        self.live: dict[int, PendingRequest] = {}
        self.next_qidx = 1

    def open(self, on_response: Callable[[Response], None] | None) -> PendingRequest:
        with self.lock:
            qidx = self.next_qidx
            while qidx in self.live:          # 4 billion requests later, one still open
                qidx = qidx % 0xFFFFFFFF + 1
            self.next_qidx = qidx % 0xFFFFFFFF + 1
            pending = self.live[qidx] = PendingRequest(qidx, on_response, self.forget)
        return pending

    def forget(self, qidx: int) -> None:
        with self.lock:
            self.live.pop(qidx, None)

    def get(self, qidx: int) -> PendingRequest | None:
        return self.live.get(qidx)

    def close_all(self) -> None:
        with self.lock:
            pending, self.live = list(self.live.values()), {}
        for request in pending:
            request.closed = True
