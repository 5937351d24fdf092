"""Lowest-cost paths between domains over the topology map, and the questions portals ask.

The graph: routers and domains are nodes. A router's endpoint portal on domain d gives two
edges, router -> d costing the portal's cost and d -> router costing 0; a peer link between
routers R and Q gives R -> Q costing R's peer portal cost (and Q -> R costing Q's), used only
when both routers report the link, so a half-known link carries nothing.

Cost convention: **a portal's cost is paid when data leaves a router through that portal**
(egress). Data from a source in S to a receiver in D pays every egress portal along the way,
including the endpoint portal into D, and nothing for the portal it arrived by. This matches
proxy advertisements: a proxy source's TIR carries the cost it received plus the cost of the
portal it advertises from, so the cost a receiver sees equals the path cost computed here.

One path, the same on every router: for each destination domain D we build an in-tree (every
node's single successor toward D) with Dijkstra over the reversed edges. Paths are ordered by
(total cost, number of edges), then each node takes the successor with the lowest node key
(domains before routers, then by id). Because every path is read off that tree, the path from S
to D, and the part of it from any router on it, are the same whichever router computes it, and a
router's next hop toward D never depends on where the data came from.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

from router.routing.topology import DOMAIN, ROUTER, Adjacency, TopologySnapshot

NodeKey = tuple[int, int]           # (0, domain id) or (1, router node id); the tie-break order


def domain_key(domain_id: int) -> NodeKey:
    return (0, domain_id)


def router_key(node_id: int) -> NodeKey:
    return (1, node_id)


@dataclass(frozen=True)
class PathHop:
    kind: str                       # DOMAIN or ROUTER
    node: int                       # domain id or router node id
    name: str                       # router name, "" for domains
    cost: int                       # cost paid leaving this hop (0 for domains)
    portal: str = ""                # egress portal name, known for our own router only


@dataclass(frozen=True)
class Path:
    source_domain: int
    destination_domain: int
    cost: int
    hops: tuple[PathHop, ...]       # from the source domain to the destination domain

    @property
    def routers(self) -> tuple[PathHop, ...]:
        return tuple(h for h in self.hops if h.kind == ROUTER)

    def describe(self) -> str:
        """One line for routerctl / the path-info page: ``domain 1 -> A [2] -> B [1] -> domain 2 (cost 3)``."""
        parts = []
        for hop in self.hops:
            if hop.kind == DOMAIN:
                parts.append(f"domain {hop.node}")
            else:
                via = f" via {hop.portal}" if hop.portal else ""
                parts.append(f"{hop.name or hex(hop.node)} [{hop.cost}{via}]")
        return " -> ".join(parts) + f" (cost {self.cost}, {len(self.routers)} routers)"


@dataclass(frozen=True)
class _Edge:
    target: NodeKey
    cost: int
    adjacency: Adjacency | None     # the router's portal for router -> x edges, None from a domain


def _build_edges(snapshot: TopologySnapshot) -> dict[NodeKey, list[_Edge]]:
    records = {r.node_id: r for r in snapshot.records}
    edges: dict[NodeKey, list[_Edge]] = {}
    for record in snapshot.records:
        chosen: dict[NodeKey, Adjacency] = {}
        for adjacency in record.adjacencies:
            if adjacency.kind == DOMAIN:
                target = domain_key(adjacency.neighbor)
            else:
                peer = records.get(adjacency.neighbor)
                if peer is None or not any(a.kind == ROUTER and a.neighbor == record.node_id
                                           for a in peer.adjacencies):
                    continue
                target = router_key(adjacency.neighbor)
            # Duplicates (a forbidden topology) still give one deterministic edge: the cheapest.
            best = chosen.get(target)
            if best is None or (adjacency.cost, adjacency.portal) < (best.cost, best.portal):
                chosen[target] = adjacency
        source = router_key(record.node_id)
        for target, adjacency in sorted(chosen.items()):
            edges.setdefault(source, []).append(_Edge(target, adjacency.cost, adjacency))
            if target[0] == 0:
                edges.setdefault(target, []).append(_Edge(source, 0, None))
    return edges


@dataclass(frozen=True)
class _TreeEntry:
    cost: int
    hops: int
    successor: NodeKey | None       # None at the destination itself
    edge: _Edge | None              # the edge to the successor


def _in_tree(edges: dict[NodeKey, list[_Edge]], destination: NodeKey) -> dict[NodeKey, _TreeEntry]:
    """Every node's best (cost, hops, lowest successor key) route to ``destination``."""
    reverse: dict[NodeKey, list[tuple[NodeKey, _Edge]]] = {}
    for source, out in edges.items():
        for edge in out:
            reverse.setdefault(edge.target, []).append((source, edge))
    tree = {destination: _TreeEntry(0, 0, None, None)}
    done: set[NodeKey] = set()
    heap = [(0, 0, destination)]
    while heap:
        cost, hops, node = heapq.heappop(heap)
        if node in done:
            continue
        done.add(node)
        for source, edge in reverse.get(node, ()):
            if source in done:
                continue
            candidate = (cost + edge.cost, hops + 1)
            current = tree.get(source)
            # Successors of equal (cost, hops) are all settled before `source` is (their hops are
            # smaller), so this comparison sees every tie and keeps the lowest key.
            if current is None or candidate < (current.cost, current.hops) or (
                    candidate == (current.cost, current.hops) and node < current.successor):
                tree[source] = _TreeEntry(candidate[0], candidate[1], node, edge)
                heapq.heappush(heap, (candidate[0], candidate[1], source))
    return tree


