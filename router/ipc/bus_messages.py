"""The control bus's message kinds and their msgpack codecs (never pickle).

Each message is a msgpack array `[kind, field, field, ...]`; each kind is a frozen dataclass with
a fixed field order, so a message is small, typed, and readable by any msgpack tool. What the hub
publishes goes in two frames, `[sequence, message]` (router.ipc.bus numbers every publication).
"""
from __future__ import annotations

from dataclasses import astuple, dataclass, fields

import msgpack

from router.um.wire._codec import TEXT_ERRORS


class BusError(ValueError):
    """A bus message that does not decode."""


INTEREST_TOPIC = 0
INTEREST_PCRE = 1
INTEREST_REGEX = 2

OP_ADD = 0          # new interest
OP_REFRESH = 1      # still interested (keeps remote interest from expiring)
OP_CANCEL = 2       # interest gone


@dataclass(frozen=True, slots=True)
class Hello:
    """A worker has started (or restarted) and wants the current state."""
    portal: str
    generation: int
    pid: int


@dataclass(frozen=True, slots=True)
class Probe:
    """A starting worker asks the hub to publish this back to it: once it arrives on the worker's
    subscriber, the subscription is in place and the worker may ask for its snapshot."""
    portal: str
    pid: int


@dataclass(frozen=True, slots=True)
class Interest:
    """A portal's domain has (or no longer has) receivers for a topic or pattern."""
    portal: str
    domain_id: int
    kind: int           # INTEREST_TOPIC / _PCRE / _REGEX
    symbol: str
    op: int             # OP_ADD / OP_REFRESH / OP_CANCEL
    sequence: int = 0   # set by the hub: the number it published this update under


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a (re)started worker needs: all current interest and the portals that are up."""
    sequence: int
    interest: tuple          # tuple of Interest as arrays
    portals: tuple           # tuple of (portal, index, generation)


@dataclass(frozen=True, slots=True)
class Resync:
    """A worker saw a gap in the publications' numbers (it fell behind and ZeroMQ dropped some):
    it wants a fresh snapshot, and the newest route table."""
    portal: str


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Published now and then, numbered like every publication: a worker that lost the last
    updates before a quiet spell sees the gap at the next one instead of never."""


@dataclass(frozen=True, slots=True)
class PortalUp:
    """A portal's worker is up: ingress portals re-send their stream advertisements to it."""
    portal: str
    index: int
    generation: int


@dataclass(frozen=True, slots=True)
class PortalDown:
    portal: str
    index: int


@dataclass(frozen=True, slots=True)
class PortalRemoved:
    """A reload removed this portal: stop reading its ring, end its streams, forget it."""
    portal: str
    index: int


@dataclass(frozen=True, slots=True)
class Keepalive:
    portal: str
    timestamp: float


@dataclass(frozen=True, slots=True)
class SetCost:
    """A reload changed this portal's cost: proxies re-advertise without a restart."""
    portal: str
    cost: int


@dataclass(frozen=True, slots=True)
class Query:
    """The supervisor asks a worker for what only it knows (its topic map, its proxies)."""
    request_id: int
    what: str


@dataclass(frozen=True, slots=True)
class Answer:
    request_id: int
    portal: str
    data: dict


@dataclass(frozen=True, slots=True)
class RouteTable:
    """The routes after a recalculation: the topology map's records, from which each worker builds
    the same paths (router.routing.service.snapshot_from_plain). Newer versions replace older."""
    version: int
    local_id: int
    records: tuple


@dataclass(frozen=True, slots=True)
class PeerState:
    """A peer portal's link came up to (or went down from) the named router."""
    portal: str
    up: int
    peer_name: str
    peer_node_id: int


@dataclass(frozen=True, slots=True)
class RouteInfoMessage:
    """A route-info LBMC message: from a worker, one that arrived on `portal`; to a worker, one
    to put on `portal`'s link or domain (the supervisor floods them on)."""
    portal: str
    data: bytes


@dataclass(frozen=True, slots=True)
class DomainConflict:
    """An endpoint heard another router announce a different domain id for its domain."""
    portal: str
    domain_id: int
    heard_domain_id: int
    heard_from: str


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Stop gracefully: proxy sources send final advertisements first."""
    reason: str


KINDS: list[type] = [Hello, Interest, Snapshot, PortalUp, PortalDown, Keepalive, SetCost, Shutdown, PortalRemoved,
                     Query, Answer, RouteTable, PeerState, RouteInfoMessage, DomainConflict, Probe, Resync,
                     Heartbeat]
_KIND_OF = {cls: number for number, cls in enumerate(KINDS)}


def encode(message) -> bytes:
    kind = _KIND_OF.get(type(message))
    if kind is None:
        raise BusError(f"not a bus message: {message!r}")
    values = [_plain(getattr(message, f.name)) for f in fields(message)]
    return msgpack.packb([kind, *values], use_bin_type=True, unicode_errors=TEXT_ERRORS)


def _plain(value):
    if isinstance(value, tuple) and value and hasattr(value[0], "__dataclass_fields__"):
        return [list(astuple(item)) for item in value]
    return value


_TYPES = {"str": str, "int": int, "float": (int, float), "tuple": (list, tuple), "dict": dict, "bytes": bytes}


def decode(data: bytes):
    try:
        items = msgpack.unpackb(data, raw=False, strict_map_key=False, unicode_errors=TEXT_ERRORS)
    except Exception as err:   # msgpack raises several unrelated types for bad input
        raise BusError(f"undecodable bus message: {err}") from None
    if not isinstance(items, list) or not items or not isinstance(items[0], int) \
            or not 0 <= items[0] < len(KINDS):
        raise BusError(f"bus message without a known kind: {items!r:.80}")
    cls = KINDS[items[0]]
    try:
        message = cls(*items[1:])
    except TypeError as err:
        raise BusError(f"bad {cls.__name__} message: {err}") from None
    for f in fields(cls):
        value = getattr(message, f.name)
        expected = _TYPES[f.type]
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise BusError(f"bad {cls.__name__} message: {f.name} is {type(value).__name__}, not {f.type}")
    if cls is Snapshot:
        message = Snapshot(message.sequence,
                           tuple(Interest(*entry) for entry in message.interest),
                           tuple(tuple(entry) for entry in message.portals))
    return message
