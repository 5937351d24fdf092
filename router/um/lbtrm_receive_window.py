"""An LBT-RM receiver's view of one transport session: order, gaps, NAKs and declared loss.

Pure logic (no sockets, no clocks of its own), so it is tested alone. Datagrams arrive with
32-bit sequence numbers; the window unwraps them against the next one it expects and hands back,
in order, the payloads that may now be delivered. A gap is NAKed after a random wait of up to
`nak_initial_backoff_interval`, then every `nak_backoff_interval`; an NCF (the source's "not
now") quiets a sequence number for `nak_suppress_interval`. A sequence number is given up, and
delivery moves past it, when:

- the source says it left its transmission window (an SM's or NCF's trail, an NCF "no retry"):
  `unrecovered_txw`, as UM counts it;
- it is still missing `nak_generation_interval` after the gap was seen: `unrecovered_tmo`;
- what waits behind gaps passes `max_buffered` bytes: the oldest gap goes first (`unrecovered_txw`).

A receiver starts at the first sequence number it hears (new DATA, not a retransmission another
receiver asked for), or after the lead of the first SM: what a source sent before a receiver
joined is not that receiver's to recover (UM without late join does the same). One exception:
DATA from a session that has sent only a few datagrams (within YOUNG_SESSION of its trailing
edge) starts the receiver at that edge, so a receiver that joined before the source began, and
lost its first datagram, recovers it.
"""
from __future__ import annotations

import random

from router.um.wire.lbtrm import NCF_IGNORED, NCF_NO_RETRY, NCF_RX_DELAY, NCF_SHED

_WRAP = 1 << 32
_HALF = 1 << 31
MAX_GAP = 65536          # a jump further than this is not worth NAKing one by one: given up at once
# A lead further ahead than this is not believed (a corrupt or forged datagram): more datagrams than
# a source sends in a minute (the default activity timeout) at 1 Gbit/s of 500-byte datagrams.
MAX_LEAD = 1 << 24
YOUNG_SESSION = 16       # datagrams a session may have sent for its first DATA to start at its trail


