"""Reading back a frame a source retained and sent again (late join, off-transport recovery): past
its message header and any APPHDR_CHAIN header, to its data, and the message's properties.

A message sent with UM message properties (router.um.wire.lbmc_properties) has an APPHDR_CHAIN
header in every frame saying how many bytes at the end of the whole payload are its properties
block. What puts the retained frames back together reads the frames through these, so a message
comes back with its properties as it was delivered live (router.um.frame_stream)."""
from __future__ import annotations

from router.um.messages import with_properties
from router.um.wire.errors import WireError
from router.um.wire.lbmc import MESSAGE_HEADER, NHDR_APPHDR_CHAIN
from router.um.wire.lbmc_properties import APPHDR_CHAIN_SIZE, read_apphdr_chain


def message_body(frame, next_hdr: int, length: int) -> tuple[int, int, int]:
    """(the header after the message header and any APPHDR_CHAIN, where it starts, the message's
    properties block size) for a frame whose message header names `next_hdr` and whose length is
    `length`; WireError if the chain cannot be read."""
    if next_hdr != NHDR_APPHDR_CHAIN:
        return next_hdr, MESSAGE_HEADER.size, 0
    next_hdr, properties_size = read_apphdr_chain(frame, MESSAGE_HEADER.size, length)
    return next_hdr, MESSAGE_HEADER.size + APPHDR_CHAIN_SIZE, properties_size


def data_of(payload: bytes, properties_size: int, counters: dict, malformed: str) -> bytes:
    """The message's data, with its properties when it has some. One whose properties cannot be
    read is delivered without them and counted in counters[malformed], as the live stream does:
    data is never dropped for its extras."""
    if not properties_size:
        return payload
    try:
        return with_properties(payload, properties_size)
    except WireError:
        counters[malformed] += 1
        return payload[:max(0, len(payload) - properties_size)]
