"""The receiver side of topic resolution: which sources exist, and which one of each OTID to join.

Advertisements are keyed by OTID (the originating transport). Several advertisements with one OTID
are the same source seen along different paths (through different routers); a receiver joins only
the cheapest and, when that one ends, moves to the next. Pure logic, no sockets.

The cache forgets what is gone: a source's final advertisement or the end of its transport drops
its path, and an advertisement nobody has joined and nobody has repeated for CACHE_TIMEOUT seconds
is dropped too (a receiver that wants it later asks, and the source answers). A context that lives
for months in a domain whose topics come and go so keeps only what exists.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from router.um.wire.lbmr import (COST_INFINITE, CostOption, DomainIdOption, LateJoinOption, LbtipcInfo, LbtrmInfo,
                                 LbtruInfo, OtidOption, TcpInfo, Tir)
from router.um.wire.otid import lbtipc_otid, lbtrm_otid, lbtru_otid, tcp_otid

# How long a receiver collects equivalent advertisements before joining one: answers to one query
# from every path in a domain arrive within milliseconds of each other on an idle host; the margin
# covers a busy one. Joining a source is not latency-critical; joining the wrong path would be.
JOIN_SETTLE_SECONDS = 0.1
JOIN_SETTLE_LIMIT = 0.5
# Sources repeat their advertisements every second or so while they advertise at all; one unheard
# for five minutes has stopped (or gone quiet, and answers queries).
CACHE_TIMEOUT = 300.0


@dataclass(slots=True)
class Candidate:
    """One advertisement of a source along one path."""

    topic: str
    otid: bytes
    transport: object            # TcpInfo | LbtipcInfo
    index: int
    cost: int
    hop_count: int
    domain_id: int | None
    first_seen: float
    last_seen: float
    late_join: object = None     # the TIR's LateJoinOption: the source offers late join

    @property
    def session_key(self) -> tuple:
        return transport_key(self.transport)

    @property
    def source_string(self) -> str:
        return source_string(self.transport, self.index)


def transport_key(info) -> tuple:
    if isinstance(info, TcpInfo):
        return ("tcp", info.ip, info.port, info.session_id or 0)
    if isinstance(info, LbtipcInfo):
        return ("lbtipc", info.host_id, info.xport_id, info.session_id)
    if isinstance(info, LbtrmInfo):
        return ("lbtrm", info.src_addr, info.src_ucast_port, info.session_id, info.mcast_addr, info.udp_dest_port)
    if isinstance(info, LbtruInfo):
        return ("lbtru", info.ip, info.port, info.session_id or 0)
    return ("other", repr(info))


def session_string(info) -> str:
    """UM-style transport session string: transport, address and session."""
    if isinstance(info, TcpInfo):
        return f"TCP:{info.ip}:{info.port}:{info.session_id or 0:08X}"
    if isinstance(info, LbtipcInfo):
        return f"LBT-IPC:{info.host_id:08X}:{info.xport_id}:{info.session_id:08X}"
    if isinstance(info, LbtrmInfo):
        return (f"LBTRM:{info.src_addr}:{info.src_ucast_port}:{info.session_id:08X}:"
                f"{info.mcast_addr}:{info.udp_dest_port}")
    if isinstance(info, LbtruInfo):
        return f"LBTRU:{info.ip}:{info.port}:{info.session_id or 0:08X}"
    return type(info).__name__


def key_string(key: tuple) -> str:
    """The session string of a transport_key."""
    kind = key[0]
    if kind == "tcp":
        return session_string(TcpInfo(key[1], key[2], key[3]))
    if kind == "lbtipc":
        return session_string(LbtipcInfo(key[1], key[3], key[2]))
    if kind == "lbtrm":
        return session_string(LbtrmInfo(key[1], key[4], key[3], key[5], key[2]))
    if kind == "lbtru":
        return session_string(LbtruInfo(key[1], key[2], key[3]))
    return repr(key)


def source_string(info, index: int) -> str:
    """UM-style source string: transport session and topic index."""
    return f"{session_string(info)}[{index}]"


def otid_of(tir: Tir) -> bytes:
    """The TIR's OTID option, or the OTID its own transport implies (a source seen directly)."""
    for option in tir.options:
        if isinstance(option, OtidOption):
            return option.otid
    info = tir.transport
    if isinstance(info, TcpInfo):
        return tcp_otid(info.ip, info.port, tir.index, session_id=info.session_id or 0)
    if isinstance(info, LbtipcInfo):
        return lbtipc_otid(info.host_id, info.xport_id, info.session_id, tir.index)
    if isinstance(info, LbtrmInfo):
        return lbtrm_otid(info.src_addr, info.src_ucast_port, info.mcast_addr, info.udp_dest_port, info.session_id,
                          tir.index)
    if isinstance(info, LbtruInfo):
        return lbtru_otid(info.ip, info.port, info.session_id or 0, tir.index)
    return repr(info).encode()[:32].ljust(32, b"\0")


