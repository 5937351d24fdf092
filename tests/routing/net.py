"""A small language for test topologies: routers, endpoints, peer links; every router's view."""
from __future__ import annotations

import random
from collections import defaultdict

from router.routing.paths import Routes
from router.routing.topology import Adjacency, RouterAnnouncement, Topology


class Net:
    """Routers by name; ``ids`` are node ids (tie-breaking follows them, not the names)."""

    def __init__(self):
        self.ids: dict[str, int] = {}
        self.adjacencies: dict[str, list[Adjacency]] = defaultdict(list)

    def router(self, name: str, node_id: int) -> "Net":
        self.ids[name] = node_id
        self.adjacencies.setdefault(name, [])
        return self

    def endpoint(self, router: str, domain: int, cost: int = 1, identity: str = "", portal: str | None = None,
                 hotlink: int = 0) -> "Net":
        portal = portal or f"{router}.E{domain}"
        self.adjacencies[router].append(Adjacency.domain(domain, cost, portal, identity, hotlink))
        return self

    def peer(self, a: str, b: str, cost_a: int = 1, cost_b: int = 1) -> "Net":
        """A peer link: a's portal toward b costs ``cost_a``, b's toward a ``cost_b``."""
        self.adjacencies[a].append(Adjacency.router(self.ids[b], cost_a, self._peer_portal(a, b)))
        self.adjacencies[b].append(Adjacency.router(self.ids[a], cost_b, self._peer_portal(b, a)))
        return self

    def _peer_portal(self, a: str, b: str) -> str:
        base = f"{a}->{b}"
        taken = {adj.portal for adj in self.adjacencies[a]}
        return base if base not in taken else f"{base}#{len(taken)}"

    def set_cost(self, router: str, portal: str, cost: int) -> "Net":
        self.adjacencies[router] = [Adjacency(a.kind, a.neighbor, cost, a.identity, a.portal, a.identity_label)
                                    if a.portal == portal else a for a in self.adjacencies[router]]
        return self

    def remove_router(self, name: str) -> "Net":
        node_id = self.ids.pop(name)
        del self.adjacencies[name]
        for other in self.adjacencies:
            self.adjacencies[other] = [a for a in self.adjacencies[other]
                                       if not (a.kind == "router" and a.neighbor == node_id)]
        return self

    def cut(self, a: str, b: str) -> "Net":
        """Take the peer link between a and b down (both sides stop reporting it)."""
        self.adjacencies[a] = [x for x in self.adjacencies[a] if not (x.kind == "router" and x.neighbor == self.ids[b])]
        self.adjacencies[b] = [x for x in self.adjacencies[b] if not (x.kind == "router" and x.neighbor == self.ids[a])]
        return self

    def announcement(self, name: str, sqn: int = 1) -> RouterAnnouncement:
        return RouterAnnouncement(self.ids[name], name, 1, sqn, tuple(self.adjacencies[name]), 100)

    def topology(self, local: str, shuffle_seed: int | None = None) -> Topology:
        """``local``'s view after hearing every other router once (optionally in a shuffled order)."""
        rng = random.Random(shuffle_seed)
        topology = Topology(self.ids[local], local)
        own = list(self.adjacencies[local])
        others = [n for n in self.ids if n != local]
        if shuffle_seed is not None:
            rng.shuffle(own)
            rng.shuffle(others)
        topology.set_local_adjacencies(own)
        for name in others:
            # What travels in route-info: no portal names, no identity labels.
            adjacencies = [Adjacency(a.kind, a.neighbor, a.cost, a.identity) for a in self.adjacencies[name]]
            if shuffle_seed is not None:
                rng.shuffle(adjacencies)
            topology.apply(RouterAnnouncement(self.ids[name], name, 1, 1, tuple(adjacencies), 100), 0)
        return topology

    def routes(self, local: str | None = None, shuffle_seed: int | None = None) -> Routes:
        local = local or next(iter(self.ids))
        return Routes(self.topology(local, shuffle_seed).snapshot())


def hop_names(path) -> list[str]:
    """``["D1", "A", "B", "D2"]``: domains as D<id>, routers by name."""
    return [f"D{h.node}" if h.kind == "domain" else h.name for h in path.hops]
