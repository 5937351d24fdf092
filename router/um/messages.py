"""What a receiver hands its application: messages, requests, and the start/end of each source's stream."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from router.um.requests import RequestOrigin
from router.um.wire.errors import WireError
from router.um.wire.lbmc_properties import decode_properties

BOS = "BOS"     # beginning of stream: a source was joined
EOS = "EOS"     # end of stream: that source ended (disconnect, final advertisement, timeout)
# UM's LBM_MSG_UNRECOVERABLE_LOSS: messages of a source that will not be delivered (the transport
# lost them and off-transport recovery, if used, could not get them); the event says which.
UNRECOVERABLE_LOSS = "UNRECOVERABLE_LOSS"


class DataWithProperties(bytes):
    """A message's data that came with UM message properties (router.um.wire.lbmc_properties):
    the bytes are the data alone, `properties` is ``{key: Property}``. Only such messages pay for
    properties: every message class reads them from its data, so building one costs nothing more."""

    def __new__(cls, data, properties: dict):
        made = super().__new__(cls, data)
        made.properties = properties
        return made


def with_properties(payload: bytes, block_size: int) -> DataWithProperties:
    """A payload whose last `block_size` bytes are its properties block, as the data alone with
    its properties; WireError if the block cannot be read."""
    if block_size > len(payload):
        raise WireError(f"properties block of {block_size} bytes in a message of {len(payload)}")
    split = len(payload) - block_size
    return DataWithProperties(payload[:split], decode_properties(payload[split:]))


def _data_properties(message) -> dict | None:
    """`message.properties`: its UM message properties, None when it came without any."""
    return getattr(message.data, "properties", None)


class Message(NamedTuple):
    """One delivered message. `data` is a bytes object the application may keep.

    A named tuple because receivers build one per message: tuples are created in C, several times
    faster than an object with an __init__."""

    topic: str
    source: str
    sequence_number: int
    data: bytes
    retransmit = False          # UM's LBM_MSG_FLAG_RETRANSMIT: not a late-join retransmission
    otr = False                 # UM's LBM_MSG_FLAG_OTR: not recovered off the transport
    hf_duplicate = False        # UM's LBM_MSG_FLAG_HF_DUPLICATE: not a hot failover copy delivered again
    properties = property(_data_properties)


class RetransmittedMessage(NamedTuple):
    """A message the source sent before this receiver joined, retransmitted for late join (UM's
    LBM_MSG_FLAG_RETRANSMIT); delivered in sequence before the live ones after it."""

    topic: str
    source: str
    sequence_number: int
    data: bytes
    retransmit = True
    otr = False
    hf_duplicate = False
    properties = property(_data_properties)


class OtrMessage(NamedTuple):
    """A message the transport lost and off-transport recovery got from the source's retention
    (UM's LBM_MSG_FLAG_OTR); delivered in sequence with the live ones around it."""

    topic: str
    source: str
    sequence_number: int
    data: bytes
    retransmit = False
    otr = True
    hf_duplicate = False
    properties = property(_data_properties)


class HfDuplicateMessage(NamedTuple):
    """A later copy of a sequence number a hot failover receiver delivered already (UM's
    LBM_MSG_FLAG_HF_DUPLICATE): delivered only with hf_duplicate_delivery (router.um.hot_failover)."""

    topic: str
    source: str
    sequence_number: int
    data: bytes
    retransmit = False
    otr = False
    hf_duplicate = True
    properties = property(_data_properties)


class RequestMessage(NamedTuple):
    """A request (another source's lbm_send_request), delivered in sequence with that source's
    messages. `respond(data)` answers it, as often as wanted, from any thread (ResponseTooLarge
    for data over router.um.requests.MAX_RESPONSE_BYTES, which no request port takes)."""

    topic: str
    source: str
    sequence_number: int
    data: bytes
    origin: RequestOrigin
    context: Any                # the Context that received it (it sends the responses)
    otr: bool = False           # recovered off the transport (a lost request, asked of its source)
    retransmit = False
    hf_duplicate = False
    properties = property(_data_properties)

    def respond(self, data) -> None:
        self.context.respond(self.origin, data)


@dataclass(frozen=True, slots=True)
class ReceiverEvent:
    kind: str           # BOS, EOS or UNRECOVERABLE_LOSS
    topic: str
    source: str
    joined: object = field(default=None, compare=False, repr=False)   # the JoinedSource (routers use it)
    sequence_number: int = 0    # UNRECOVERABLE_LOSS: the first message lost
    count: int = 0              # UNRECOVERABLE_LOSS: how many, from that one on
