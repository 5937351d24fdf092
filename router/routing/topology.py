"""The topology map: every router we know, what it is adjacent to, and at what cost.

Each router has a node id (63 bits, bit 63 is reserved on the wire to mark domains, see
:mod:`router.routing.route_info`), a name, a version and its adjacencies: the domains its
endpoint portals sit on and the routers its peer portals are linked to, each with that portal's
cost. The version changes whenever the router's own adjacencies change (a link came up or went
down, a cost changed), which is what makes the others recalculate (spec/dro.md §2.5).

Route-info announcements are numbered per origin (u16 ``sqn``, serial-number arithmetic, RFC
1982): an announcement not newer than the last one applied is a duplicate of a flood that already
passed, or older news, and is not applied. A duplicate is forwarded only when it has more ttl left
than every copy before it (it came a shorter way), so the flood reaches every router within
``max-hop-count`` of the origin whichever copy arrives first. A router not heard from for
``timeout`` ms leaves the map. Our own record never times out.

The *topology signature* is a hash of the map's shape and costs (node ids, names, adjacencies;
not versions, sequence numbers or local portal names), so every router that sees the same map
computes the same value: operators compare it to tell a converged network.

Forbidden topologies (spec/dro.md §2.5 "Unsupported") are reported, not refused: paths are still
computed (deterministically) so traffic flows while an operator fixes the configuration.

Node ids must be unique in the network. A router's name is fixed for as long as it runs and every
run draws a new node id, so route-info under our node id that is not ours (another name, or a
sequence number we have not sent yet), or under a known router's node id with another name, comes
from a second router with that node id. The map keeps the router it had under that id (routes do
not flap between the two); the other's announcements are flooded on, numbered apart, so every
router between the two, and the two themselves, hear and report it.
"""
from __future__ import annotations

import hashlib
import secrets
import struct
from dataclasses import dataclass, field, replace
from enum import Enum

DOMAIN = "domain"
ROUTER = "router"
MAX_NODE_ID = (1 << 63) - 1
SQN_MODULUS = 1 << 16
VERSION_MODULUS = 1 << 16

# An endpoint portal that keeps hearing another router say a different LOCAL_DOMAIN reports it
# at most this often (router.portals.endpoint); a conflict is held from one report to the next.
DOMAIN_ID_CONFLICT_REPORT_INTERVAL_MS = 5000

TWO_PEER_LINKS = "two-peer-links"
TWO_ENDPOINTS_ON_ONE_DOMAIN = "two-endpoints-on-one-domain"
TWO_DOMAIN_IDS_FOR_ONE_DOMAIN = "two-domain-ids-for-one-domain"
TWO_ROUTERS_WITH_ONE_NODE_ID = "two-routers-with-one-node-id"


def new_node_id() -> int:
    """A random, non-zero 63-bit node id (the DRO assigns itself one at start-up)."""
    return secrets.randbelow(MAX_NODE_ID) + 1


def domain_identity_key(identity: str) -> int:
    """The 31-bit key of a domain's identity (e.g. its resolver address ``"239.101.3.1:12965"``).

    Only the key travels in route-info; two routers that report the same key under two different
    domain ids are looking at one domain with two ids. Never 0 (0 means "no identity").
    """
    digest = hashlib.blake2b(identity.encode("utf-8", "surrogateescape"), digest_size=4).digest()
    return (int.from_bytes(digest, "big") & 0x7FFF_FFFF) or 1


def sqn_newer(candidate: int, current: int) -> bool:
    """Serial-number comparison of u16 sequence numbers: is ``candidate`` after ``current``?"""
    distance = (candidate - current) % SQN_MODULUS
    return 0 < distance < SQN_MODULUS // 2


@dataclass(frozen=True)
class Adjacency:
    """One portal of a router: the domain or router it leads to, and the cost of leaving by it.

    ``portal`` (and ``identity_label``, and an endpoint's ``hotlink`` index) are known only for
    our own router; they do not travel and do not take part in equality, so a record compares equal
    on every router.
    """
    kind: str                       # DOMAIN or ROUTER
    neighbor: int                   # domain id, or the adjacent router's node id
    cost: int
    identity: int = 0               # domain_identity_key() of the domain, 0 = unknown
    portal: str = field(default="", compare=False)
    identity_label: str = field(default="", compare=False)
    hotlink: int = field(default=0, compare=False)      # an endpoint's <hotlink-index> (0: none)

    @classmethod
    def domain(cls, domain_id: int, cost: int, portal: str = "", identity: str = "",
               hotlink: int = 0) -> "Adjacency":
        key = domain_identity_key(identity) if identity else 0
        return cls(DOMAIN, domain_id, cost, key, portal, identity, hotlink)

    @classmethod
    def router(cls, node_id: int, cost: int, portal: str = "") -> "Adjacency":
        return cls(ROUTER, node_id, cost, 0, portal)

    def sort_key(self) -> tuple:
        return (0 if self.kind == DOMAIN else 1, self.neighbor, self.cost, self.identity, self.portal)


