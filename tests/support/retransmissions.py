"""A message's frames as a source retains them and sends them again (RETRANS): what late join and
OTR tests feed their recovery with, and the answers to the requests among what they recover."""
from __future__ import annotations

from router.um.messages import RequestMessage
from router.um.requests import RequestOrigin, message_frames
from router.um.wire.lbmc import LBMC_TYPE_RETRANS
from tests.support.processes import wait_for


def retrans_frames(tidx: int, sqn: int, payload: bytes, *, origin: RequestOrigin | None = None,
                   properties_size: int = 0, datagram_max_size: int = 8192) -> list[bytes]:
    """The frames a source sends for one message (router.um.requests.message_frames: a request's
    when `origin` is given, with a properties block of `properties_size` ending `payload`), each
    turned into a RETRANS frame."""
    out = []
    for headers, piece in message_frames(tidx, sqn, payload, datagram_max_size, origin, properties_size):
        frame = bytearray(headers + bytes(piece))
        frame[0] = LBMC_TYPE_RETRANS
        out.append(bytes(frame))
    return out


def answer_requests(messages: list, responses: list, sent_requests: list) -> list[RequestMessage]:
    """Answer every request among the delivered `messages` ("re:" and the first six bytes of its
    data), wait until the sending side's `responses` list holds an answer for each, and close the
    `sent_requests` handles; the requests answered."""
    requests = [m for m in messages if isinstance(m, RequestMessage)]
    for request in requests:
        request.respond(b"re:" + request.data[:6])
    wait_for(lambda: len(responses) == len(requests), 10, message=f"{len(requests)} responses")
    for sent in sent_requests:
        sent.close()
    return requests
