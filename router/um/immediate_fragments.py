"""Immediate messages larger than one datagram: cut into fragments on the way out, put back together
on the way in.

Each fragment is an LBMC MESSAGE of its own, in a datagram of its own, carrying the same headers
as a whole message (CTXINST, TOPICNAME) and a FRAG header {first_sqn, offset, length}; each takes
the next sequence number, as UM's fragments do. A router forwards fragments one by one, as the DRO
does (spec/dro.md: a fragment larger than the egress datagram size is dropped), so they need no
reassembly on the way. A receiving context puts a message back together once every byte of it
has arrived; MIM is not retransmitted, so one whose fragments stop coming is dropped when it has
waited `timeout` seconds, or when more than `max_pending` messages are waiting (counted).
"""
from __future__ import annotations

import time
from typing import Callable

from router.um.wire.lbmc import Frag, LbmcMessage, encode_lbmc
from router.um.wire.lbmc_constants import LBMC_TYPE_MESSAGE

MAX_MESSAGE = 64 * 1024 * 1024          # larger is refused on sending and taken as malformed on receiving


def fragment_frames(headers: list, payload: bytes, first_sqn: int, room: int) -> list[bytes]:
    """The frames of `payload` cut so each frame (headers, FRAG and its piece) is at most `room`
    bytes; they take the sequence numbers from `first_sqn` on."""
    head_size = len(encode_lbmc(LbmcMessage(LBMC_TYPE_MESSAGE, [*headers, Frag(0, 0, 0)], b"", has_data=True)))
    piece = room - head_size
    if piece <= 0:
        raise ValueError(f"{room} bytes leave no room for a fragment's data after its {head_size} bytes of headers")
    total = len(payload)
    frames = []
    for number, offset in enumerate(range(0, total, piece)):
        frag = Frag(first_sqn & 0xFFFFFFFF, offset, total)
        frames.append(encode_lbmc(LbmcMessage(LBMC_TYPE_MESSAGE, [*headers, frag], payload[offset:offset + piece],
                                              tidx=0, sqn=(first_sqn + number) & 0xFFFFFFFF)))
    return frames


class ImmediateReassembly:
    def __init__(self, timeout: float, max_pending: int = 1024, clock: Callable[[], float] = time.monotonic):
        self.timeout = timeout
        self.max_pending = max_pending
        self.clock = clock
        self.pending: dict[tuple[bytes, int], list] = {}    # (origin, first_sqn) -> [buffer, received, deadline]
        self.counters = {"mim_fragments_received": 0, "mim_reassembled": 0, "mim_reassembly_expired": 0,
                         "mim_fragments_malformed": 0}

    def add(self, origin: bytes, frag: Frag, piece: bytes) -> bytes | None:
        """Fold in one fragment; the whole message when this one completes it."""
        self.counters["mim_fragments_received"] += 1
        now = self.clock()
        self._expire(now)
        key = (origin, frag.first_sqn)
        entry = self.pending.get(key)
        if entry is None:
            if not 0 < frag.length <= MAX_MESSAGE:
                self.counters["mim_fragments_malformed"] += 1
                return None
            if len(self.pending) >= self.max_pending:
                del self.pending[next(iter(self.pending))]          # the oldest waits no longer
                self.counters["mim_reassembly_expired"] += 1
            entry = self.pending[key] = [bytearray(frag.length), 0, now + self.timeout]
        buffer = entry[0]
        if frag.length != len(buffer) or frag.offset + len(piece) > len(buffer):
            self.counters["mim_fragments_malformed"] += 1
            del self.pending[key]
            return None
        buffer[frag.offset:frag.offset + len(piece)] = piece
        entry[1] += len(piece)
        if entry[1] < len(buffer):
            return None
        del self.pending[key]
        self.counters["mim_reassembled"] += 1
        return bytes(buffer)

    def _expire(self, now: float) -> None:
        # Entries are in arrival order and share one timeout: the expired ones are at the front.
        while self.pending:
            key, entry = next(iter(self.pending.items()))
            if entry[2] > now:
                return
            del self.pending[key]
            self.counters["mim_reassembly_expired"] += 1
