"""Unicast immediate messages (UM's lbm_unicast_immediate_message): a message to one context, by address.

A target is a context's request port, named as UM names it (spec/dro.md §2.7):

    TCP:ip:port            a context in this topic resolution domain
    TCP:domain:ip:port     a context in domain `domain`: through the routers, unless that is
                           this context's own domain (known once a router has said it, LOCAL_DOMAIN)

The message is one LBMC MESSAGE frame on a TCP connection to the target's request port (or, for
another domain, to a router's): topic index 0, the connection's own sequence number, and the
header chain

    [DESTINATION] [REQUEST] [TOPICNAME] DATA

REQUEST makes it a request (lbm_unicast_immediate_request): the requester's request port and its
index for the request; the receiver's responses go there. A response to a request from another
domain goes back the same way, routed: topic index = the request's index, DESTINATION -> DATA.

A response's topic index is its request index, never 0 (router.um.requests): that is how a
request port tells the two apart. TOPICNAME is absent for a topicless message, which goes to the
context's immediate-message callbacks; one with a topic goes to that topic's receivers. DESTINATION
(0x64) is there when the message crosses routers: the target (domain, ip, port), the routers it
has crossed (hops_taken), and where it came from (the sender's domain — 0 until the first router
fills it in —, and its request port), which the receiver sees as the message's source
`TCP:domain:ip:port`, an address it can answer to.

Which router takes a message for a domain: each router's endpoint portal says, in its domain,
which domains it reaches and its request port (LBMR REMOTE_DOMAIN_ROUTE, ext 0x06, at least
every second by default: `<domain-route>`); a context keeps what it heard for ROUTE_TIMEOUT
(`DomainRoutes`).

A message larger than one frame (PIECE_FRAME bytes with its headers) goes in pieces, as UM sends it:
each piece a frame of its own with the same headers and FRAG (the sequence number of the first
piece, the piece's offset, the whole length) before DATA. The sender numbers the pieces on its
connection; routers forward them as they are; the receiving context puts the message back together
(`UimReassembly`), keyed by where it came from and that first sequence number. A message is at most
MAX_MESSAGE bytes.
"""
from __future__ import annotations

import ipaddress
import socket
import struct
import time
from dataclasses import dataclass
from typing import NamedTuple

from router.um.received_ranges import ReceivedRanges
from router.um.wire.errors import WireError
from router.um.wire.lbmc import LbmcMessage, decode_lbmc, encode_lbmc
from router.um.wire.lbmc_constants import LBMC_TYPE_MESSAGE
from router.um.wire.lbmc_headers import Destination, Frag, Request, TopicName

MAX_FRAME = 65535
MAX_HOPS = 255                    # a message that has crossed this many routers is in a loop: dropped
ROUTE_TIMEOUT = 5.0               # s: a router not heard for this long no longer takes messages
_MESSAGE_HEADER = 12
_DESTINATION_SIZE = 28
# Data in one frame with DESTINATION and no topic (a topic takes 5 bytes more than its length).
MAX_PAYLOAD = MAX_FRAME - _MESSAGE_HEADER - _DESTINATION_SIZE
MAX_MESSAGE = 64 * 1024 * 1024    # bytes of one message, in pieces
PIECES_TIMEOUT = 30.0             # s: a message whose pieces stop coming for this long is given up
# A message goes in pieces above this many bytes a frame: each then fits one datagram of a peer
# link's UDP path (65,487 bytes), which a 65,535-byte frame would not (the DRO loses responses
# above 65,000 bytes on UDP peer links; these get through).
PIECE_FRAME = 65000
_FRAG_SIZE = 16


class NoRouteToDomain(OSError):
    """No router heard in this domain reaches the target's domain."""


class UimTarget(NamedTuple):
    domain: int | None             # None: this domain (TCP:ip:port)
    ipaddr: str
    port: int

    def __str__(self) -> str:
        middle = "" if self.domain is None else f"{self.domain}:"
        return f"TCP:{middle}{self.ipaddr}:{self.port}"