@dataclass(frozen=True)
class RouterAnnouncement:
    """What one route-info message says about its origin (see route_info.py for the wire form)."""
    node_id: int
    name: str
    version: int
    sqn: int
    adjacencies: tuple[Adjacency, ...]
    ttl: int                        # routers this announcement may still traverse
    topology_signature: int = 0     # the origin's signature32(), for convergence display


@dataclass(frozen=True)
class RouterRecord:
    node_id: int
    name: str
    version: int
    adjacencies: tuple[Adjacency, ...]
    sqn: int = 0
    last_heard_ms: float = 0.0
    topology_signature: int = 0
    is_local: bool = False
    best_ttl: int = field(default=0, compare=False)   # most ttl any copy of announcement ``sqn`` had here

    def label(self) -> str:
        return f"{self.name or '?'} (node {self.node_id:#x})"

    def same_content(self, other: "RouterRecord") -> bool:
        return (self.name, self.version, self.adjacencies) == (other.name, other.version, other.adjacencies)


class UpdateOutcome(Enum):
    """What applying an announcement did; the first two are recalculation triggers."""
    NEW_ROUTER = "NEW DRO DISCOVERED"
    NODE_UPDATED = "NODE UPDATED"
    REFRESHED = "refreshed"
    DUPLICATE = "duplicate"         # same sqn again: another copy of a flood already applied
    STALE = "stale"                 # older sqn
    OWN = "own"                     # our own announcement came back
    NODE_ID_CONFLICT = "node id conflict"   # another router with the node id of ``record``


@dataclass(frozen=True)
class UpdateResult:
    outcome: UpdateOutcome
    record: RouterRecord | None
    forward_ttl: int | None         # flood on with this ttl, or None: do not forward

    @property
    def changes_topology(self) -> bool:
        return self.outcome in (UpdateOutcome.NEW_ROUTER, UpdateOutcome.NODE_UPDATED)


@dataclass(frozen=True)
class ForbiddenTopology:
    kind: str                       # TWO_PEER_LINKS, TWO_ENDPOINTS_ON_ONE_DOMAIN, TWO_DOMAIN_IDS_FOR_ONE_DOMAIN
    message: str
    routers: tuple[int, ...]
    # What the finding is about when its message also says how it was seen (evidence that changes
    # from one report to the next); "" when the message itself names it.
    subject: str = ""

    @property
    def identity(self) -> tuple:
        """The same finding has the same identity however it was last seen: logged once."""
        return (self.kind, self.routers, self.subject or self.message)


@dataclass(frozen=True)
class TopologySnapshot:
    """An immutable copy of the map, what paths.compute_routes() works on."""
    local_id: int
    records: tuple[RouterRecord, ...]   # sorted by node id

    def record(self, node_id: int) -> RouterRecord | None:
        for record in self.records:
            if record.node_id == node_id:
                return record
        return None