class Routes:
    """Paths over one snapshot of the map; build a new one after each recalculation."""

    def __init__(self, snapshot: TopologySnapshot):
        self.snapshot = snapshot
        self._names = {r.node_id: r.name for r in snapshot.records}
        self._edges = _build_edges(snapshot)
        self.domains = tuple(sorted(node for kind, node in self._edges if kind == 0))
        self._trees: dict[int, dict[NodeKey, _TreeEntry]] = {}
        self._chains: dict[tuple[int, int], tuple[NodeKey, ...] | None] = {}

    def tree(self, destination: int) -> dict[NodeKey, _TreeEntry]:
        tree = self._trees.get(destination)
        if tree is None:
            tree = self._trees[destination] = _in_tree(self._edges, domain_key(destination))
        return tree

    def chain(self, source: int, destination: int) -> tuple[NodeKey, ...] | None:
        """Node keys from ``source`` to ``destination`` on the chosen path, None if unreachable."""
        key = (source, destination)
        if key not in self._chains:
            tree = self.tree(destination)
            node: NodeKey | None = domain_key(source)
            if node not in tree or domain_key(destination) not in self._edges:
                self._chains[key] = None
            else:
                nodes = []
                while node is not None:
                    nodes.append(node)
                    node = tree[node].successor
                self._chains[key] = tuple(nodes)
        return self._chains[key]

    def path(self, source: int, destination: int) -> Path | None:
        nodes = self.chain(source, destination)
        if nodes is None:
            return None
        tree = self.tree(destination)
        hops = []
        for node in nodes:
            edge = tree[node].edge
            if node[0] == 0:
                hops.append(PathHop(DOMAIN, node[1], "", 0))
            else:
                hops.append(PathHop(ROUTER, node[1], self._names.get(node[1], ""), edge.cost,
                                    edge.adjacency.portal))
        return Path(source, destination, tree[nodes[0]].cost, tuple(hops))

    def all_paths(self) -> list[Path]:
        """Every reachable ordered pair of distinct domains (for routerctl topology)."""
        found = []
        for source in self.domains:
            for destination in self.domains:
                if source != destination and (path := self.path(source, destination)) is not None:
                    found.append(path)
        return found

    def for_router(self, node_id: int) -> "RouterRoutes":
        return RouterRoutes(self, node_id)


class RouterRoutes:
    """The questions one router's portals ask, answered with its portal names.

    Portal names are local knowledge (they do not travel in route-info), so ask for the router
    whose map this is (``routes.for_router(topology.node_id)``); for any other router the
    portal-name answers are "" and next_hop() still gives the adjacency (neighbor and cost).
    """

    def __init__(self, routes: Routes, node_id: int):
        self.routes = routes
        self.node_id = node_id
        self._key = router_key(node_id)

    def next_hop(self, destination: int) -> Adjacency | None:
        """Our adjacency (portal) on the chosen path toward ``destination``, None if none."""
        entry = self.routes.tree(destination).get(self._key)
        return entry.edge.adjacency if entry is not None and entry.edge is not None else None

    def next_hop_portal(self, destination: int) -> str | None:
        adjacency = self.next_hop(destination)
        return adjacency.portal if adjacency is not None else None

    def next_hop_avoiding(self, avoided: int, destination: int) -> str | None:
        """Our portal on the lowest-cost path from us toward ``destination`` that does not cross
        domain ``avoided`` (a hotlink endpoint's domain: what came from there goes on from this
        router, never back through it, though the cheapest way from here may be), None if none."""
        avoided_key = domain_key(avoided)
        edges = {node: [edge for edge in out if edge.target != avoided_key]
                 for node, out in self.routes._edges.items() if node != avoided_key}
        entry = _in_tree(edges, domain_key(destination)).get(self._key)
        return entry.edge.adjacency.portal if entry is not None and entry.edge is not None else None

    def on_path(self, source: int, destination: int) -> bool:
        nodes = self.routes.chain(source, destination)
        return nodes is not None and self._key in nodes

    def egress_portal(self, source: int, destination: int) -> str | None:
        """The portal the S -> D path leaves this router by (None: the path does not cross us)."""
        return self.next_hop_portal(destination) if self.on_path(source, destination) else None

    def ingress_portal(self, source: int, destination: int) -> str | None:
        """The portal the S -> D path enters this router by."""
        nodes = self.routes.chain(source, destination)
        if nodes is None or self._key not in nodes:
            return None
        previous = nodes[nodes.index(self._key) - 1]
        return self._portal_toward(previous)

    def should_forward(self, source: int, destination: int, portal: str) -> bool:
        """Does a stream from domain ``source`` leave this router by ``portal`` toward ``destination``?"""
        return self.egress_portal(source, destination) == portal

    def interest_portals(self, destination: int) -> list[str]:
        """Portals through which chosen paths toward ``destination`` enter this router.

        Interest of ``destination``'s receivers goes out of these portals (and proxy receivers for
        them live there); data for them leaves by next_hop_portal(destination).
        """
        portals = {self._portal_toward(node) for node, entry in self.routes.tree(destination).items()
                   if entry.successor == self._key}
        return sorted(p for p in portals if p is not None)

    def _portal_toward(self, node: NodeKey) -> str | None:
        for edge in self.routes._edges.get(self._key, ()):
            if edge.target == node:
                return edge.adjacency.portal
        return None