def parse_target(text: str) -> UimTarget:
    """`TCP:ip:port` or `TCP:domain:ip:port`; ValueError saying what is wrong otherwise."""
    parts = text.split(":")
    if len(parts) not in (3, 4) or parts[0].upper() != "TCP":
        raise ValueError(f"unicast immediate target {text!r}: expected TCP:ip:port or TCP:domain:ip:port")
    domain = None
    if len(parts) == 4:
        domain = _number(text, "domain id", parts[1], 0xFFFFFFFF)
    try:
        ipaddr = str(ipaddress.IPv4Address(parts[-2]))
    except ValueError:
        raise ValueError(f"unicast immediate target {text!r}: {parts[-2]!r} is not an IPv4 address") from None
    port = _number(text, "port", parts[-1], 65535)
    if port == 0:
        raise ValueError(f"unicast immediate target {text!r}: port 0")
    return UimTarget(domain, ipaddr, port)


def _number(text: str, what: str, value: str, highest: int) -> int:
    if not value.isdigit() or int(value) > highest:
        raise ValueError(f"unicast immediate target {text!r}: {what} {value!r} is not a number 0..{highest}")
    return int(value)


def encode_uim(sqn: int, topic: str | None, data, destination: Destination | None = None,
               request: Request | None = None, tidx: int = 0) -> bytes:
    """One unicast immediate message (or, with `request`, request; with `tidx`, a routed response
    to request index `tidx`) as its LBMC frame; ValueError if it does not fit one frame."""
    headers = _headers(topic, destination, request)
    try:
        return encode_lbmc(LbmcMessage(LBMC_TYPE_MESSAGE, headers, bytes(data), tidx=tidx, sqn=sqn, has_data=True))
    except WireError as err:
        raise ValueError(f"unicast immediate message of {len(data)} bytes"
                         f"{'' if topic is None else f' to topic {topic!r}'}: {err} (at most {MAX_PAYLOAD} bytes "
                         f"of data less the topic's)") from None


def uim_frames(topic: str | None, data, destination: Destination | None = None, request: Request | None = None,
               tidx: int = 0) -> tuple[list[bytes], int]:
    """A message as the frames that carry it — one, or pieces with FRAG — and the offset of FRAG's
    first_sqn in each piece (0: one frame), which the sender sets when it numbers them.
    ValueError for a message above MAX_MESSAGE or headers too long for any piece."""
    data = bytes(data)
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"unicast immediate message of {len(data)} bytes: at most {MAX_MESSAGE}")
    headers = _headers(topic, destination, request)
    head = encode_lbmc(LbmcMessage(LBMC_TYPE_MESSAGE, headers, b"", tidx=tidx, has_data=True))
    if len(head) + len(data) <= PIECE_FRAME:
        frame = bytearray(head) + data                # DATA is the rest of the frame: msglen grows
        frame[2:4] = len(frame).to_bytes(2, "big")
        return [bytes(frame)], 0
    piece = PIECE_FRAME - len(head) - _FRAG_SIZE
    if piece <= 0:
        raise ValueError(f"unicast immediate message headers of {len(head)} bytes leave no room for data")
    frames = [encode_lbmc(LbmcMessage(LBMC_TYPE_MESSAGE, headers + [Frag(0, offset, len(data))],
                                      data[offset:offset + piece], tidx=tidx, has_data=True))
              for offset in range(0, len(data), piece)]
    return frames, len(head) + 4            # FRAG comes last, its first_sqn 4 bytes in


def _headers(topic, destination, request) -> list:
    return [h for h in (destination, request) if h is not None] + ([TopicName(topic)] if topic is not None else [])


@dataclass
class Uim:
    """A unicast immediate message (or request, or routed response) as it arrived."""
    topic: str | None
    data: bytes
    sqn: int
    destination: Destination | None
    frame: bytes
    request: Request | None = None
    tidx: int = 0                  # a routed response's request index; 0 for a message or request
    fragment: Frag | None = None   # one piece of a larger message


def decode_uim(frame: bytes) -> Uim:
    """A frame that `is_uim_frame`; WireError if it does not parse as one."""
    message, _ = decode_lbmc(frame, 0)
    return uim_of(message, frame)


