"""Immediate messages larger than one datagram: cut into fragments on the way out, put back together
on the way in.

Each fragment is an LBMC MESSAGE of its own, in a datagram of its own, carrying the same headers
as a whole message (CTXINST, TOPICNAME) and a FRAG header {first_sqn, offset, length}; each takes
the next sequence number, as UM's fragments do. A router forwards fragments one by one, as the DRO
does (spec/dro.md: a fragment larger than the egress datagram size is dropped), so they need no
reassembly on the way. A receiving context puts a message back together once every byte of it
has arrived (router.um.received_ranges: a fragment that comes twice or overlaps another adds only
what was missing); MIM is not retransmitted, so one whose fragments stop coming is dropped when it
has waited `timeout` seconds, or when more than `max_pending` messages or `max_bytes` bytes of them
are waiting (counted). A first fragment is one small datagram that may claim 64 MB: without the
byte limit, a sender starting many messages and finishing none would make every listening context
(routers' too) allocate 64 MB for each.
"""
from __future__ import annotations

import time
from typing import Callable

from router.um.received_ranges import ReceivedRanges
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
    def __init__(self, timeout: float, max_pending: int = 1024, clock: Callable[[], float] = time.monotonic,
                 max_bytes: int = MAX_MESSAGE):
        self.timeout = timeout
        self.max_pending = max_pending
        self.max_bytes = max_bytes
        self.clock = clock
        self.pending: dict[tuple[bytes, int], list] = {}    # (origin, first_sqn) -> [buffer, ranges, deadline]
        self.waiting = 0                                    # bytes of the buffers pending
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
            while self.pending and (len(self.pending) >= self.max_pending
                                    or self.waiting + frag.length > self.max_bytes):
                self._give_up(next(iter(self.pending)))     # the oldest waits no longer
            entry = self.pending[key] = [bytearray(frag.length), ReceivedRanges(), now + self.timeout]
            self.waiting += frag.length
        buffer, ranges = entry[0], entry[1]
        if frag.length != len(buffer) or frag.offset + len(piece) > len(buffer):
            self.counters["mim_fragments_malformed"] += 1
            self._forget(key)
            return None
        buffer[frag.offset:frag.offset + len(piece)] = piece
        ranges.add(frag.offset, frag.offset + len(piece))
        if ranges.covered < len(buffer):
            return None
        self._forget(key)
        self.counters["mim_reassembled"] += 1
        return bytes(buffer)

    def expire(self) -> float | None:
        """Give up what has waited its timeout; seconds until the next one would have, or None if
        nothing waits (the owner's timer: a message whose fragments stopped coming is given up and
        counted when its time comes, not when another one happens to arrive)."""
        now = self.clock()
        self._expire(now)
        if not self.pending:
            return None
        return max(next(iter(self.pending.values()))[2] - now, 0.0)

    def _expire(self, now: float) -> None:
        # Entries are in arrival order and share one timeout: the expired ones are at the front.
        while self.pending:
            key, entry = next(iter(self.pending.items()))
            if entry[2] > now:
                return
            self._give_up(key)

    def _give_up(self, key: tuple[bytes, int]) -> None:
        self._forget(key)
        self.counters["mim_reassembly_expired"] += 1

    def _forget(self, key: tuple[bytes, int]) -> None:
        self.waiting -= len(self.pending.pop(key)[0])
