"""How a response to a proxy request travels back over a peer link.

A request crosses a link as data, its request index replaced by one of the sending peer portal's
proxy requests (router.portals.proxy_requests). The far router makes its own proxy request of it
and, when a responder answers, sends the response back over the link as a unicast data message:

    MESSAGE(tidx = the request index the link carried, sqn = per link) -> DESTINATION -> DATA

DESTINATION (0x64, "UIM routing across domains", spec/wire.md §3 b) names the requester the
request carried (ip, port) and one hop taken; the index alone finds the proxy request, the rest
is there for someone reading the link in Wireshark.

A response larger than one message (UM's responses have no such limit: the responder's context
sends one of any size in pieces) crosses in pieces, as UM sends a message in pieces (spec/wire.md
§2.3): every piece ``DESTINATION -> FRAG -> DATA``, FRAG naming the first piece's sequence number,
the piece's offset and the whole length, each piece small enough for a datagram of a link's UDP
path (router.um.unicast_immediate.PIECE_FRAME). The far portal puts the response back together
(`ResponsePieces`) and forwards it whole, as its portal in the requester's domain sends a response:
in pieces again if it must. A response whose pieces stop coming (its link went down halfway, a
datagram the UDP path gave up) is given up after PIECES_TIMEOUT, or when the link goes down.

A unicast immediate message crosses a link the same way, with topic index 0 (a request index is
never 0) and its DESTINATION as its sender made it; so does a response routed back to a unicast
immediate request, with its request index and a DESTINATION that names where it came from.
"""
from __future__ import annotations

from typing import Callable

from router.um.unicast_immediate import MAX_MESSAGE, UimReassembly, uim_frames, uim_of
from router.um.wire.lbmc import LbmcMessage
from router.um.wire.lbmc_constants import LBMC_TYPE_MESSAGE
from router.um.wire.lbmc_headers import Destination, Frag

_SQN_AT = 8                     # of an LBMC MESSAGE header


def response_frames(qidx: int, sqn: int, ipaddr: str, port: int, data) -> list[bytes]:
    """The frames that carry a response over the link: one, or pieces numbered sqn, sqn + 1 ...
    ValueError for a response above MAX_MESSAGE, the most UM puts back together."""
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"a {len(data)}-byte response is larger than the {MAX_MESSAGE} bytes a UM "
                         f"message may have")
    frames, first_sqn_at = uim_frames(None, data, Destination(0, ipaddr, port, 1, 0, "0.0.0.0", 0), tidx=qidx)
    numbered = []
    for number, frame in enumerate(frames):
        frame = bytearray(frame)
        frame[_SQN_AT:_SQN_AT + 4] = ((sqn + number) & 0xFFFFFFFF).to_bytes(4, "big")
        if first_sqn_at:
            frame[first_sqn_at:first_sqn_at + 4] = (sqn & 0xFFFFFFFF).to_bytes(4, "big")
        numbered.append(bytes(frame))
    return numbered


def response_piece(message: LbmcMessage) -> Frag | None:
    """The FRAG of a response that crossed in pieces (its last header), None for a whole one."""
    last = message.headers[-1]
    return last if isinstance(last, Frag) else None


class ResponsePieces(UimReassembly):
    """Responses in pieces from the far router, put back together by (request index, first
    piece's sequence number). `on_given_up(bytes received)` hears of each one given up: its
    pieces stopped coming, or more than MAX_MESSAGE bytes of responses waited."""

    def __init__(self, on_given_up: Callable[[int], None]):
        super().__init__({"uim_incomplete": 0})
        self.on_given_up = on_given_up

    def add_piece(self, message: LbmcMessage, now: float | None = None) -> bytes | None:
        """The whole response once its last piece came, else None; WireError for a piece that
        does not fit its response."""
        return self.add(message.tidx, uim_of(message, b""), now)

    def give_up_all(self) -> None:
        """The link went down: what it brought of responses will not be completed."""
        for key in list(self.partial):
            self._give_up(key)

    def _give_up(self, key: tuple) -> None:
        received = self.partial[key][1].covered
        super()._give_up(key)
        self.on_given_up(received)


def is_unicast(message: LbmcMessage) -> bool:
    """A unicast message on the link: a response, or a unicast immediate message on its way to
    another domain (router.portals.unicast_routing), whose topic index is 0."""
    return message.msg_type == LBMC_TYPE_MESSAGE and bool(message.headers) \
        and isinstance(message.headers[0], Destination)


def is_response(message: LbmcMessage) -> bool:
    """A response to one of our proxy requests. One routed by its DESTINATION (a response to a
    unicast immediate request from another domain) names where it came from (orig_port); these
    name no origin."""
    return is_unicast(message) and message.tidx != 0 and not message.headers[0].orig_port