def uim_of(message: LbmcMessage, frame: bytes) -> Uim:
    """The headers in their order: [DESTINATION] [REQUEST] [TOPICNAME]; a routed response has
    DESTINATION only."""
    destination = request = topic = fragment = None
    last = len(message.headers) - 1
    for position, header in enumerate(message.headers):
        if isinstance(header, Destination) and position == 0:
            destination = header
        elif isinstance(header, Request) and request is None and topic is None and not message.tidx:
            request = header
        elif isinstance(header, TopicName) and topic is None and not message.tidx:
            topic = header.topic
        elif isinstance(header, Frag) and position == last:
            fragment = header
        else:
            raise WireError(f"unicast immediate message with an unexpected {type(header).__name__} header")
    if message.tidx and destination is None:
        raise WireError("a routed response without its DESTINATION")
    if fragment is not None and (fragment.length > MAX_MESSAGE
                                 or fragment.offset + len(message.payload) > fragment.length):
        raise WireError(f"a piece at {fragment.offset} of {len(message.payload)} bytes of a "
                        f"{fragment.length}-byte message (at most {MAX_MESSAGE})")
    return Uim(topic, bytes(message.payload), message.sqn, destination, frame, request, message.tidx, fragment)


def is_uim_frame(frame) -> bool:
    """An LBMC MESSAGE with topic index 0 (a unicast immediate message or request, not a response),
    or one whose first header is DESTINATION (anything routed across domains, responses too)."""
    return len(frame) >= _MESSAGE_HEADER and frame[0] == LBMC_TYPE_MESSAGE \
        and (not any(frame[4:8]) or frame[1] == Destination.HEADER_TYPE)


def source_of(uim: Uim, peer: str) -> str:
    """Where a message came from, as a target an answer can be sent to."""
    d = uim.destination
    if d is None or not d.orig_port:
        return peer
    return f"TCP:{d.orig_domain_id}:{d.orig_ipaddr}:{d.orig_port}"


class UimReassembly:
    """Pieces of messages being put back together, by (who sent it, first sequence number). At most
    MAX_MESSAGE bytes wait in all, none longer than PIECES_TIMEOUT (a sender gone, a piece lost on a
    failed connection): beyond either, the oldest incomplete message is given up (counted).

    A message is whole once every byte of it came (router.um.received_ranges), a piece that came
    twice counting once. A sender numbers its pieces on its connection, from 0 on a new one (it
    restarted, or its connection to the router was made again): a piece whose message length is
    not that of the incomplete message under its key is the start of another message, which
    takes the key; the incomplete one is given up (counted)."""

    def __init__(self, counters: dict, limit: int = MAX_MESSAGE, timeout: float = PIECES_TIMEOUT):
        self.counters = counters
        self.limit, self.timeout = limit, timeout
        self.partial: dict[tuple, list] = {}      # key -> [bytearray of the whole, ReceivedRanges, started]
        self.waiting = 0

    def add(self, sender, uim: Uim, now: float | None = None) -> bytes | None:
        """The whole message once its last piece came, else None."""
        now = time.monotonic() if now is None else now
        piece = uim.fragment
        key = (sender, piece.first_sqn)
        entry = self.partial.get(key)
        if entry is not None and len(entry[0]) != piece.length:
            self._give_up(key)
            entry = None
        if entry is None:
            while self.partial:
                first = next(iter(self.partial))                   # the oldest
                oldest = self.partial[first]
                if self.waiting + piece.length <= self.limit and now - oldest[2] < self.timeout:
                    break
                self._give_up(first)
            entry = self.partial[key] = [bytearray(piece.length), ReceivedRanges(), now]
            self.waiting += piece.length
        buffer, ranges = entry[0], entry[1]
        buffer[piece.offset:piece.offset + len(uim.data)] = uim.data     # within: uim_of checked it
        ranges.add(piece.offset, piece.offset + len(uim.data))
        if ranges.covered < len(buffer):
            return None
        del self.partial[key]
        self.waiting -= len(buffer)
        return bytes(buffer)

    def expire(self, now: float | None = None) -> float | None:
        """Give up the messages that have waited PIECES_TIMEOUT; seconds until the next one will
        have, or None if none waits (the owner's timer: a message whose pieces stopped coming is
        given up and counted when its time comes, not when another one happens to arrive)."""
        now = time.monotonic() if now is None else now
        while self.partial:
            oldest = next(iter(self.partial))
            started = self.partial[oldest][2]
            if now - started < self.timeout:
                return started + self.timeout - now
            self._give_up(oldest)
        return None

    def _give_up(self, key: tuple) -> None:
        self.waiting -= len(self.partial.pop(key)[0])
        self.counters["uim_incomplete"] += 1