class Topology:
    def __init__(self, node_id: int, name: str, timeout_ms: int = 4000, max_hop_count: int = 100):
        if not 0 < node_id <= MAX_NODE_ID:
            raise ValueError(f"node id {node_id:#x} must be in 1..2**63-1 (bit 63 marks domains on the wire)")
        if not 1 <= max_hop_count <= 255:
            raise ValueError(f"max-hop-count {max_hop_count} must be in 1..255 (route-info ttl is a u8)")
        self.node_id = node_id
        self.timeout_ms = timeout_ms
        self.max_hop_count = max_hop_count
        self._records = {node_id: RouterRecord(node_id, name, 0, (), is_local=True)}
        self._sqn = 0
        # (lower id, higher id) -> (evidence, last seen ms): conflicts seen in a domain's own
        # traffic (another router's LBMR says LOCAL_DOMAIN x where we say y).
        self._domain_id_conflicts: dict[tuple[int, int], tuple[str, float]] = {}
        # (node id, the two names, sorted) -> (evidence, last seen ms): two routers with one node id.
        self._node_id_conflicts: dict[tuple[int, tuple[str, str]], tuple[str, float]] = {}
        # (node id, name) -> (last sqn, best ttl, last heard ms) of a router whose node id the map
        # gives to another: its announcements are numbered apart from that one's.
        self._shadowed: dict[tuple[int, str], tuple[int, int, float]] = {}

    # -- our own router ------------------------------------------------------------------------
    @property
    def local(self) -> RouterRecord:
        return self._records[self.node_id]

    def set_local_adjacencies(self, adjacencies) -> bool:
        """Replace our adjacencies; True (and a new version) if that changed the map."""
        ordered = tuple(sorted(adjacencies, key=Adjacency.sort_key))
        local = self.local
        changed = ordered != local.adjacencies
        version = (local.version + 1) % VERSION_MODULUS if changed else local.version
        self._records[self.node_id] = replace(local, adjacencies=ordered, version=version)
        return changed

    def next_announcement(self) -> RouterAnnouncement:
        """Our route-info for this propagation interval (each call takes a new sqn)."""
        self._sqn = (self._sqn + 1) % SQN_MODULUS
        local = self.local
        self._records[self.node_id] = replace(local, sqn=self._sqn)
        return RouterAnnouncement(self.node_id, local.name, local.version, self._sqn, local.adjacencies,
                                  self.max_hop_count, self.signature32())

    # -- other routers -------------------------------------------------------------------------
    def apply(self, announcement: RouterAnnouncement, now_ms: float) -> UpdateResult:
        if announcement.node_id == self.node_id:
            if announcement.name != self.local.name or sqn_newer(announcement.sqn, self._sqn):
                return UpdateResult(UpdateOutcome.NODE_ID_CONFLICT, self.local, None)
            return UpdateResult(UpdateOutcome.OWN, self.local, None)
        existing = self._records.get(announcement.node_id)
        # This router is one hop; an announcement may traverse at most max-hop-count of them.
        ttl = min(announcement.ttl, self.max_hop_count)
        if existing is not None and existing.name != announcement.name:
            forward_ttl = self._flood_shadowed(announcement, ttl, now_ms)
            return UpdateResult(UpdateOutcome.NODE_ID_CONFLICT, existing, forward_ttl)
        if existing is not None and not sqn_newer(announcement.sqn, existing.sqn):
            if announcement.sqn != existing.sqn:
                return UpdateResult(UpdateOutcome.STALE, existing, None)
            if ttl <= existing.best_ttl:
                return UpdateResult(UpdateOutcome.DUPLICATE, existing, None)
            # A copy that came a shorter way than the one applied may travel further: routers that
            # are within max-hop-count of the origin only by this way hear it only if it goes on.
            self._records[existing.node_id] = replace(existing, best_ttl=ttl)
            return UpdateResult(UpdateOutcome.DUPLICATE, existing, ttl - 1 if ttl > 1 else None)
        record = RouterRecord(announcement.node_id, announcement.name, announcement.version,
                              tuple(sorted(announcement.adjacencies, key=Adjacency.sort_key)),
                              announcement.sqn, now_ms, announcement.topology_signature, best_ttl=ttl)
        self._records[record.node_id] = record
        if existing is None:
            outcome = UpdateOutcome.NEW_ROUTER
        elif not record.same_content(existing):
            outcome = UpdateOutcome.NODE_UPDATED
        else:
            outcome = UpdateOutcome.REFRESHED
        return UpdateResult(outcome, record, ttl - 1 if ttl > 1 else None)

    def _flood_shadowed(self, announcement: RouterAnnouncement, ttl: int, now_ms: float) -> int | None:
        """The ttl to flood a shadowed router's announcement on with, by the rules of apply()."""
        key = (announcement.node_id, announcement.name)
        last = self._shadowed.get(key)
        if last is not None and not sqn_newer(announcement.sqn, last[0]):
            if announcement.sqn != last[0] or ttl <= last[1]:
                return None
        self._shadowed[key] = (announcement.sqn, ttl, now_ms)
        return ttl - 1 if ttl > 1 else None

    def expire(self, now_ms: float) -> list[RouterRecord]:
        """Remove routers silent for ``timeout`` ms (each is a DRO TIMED OUT trigger)."""
        gone = [r for r in self._records.values()
                if not r.is_local and now_ms - r.last_heard_ms >= self.timeout_ms]
        for record in gone:
            del self._records[record.node_id]
        # Reports come every DOMAIN_ID_CONFLICT_REPORT_INTERVAL_MS, not every propagation interval:
        # holding a conflict only ``timeout`` ms would drop it between two reports.
        hold_ms = self.timeout_ms + DOMAIN_ID_CONFLICT_REPORT_INTERVAL_MS
        for key, (_, seen) in list(self._domain_id_conflicts.items()):
            if now_ms - seen >= hold_ms:
                del self._domain_id_conflicts[key]
        # Both routers announce every propagation interval: one not heard for ``timeout`` has gone.
        for table in (self._node_id_conflicts, self._shadowed):
            for key, (*_, seen) in list(table.items()):
                if now_ms - seen >= self.timeout_ms:
                    del table[key]
        return sorted(gone, key=lambda r: r.node_id)

    def routers(self) -> list[RouterRecord]:
        return [self._records[node_id] for node_id in sorted(self._records)]

    def get(self, node_id: int) -> RouterRecord | None:
        return self._records.get(node_id)

    def snapshot(self) -> TopologySnapshot:
        return TopologySnapshot(self.node_id, tuple(self.routers()))

    # -- signature -----------------------------------------------------------------------------
    def signature(self) -> int:
        """64-bit hash of the map's shape and costs; equal on every router that sees this map."""
        digest = hashlib.blake2b(digest_size=8)
        for record in self.routers():
            name = record.name.encode("utf-8", "surrogateescape")
            digest.update(struct.pack(">QH", record.node_id, len(name)) + name)
            digest.update(struct.pack(">H", len(record.adjacencies)))
            for adjacency in record.adjacencies:
                digest.update(struct.pack(">BQII", adjacency.kind == ROUTER, adjacency.neighbor,
                                          adjacency.cost, adjacency.identity))
        return int.from_bytes(digest.digest(), "big")

    def signature32(self) -> int:
        """The signature folded to the 32 bits of ROUTE_INFO's ``topology`` field."""
        value = self.signature()
        return (value >> 32) ^ (value & 0xFFFF_FFFF)

    # -- forbidden topologies ------------------------------------------------------------------
    def note_domain_id_conflict(self, our_domain_id: int, heard_domain_id: int, evidence: str,
                                now_ms: float) -> None:
        """A portal heard another router in its domain announce a different domain id.

        ``evidence`` says where (e.g. "portal LAN1 heard router 10.0.0.7 say LOCAL_DOMAIN 9").
        Kept until not reported again for ``timeout`` ms past the portals' report interval.
        """
        if our_domain_id != heard_domain_id:
            key = (min(our_domain_id, heard_domain_id), max(our_domain_id, heard_domain_id))
            self._domain_id_conflicts[key] = (evidence, now_ms)

    def note_node_id_conflict(self, node_id: int, names: tuple[str, str], evidence: str, now_ms: float) -> None:
        """Two routers, named ``names``, announce node id ``node_id``; ``evidence`` says where it
        was heard (e.g. "portal TO_HUB of dro-east heard route-info from dro-west"). Kept while heard."""
        self._node_id_conflicts[(node_id, tuple(sorted(names)))] = (evidence, now_ms)

    def forbidden(self) -> list[ForbiddenTopology]:
        """Every forbidden construct in the current map, in a stable order."""
        found: list[ForbiddenTopology] = []
        # Our own record first: it names our portals. Both ends of a doubled link report it; once is enough.
        doubled_links: set[tuple[int, ...]] = set()
        for record in sorted(self.routers(), key=lambda r: not r.is_local):
            for item in _duplicate_peer_links(record, self._records):
                if item.routers not in doubled_links:
                    doubled_links.add(item.routers)
                    found.append(item)
            found += _duplicate_endpoints(record)
        found += _domain_with_two_ids(self.routers())
        for (low, high), (evidence, _) in sorted(self._domain_id_conflicts.items()):
            found.append(ForbiddenTopology(
                TWO_DOMAIN_IDS_FOR_ONE_DOMAIN,
                f"forbidden topology: one domain is configured with two domain ids, {low} and {high} "
                f"({evidence}); give every router's endpoint on a domain the same domain id",
                (self.node_id,), f"domain ids {low} and {high} heard in one domain"))
        for (node_id, (first, second)), (evidence, _) in sorted(self._node_id_conflicts.items()):
            routers = f"two routers named {first}" if first == second else f"routers {first} and {second}"
            found.append(ForbiddenTopology(
                TWO_ROUTERS_WITH_ONE_NODE_ID,
                f"forbidden topology: {routers} both have node id {node_id:#x} ({evidence}); each router's "
                f"node id must be unique: restart one of them to give it another",
                (node_id,), f"node id {node_id:#x} of {first} and {second}"))
        return found


