"""The example tools' payload: who sent it, its sequence number, and when (so receivers can see
loss, duplication, reordering and latency). Fixed 20-byte header, padded to the requested length."""
from __future__ import annotations

import struct

HEADER = struct.Struct(">IQQ")          # source id, sequence number, send time (ns since the epoch)
MINIMUM_LENGTH = HEADER.size


def make_buffer(length: int) -> bytearray:
    if length < MINIMUM_LENGTH:
        raise ValueError(f"message length must be at least {MINIMUM_LENGTH} bytes (the payload header)")
    return bytearray(length)


pack_into = HEADER.pack_into
unpack_from = HEADER.unpack_from