_KEPT_ROUTERS = 64


class DomainRoutes:
    """The routers heard in this domain (REMOTE_DOMAIN_ROUTE) and the domains each reaches."""

    def __init__(self, timeout: float = ROUTE_TIMEOUT):
        self.timeout = timeout
        self.routers: dict[tuple[str, int], tuple[frozenset[int], float]] = {}

    def heard(self, ipaddr: str, port: int, domains, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self.routers[(ipaddr, port)] = (frozenset(domains), now)
        if len(self.routers) > _KEPT_ROUTERS:        # routers come and go over months: forget the silent
            for address in [a for a, (_, heard) in self.routers.items() if now - heard > self.timeout]:
                del self.routers[address]

    def live(self, now: float | None = None) -> dict[tuple[str, int], frozenset[int]]:
        """The routers heard within the timeout, and the domains each reaches."""
        now = time.monotonic() if now is None else now
        return {address: domains for address, (domains, heard) in list(self.routers.items())
                if now - heard <= self.timeout}

    def router_for(self, domain: int, now: float | None = None, besides: tuple | None = None) -> tuple[str, int] | None:
        """A router's request port that reaches `domain` (the lowest address, so every message to
        one domain takes the same router and arrives in order), or None. `besides`: an address
        not to take (a router's own portal)."""
        found = [address for address, domains in self.live(now).items() if domain in domains and address != besides]
        return min(found) if found else None

    def domains(self, now: float | None = None) -> set[int]:
        return {domain for domains in self.live(now).values() for domain in domains}


# DESTINATION is the first header of a routed message: at fixed offsets a router can patch.
_HOPS_AT = _MESSAGE_HEADER + 14
_ORIG_DOMAIN_AT = _MESSAGE_HEADER + 16


_DESTINATION = struct.Struct(">BBHI4sHHI4sH")   # next, len, flags, domain, ip, port, hops, orig domain, ip, port


def destination_of(frame) -> Destination | None:
    """The DESTINATION of a routed frame, read in place (a router's egress: the frame was checked
    whole where it came in); None if the frame does not start with one."""
    if len(frame) < _MESSAGE_HEADER + _DESTINATION_SIZE or frame[1] != Destination.HEADER_TYPE:
        return None
    _, length, flags, domain, ipaddr, port, hops, orig_domain, orig_ipaddr, orig_port = \
        _DESTINATION.unpack_from(frame, _MESSAGE_HEADER)
    if length != _DESTINATION_SIZE:
        return None
    return Destination(domain, socket.inet_ntoa(ipaddr), port, hops, orig_domain, socket.inet_ntoa(orig_ipaddr),
                       orig_port, flags)


def routed_on(frame, orig_domain: int | None = None) -> bytes:
    """The frame of a routed message (DESTINATION first) as the next hop gets it: one more hop
    taken, and the origin domain filled in when given (the first router knows it for certain)."""
    data = bytearray(frame)
    if len(data) < _MESSAGE_HEADER + _DESTINATION_SIZE or data[1] != Destination.HEADER_TYPE:
        raise WireError("a routed unicast immediate message must start with its DESTINATION header")
    hops = int.from_bytes(data[_HOPS_AT:_HOPS_AT + 2], "big")
    data[_HOPS_AT:_HOPS_AT + 2] = min(hops + 1, 0xFFFF).to_bytes(2, "big")
    if orig_domain is not None:
        data[_ORIG_DOMAIN_AT:_ORIG_DOMAIN_AT + 4] = orig_domain.to_bytes(4, "big")
    return bytes(data)