def _label(records: dict, node_id: int) -> str:
    record = records.get(node_id)
    return record.label() if record is not None else f"(node {node_id:#x})"


def _duplicate_peer_links(record: RouterRecord, records: dict) -> list[ForbiddenTopology]:
    by_neighbor: dict[int, list[Adjacency]] = {}
    for adjacency in record.adjacencies:
        if adjacency.kind == ROUTER:
            by_neighbor.setdefault(adjacency.neighbor, []).append(adjacency)
    found = []
    for neighbor, links in sorted(by_neighbor.items()):
        if len(links) < 2:
            continue
        portals = ", ".join(a.portal for a in links if a.portal)
        via = f" (portals {portals})" if portals else ""
        found.append(ForbiddenTopology(
            TWO_PEER_LINKS,
            f"forbidden topology: routers {record.label()} and {_label(records, neighbor)} are joined by "
            f"{len(links)} peer links{via}; use one peer link between two routers (add a router or a "
            f"transit domain for a second path)",
            tuple(sorted((record.node_id, neighbor)))))
    return found


def _duplicate_endpoints(record: RouterRecord) -> list[ForbiddenTopology]:
    """Two endpoint portals of one router on one domain: same id, or same identity."""
    found = []
    domains = [a for a in record.adjacencies if a.kind == DOMAIN]
    groups: dict[tuple, list[Adjacency]] = {}
    for adjacency in domains:
        groups.setdefault(("id", adjacency.neighbor), []).append(adjacency)
        if adjacency.identity:
            groups.setdefault(("identity", adjacency.identity), []).append(adjacency)
    reported: set[frozenset] = set()
    for (how, value), members in sorted(groups.items(), key=lambda item: (item[0][0], item[0][1])):
        key = frozenset(id(a) for a in members)
        if len(members) < 2 or key in reported:
            continue
        reported.add(key)
        portals = ", ".join(a.portal for a in members if a.portal)
        via = f" (portals {portals})" if portals else ""
        if how == "id":
            what = f"domain {value}"
        else:
            ids = ", ".join(str(a.neighbor) for a in members)
            what = f"one domain{_identity_text(members)} under domain ids {ids}"
        found.append(ForbiddenTopology(
            TWO_ENDPOINTS_ON_ONE_DOMAIN,
            f"forbidden topology: router {record.label()} has {len(members)} endpoint portals on {what}{via}; "
            f"a router may have only one endpoint portal per domain",
            (record.node_id,)))
    return found