def candidate_from_tir(tir: Tir, now: float) -> Candidate:
    cost, hops, domain = 0, 0, None
    for option in tir.options:
        if isinstance(option, CostOption):
            cost, hops = option.cost, option.hop_count
        elif isinstance(option, DomainIdOption):
            domain = option.domain_id
    late_join = next((option for option in tir.options if isinstance(option, LateJoinOption)), None)
    return Candidate(tir.topic, otid_of(tir), tir.transport, tir.index, cost, hops, domain, now, now, late_join)


CostFunction = Callable[[str, str, int, int], "int | None"]


@dataclass
class _OtidEntry:
    candidates: dict[tuple, Candidate] = field(default_factory=dict)   # (session key, index) -> ad
    joined: Candidate | None = None


class TopicSources:
    """Every advertised source of one topic, grouped by OTID, and the one joined per OTID."""

    def __init__(self, topic: str, cost_function: CostFunction | None = None):
        self.topic = topic
        self.cost_function = cost_function
        self.by_otid: dict[bytes, _OtidEntry] = {}

    def observe(self, tir: Tir, now: float | None = None) -> tuple[str, Candidate | None]:
        """Fold one TIR in. Returns ('final', candidate) for a final advertisement (the path it
        ends: the one known, else the advertisement itself), ('new', candidate) for an
        advertisement not seen before, ('refresh', candidate) otherwise, ('rejected', None) when
        the cost function refuses it."""
        now = time.monotonic() if now is None else now
        fresh = candidate_from_tir(tir, now)
        entry = self.by_otid.setdefault(fresh.otid, _OtidEntry())
        key = (fresh.session_key, fresh.index)
        if fresh.cost == COST_INFINITE:
            gone = entry.candidates.pop(key, None)
            self._drop_if_empty(fresh.otid)
            # Not known here, it may still be a path a receiver joined: one quiet for longer than
            # CACHE_TIMEOUT (quiescent) was forgotten, and its end must reach the receiver all the same.
            return "final", gone if gone is not None else fresh
        if self.cost_function is not None:
            evaluated = self.cost_function(self.topic, fresh.source_string, fresh.hop_count, fresh.cost)
            if evaluated is None or evaluated >= COST_INFINITE:
                return ("rejected", None)
            fresh.cost = evaluated
        known = entry.candidates.get(key)
        if known is None:
            entry.candidates[key] = fresh
            return ("new", fresh)
        known.last_seen = now
        known.cost, known.hop_count, known.domain_id = fresh.cost, fresh.hop_count, fresh.domain_id
        return ("refresh", known)

    def best(self, otid: bytes) -> Candidate | None:
        entry = self.by_otid.get(otid)
        if entry is None or not entry.candidates:
            return None
        return min(entry.candidates.values(), key=lambda c: (c.cost, c.hop_count, c.first_seen))

    def joined(self, otid: bytes) -> Candidate | None:
        entry = self.by_otid.get(otid)
        return entry.joined if entry else None

    def set_joined(self, otid: bytes, candidate: Candidate | None) -> None:
        self.by_otid.setdefault(otid, _OtidEntry()).joined = candidate

    def forget(self, candidate: Candidate) -> None:
        """Drop a candidate whose transport ended (EOS), so the next cheapest can be joined."""
        entry = self.by_otid.get(candidate.otid)
        if entry is None:
            return
        entry.candidates.pop((candidate.session_key, candidate.index), None)
        if entry.joined is candidate:
            entry.joined = None
        self._drop_if_empty(candidate.otid)

    def expire(self, cutoff: float) -> int:
        """Drop advertisements last heard before `cutoff` that no receiver has joined; returns
        how many went."""
        dropped = 0
        for otid, entry in list(self.by_otid.items()):
            for key, candidate in list(entry.candidates.items()):
                if candidate.last_seen < cutoff and candidate is not entry.joined:
                    del entry.candidates[key]
                    dropped += 1
            self._drop_if_empty(otid)
        return dropped

    @property
    def empty(self) -> bool:
        return not self.by_otid

    def _drop_if_empty(self, otid: bytes) -> None:
        entry = self.by_otid.get(otid)
        if entry is not None and not entry.candidates and entry.joined is None:
            del self.by_otid[otid]

    def otids(self) -> list[bytes]:
        return list(self.by_otid)

    def all_candidates(self) -> list[Candidate]:
        return [c for entry in self.by_otid.values() for c in entry.candidates.values()]
