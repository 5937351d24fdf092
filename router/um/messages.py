"""What a receiver hands its application: messages, requests, and the start/end of each source's stream."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from router.um.requests import RequestOrigin

BOS = "BOS"     # beginning of stream: a source was joined
EOS = "EOS"     # end of stream: that source ended (disconnect, final advertisement, timeout)


class Message(NamedTuple):
    """One delivered message. `data` is a bytes object the application may keep.

    A named tuple because receivers build one per message: tuples are created in C, several times
    faster than an object with an __init__."""

    topic: str
    source: str
    sequence_number: int
    data: bytes
    retransmit = False          # UM's LBM_MSG_FLAG_RETRANSMIT: not a late-join retransmission


class RetransmittedMessage(NamedTuple):
    """A message the source sent before this receiver joined, retransmitted for late join (UM's
    LBM_MSG_FLAG_RETRANSMIT); delivered in sequence before the live ones after it."""

    topic: str
    source: str
    sequence_number: int
    data: bytes
    retransmit = True


class RequestMessage(NamedTuple):
    """A request (another source's lbm_send_request), delivered in sequence with that source's
    messages. `respond(data)` answers it, as often as wanted, from any thread."""

    topic: str
    source: str
    sequence_number: int
    data: bytes
    origin: RequestOrigin
    context: Any                # the Context that received it (it sends the responses)

    def respond(self, data) -> None:
        self.context.respond(self.origin, data)


@dataclass(frozen=True, slots=True)
class ReceiverEvent:
    kind: str           # BOS or EOS
    topic: str
    source: str
    joined: object = field(default=None, compare=False, repr=False)   # the JoinedSource (routers use it)