def _identity_text(adjacencies) -> str:
    labels = sorted({a.identity_label for a in adjacencies if a.identity_label})
    if labels:
        return f" ({labels[0]})"
    keys = sorted({a.identity for a in adjacencies if a.identity})
    return f" (identity key {keys[0]:#010x})" if keys else ""


def _domain_with_two_ids(records: list[RouterRecord]) -> list[ForbiddenTopology]:
    """The same domain identity reported under different domain ids by different routers."""
    by_identity: dict[int, dict[int, list[tuple[RouterRecord, Adjacency]]]] = {}
    for record in records:
        for adjacency in record.adjacencies:
            if adjacency.kind == DOMAIN and adjacency.identity:
                ids = by_identity.setdefault(adjacency.identity, {})
                ids.setdefault(adjacency.neighbor, []).append((record, adjacency))
    found = []
    for identity, ids in sorted(by_identity.items()):
        routers_by_id = {domain_id: {r.node_id for r, _ in seen} for domain_id, seen in ids.items()}
        if len(ids) < 2 or len(set().union(*routers_by_id.values())) < 2:
            continue    # one router alone is the two-endpoints case, reported above
        adjacencies = [a for seen in ids.values() for _, a in seen]
        parts = [f"{domain_id} (by {', '.join(r.label() for r, _ in seen)})"
                 for domain_id, seen in sorted(ids.items())]
        found.append(ForbiddenTopology(
            TWO_DOMAIN_IDS_FOR_ONE_DOMAIN,
            f"forbidden topology: one domain{_identity_text(adjacencies)} has {len(ids)} domain ids: "
            f"{'; '.join(parts)}; give every router's endpoint on a domain the same domain id",
            tuple(sorted(set().union(*routers_by_id.values())))))
    return found