class ReceiveWindow:
    def __init__(self, *, nak_initial_backoff: float = 0.05, nak_backoff: float = 0.2,
                 nak_suppress: float = 1.0, nak_generation: float = 10.0, send_naks: bool = True,
                 max_buffered: int = 64 * 1024 * 1024, rng: random.Random | None = None):
        self.nak_initial_backoff = nak_initial_backoff
        self.nak_backoff = nak_backoff
        self.nak_suppress = nak_suppress
        self.nak_generation = nak_generation
        self.send_naks = send_naks
        self.max_buffered = max_buffered
        self.rng = rng or random.Random()
        self.expected: int | None = None          # unwrapped: the next sequence number to deliver
        self.high = -1                            # the highest sequence number known to exist
        self.buffered: dict[int, bytes] = {}      # arrived ahead of a gap
        self.buffered_bytes = 0
        self.missing: dict[int, list[float]] = {}  # sqn -> [gap seen, next NAK due]
        self.given_up: set[int] = set()           # missing ones delivery may skip
        self._deadline: float | None = None       # no later than the earliest due NAK or expiry
        self.jumps: dict[int, int] = {}           # start -> stop: a given-up run too long to list
        self.counters = {"msgs_rcved": 0, "bytes_rcved": 0, "naks_sent": 0, "lost": 0,
                         "unrecovered_txw": 0, "unrecovered_tmo": 0, "duplicate_data": 0,
                         "ncfs_ignored": 0, "ncfs_shed": 0, "ncfs_rx_delay": 0, "ncfs_unknown": 0,
                         "retransmissions_rcved": 0}

    # -- sequence arithmetic ---------------------------------------------------------------------
    def _unwrap(self, sqn: int) -> int:
        """The unwrapped sequence number nearest to the next expected one."""
        base = self.expected
        diff = (sqn - base) % _WRAP
        if diff >= _HALF:
            diff -= _WRAP
        return base + diff

    def believable(self, sqn: int) -> bool:
        """Whether a source could have sent up to `sqn` by now: not if it leads the highest
        sequence number known by more than MAX_LEAD. Believed, such a lead would declare most of
        the sequence space lost and leave the source's real datagrams behind, as old."""
        return self.expected is None or self._unwrap(sqn) - self.high <= MAX_LEAD

    # -- what arrives ----------------------------------------------------------------------------
    def data(self, sqn: int, payload: bytes, now: float, retransmission: bool = False,
             trail: int | None = None) -> list[bytes]:
        """A DATA datagram; returns the payloads now deliverable, in order."""
        if self.expected is None:
            if retransmission:
                # Another receiver's repair (multicast to the group) of something sent before
                # this one joined: where the session is now, only new data or an SM says.
                self.counters["retransmissions_rcved"] += 1
                return []
            start = sqn
            if trail is not None and 0 < (sqn - trail) % _WRAP <= YOUNG_SESSION:
                start = sqn - (sqn - trail) % _WRAP
            self.expected = start
            self.high = start - 1
            if start != sqn:
                sqn = self._unwrap(sqn)
        else:
            sqn = self._unwrap(sqn)
        if retransmission:
            self.counters["retransmissions_rcved"] += 1
        if sqn == self.expected and not self.buffered and not self.given_up and not self.jumps:
            # The common case: in order, nothing waiting.
            self.expected = sqn + 1
            if sqn > self.high:
                self.high = sqn
            self.missing.pop(sqn, None)
            self._count(payload)
            return [payload]
        if sqn < self.expected or sqn in self.buffered or (self.jumps and self._jumped(sqn)):
            self.counters["duplicate_data"] += 1
            return []
        if sqn > self.high:
            self._gap(self.high + 1, sqn, now)
            self.high = sqn
        self.missing.pop(sqn, None)
        self.given_up.discard(sqn)
        self.buffered[sqn] = payload
        self.buffered_bytes += len(payload)
        self._count(payload)
        out = self._advance()
        while self.buffered_bytes > self.max_buffered and self.missing:
            # Too much waits behind gaps: give up the oldest and deliver what it held back. The
            # oldest is where delivery stopped (looked up, not searched for: a gap may hold
            # MAX_GAP numbers, and searching for each would block the receiver for seconds).
            oldest = self.expected if self.expected in self.missing else min(self.missing)
            self._give_up(oldest, "unrecovered_txw")
            out += self._advance()
        return out

    def take_next(self, sqn: int, size: int) -> bool:
        """data()'s common case, for a receiver to try first: new DATA (not a retransmission) of
        `size` bytes with the next sequence number, while nothing is missing, waiting or given up.
        True: delivered and counted as data() would (its payload is the caller's to deliver, at
        once); False: nothing changed, call data()."""
        expected = self.expected
        if (expected is None or (expected - sqn) & 0xFFFFFFFF or self.missing or self.buffered
                or self.given_up or self.jumps):
            return False
        self.expected = expected + 1
        if expected > self.high:
            self.high = expected
        counters = self.counters
        counters["msgs_rcved"] += 1
        counters["bytes_rcved"] += size
        return True

    def _jumped(self, sqn: int) -> bool:
        """Within a run given up whole (a jump past MAX_GAP): too late to be delivered."""
        return any(start <= sqn < stop for start, stop in self.jumps.items())

    def sm(self, lead: int, trail: int, now: float) -> list[bytes]:
        """A session message: the source has sent up to `lead` and can repair from `trail`."""
        if self.expected is None:
            self.expected = (lead + 1) % _WRAP
            self.high = self.expected - 1
            return []
        lead = self._unwrap(lead)
        if lead > self.high:
            self._gap(self.high + 1, lead + 1, now)      # the tail of a burst was lost
            self.high = lead
        return self._trail(self._unwrap(trail))

    def ncf(self, sqns, reason: int, trail: int, now: float) -> list[bytes]:
        """A NAK confirmation for `sqns`: the source will not retransmit them now (or ever)."""
        if self.expected is None:
            return []
        name = {NCF_IGNORED: "ncfs_ignored", NCF_SHED: "ncfs_shed", NCF_RX_DELAY: "ncfs_rx_delay"}
        gave_up = False
        for raw in sqns:
            sqn = self._unwrap(raw)
            entry = self.missing.get(sqn)
            if entry is None:
                continue
            if reason == NCF_NO_RETRY:
                self._give_up(sqn, "unrecovered_txw")
                gave_up = True
            else:
                self.counters[name.get(reason, "ncfs_unknown")] += 1
                entry[1] = now + self.nak_suppress
        self._deadline = None                 # postponed or given up: recomputed when next asked
        out = self._advance() if gave_up else []
        return out + self._trail(self._unwrap(trail))

    def due(self, now: float) -> tuple[list[int], list[bytes]]:
        """(sequence numbers to NAK now, payloads deliverable after giving up on expired gaps)."""
        naks: list[int] = []
        expired = []
        generation, backoff = self.nak_generation, self.nak_backoff
        for sqn, entry in self.missing.items():
            if entry[0] + generation <= now:          # the same sum next_deadline() reports
                expired.append(sqn)
            elif entry[1] <= now:
                entry[1] = now + backoff
                if self.send_naks:
                    naks.append(sqn % _WRAP)
        for sqn in expired:
            self._give_up(sqn, "unrecovered_tmo")
        self.counters["naks_sent"] += len(naks)
        self._deadline = self._earliest()
        return naks, (self._advance() if expired else [])

    def postpone(self, delay: float) -> None:
        """Move every NAK and give-up `delay` seconds later: for that long the receiver could not
        read (flow control), so what the source sent meanwhile, repairs too, waited unread; that
        time is not the source's to be judged by."""
        for entry in self.missing.values():
            entry[0] += delay
            entry[1] += delay
        if self._deadline is not None:
            self._deadline += delay

    def next_deadline(self) -> float | None:
        """When `due` next has something to do (None: nothing is missing). Kept, not computed:
        the receiver asks after every datagram, and a receiver that fell far behind may miss
        thousands of sequence numbers (scanning them all per datagram would keep it behind)."""
        if not self.missing:
            self._deadline = None
            return None
        if self._deadline is None:
            self._deadline = self._earliest()
        return self._deadline

    def _entry_deadline(self, entry: list[float]) -> float:
        expiry = entry[0] + self.nak_generation
        return min(entry[1], expiry) if self.send_naks else expiry

    def _earliest(self) -> float | None:
        return min(map(self._entry_deadline, self.missing.values()), default=None)

    # -- bookkeeping -----------------------------------------------------------------------------
    def _count(self, payload: bytes) -> None:
        self.counters["msgs_rcved"] += 1
        self.counters["bytes_rcved"] += len(payload)

    def _gap(self, start: int, stop: int, now: float) -> None:
        """[start, stop) are missing: NAK them after the initial backoff (a jump past MAX_GAP
        gives the older ones up at once)."""
        if stop - start > MAX_GAP:
            skipped = stop - MAX_GAP - start
            self.counters["unrecovered_txw"] += skipped
            self.counters["lost"] += skipped
            self.jumps[start] = stop - MAX_GAP
            start = stop - MAX_GAP
        first_nak = now + self.rng.uniform(0.0, self.nak_initial_backoff)
        entry_deadline = self._entry_deadline([now, first_nak])
        added = False
        for sqn in range(start, stop):
            if sqn not in self.buffered:
                self.missing[sqn] = [now, first_nak]
                added = True
        if added and self._deadline is not None and entry_deadline < self._deadline:
            self._deadline = entry_deadline       # (None: recomputed from every entry when asked)

    def _give_up(self, sqn: int, why: str) -> None:
        if self.missing.pop(sqn, None) is not None:
            self.given_up.add(sqn)
            self.counters[why] += 1
            self.counters["lost"] += 1

    def _trail(self, trail: int) -> list[bytes]:
        """Everything missing below the source's trailing edge is gone for good."""
        gone = [sqn for sqn in self.missing if sqn < trail]
        for sqn in gone:
            self._give_up(sqn, "unrecovered_txw")
        return self._advance() if gone else []

    def _advance(self) -> list[bytes]:
        out = []
        expected, buffered, given_up = self.expected, self.buffered, self.given_up
        while True:
            payload = buffered.pop(expected, None)
            if payload is not None:
                self.buffered_bytes -= len(payload)
                out.append(payload)
            elif expected in given_up:
                given_up.discard(expected)
            elif expected in self.jumps:
                expected = self.jumps.pop(expected)
                continue
            else:
                break
            expected += 1
        self.expected = expected
        return out
