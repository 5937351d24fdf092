"""What the admin socket and the web monitor show, read from the supervisor in one place.

`routerctl stats --json`, the web monitor's pages and /metrics must agree to the unit, so they all
take their figures from these functions. Everything here runs on the supervisor's loop and only
reads: the supervisor's state, the bus's interest table, the portals' shared-memory counters.
"""
from __future__ import annotations

from importlib import metadata

from router.ipc import bus_messages as bm
from router.monitor.counters import ENDPOINT_COUNTERS, PEER_COUNTERS

# Plumbing, not statistics: monotonic-clock readings and pids mean nothing outside the host's
# current boot (status reports pids and heartbeat ages properly).
INTERNAL_COUNTERS = frozenset({"heartbeat_ns", "worker_pid", "worker_started_ns"})
COUNTERS_OF_KIND = {
    "endpoint": tuple(n for n in ENDPOINT_COUNTERS if n not in INTERNAL_COUNTERS),
    "peer": tuple(n for n in PEER_COUNTERS if n not in INTERNAL_COUNTERS),
}
INTEREST_KINDS = {bm.INTEREST_TOPIC: "topics", bm.INTEREST_PCRE: "pcre_patterns", bm.INTEREST_REGEX: "regex_patterns"}


def version() -> str:
    try:
        return metadata.version("umrouter")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def identity(supervisor) -> dict:
    return {"router": supervisor.name, "node_id": supervisor.node_id, "version": version()}


def portal_kind(supervisor, name: str) -> str:
    return supervisor.workers[name].config.kind


def portal_stats(supervisor, names: list[str] | None = None) -> dict[str, dict[str, int]]:
    """portal -> {counter: value}, the counters that apply to the portal's kind, in DRO order."""
    snapshots = supervisor.portal_counters()
    result = {}
    for name in names if names is not None else list(snapshots):
        counters = snapshots[name]
        result[name] = {key: counters[key] for key in COUNTERS_OF_KIND.get(portal_kind(supervisor, name), ())}
    return result


def interest_map(supervisor) -> dict[str, dict[str, list[str]]]:
    """The router's topic and pattern maps: symbol -> the portals whose domains want it."""
    maps: dict[str, dict[str, list[str]]] = {name: {} for name in INTEREST_KINDS.values()}
    for (portal, kind, symbol) in list(supervisor.hub.interest):
        maps[INTEREST_KINDS.get(kind, "topics")].setdefault(symbol, []).append(portal)
    return {kind: {symbol: sorted(portals) for symbol, portals in sorted(symbols.items())}
            for kind, symbols in maps.items()}


def map_sizes(supervisor) -> dict[str, int]:
    sizes = {name: 0 for name in INTEREST_KINDS.values()}
    seen = {(kind, symbol) for (_, kind, symbol) in list(supervisor.hub.interest)}
    for kind, _ in seen:
        sizes[INTEREST_KINDS.get(kind, "topics")] += 1
    return sizes


def unknown_fragments(stats: dict[str, dict[str, int]]) -> dict[str, int]:
    """Fragments that arrived for a source the router did not know, over all portals."""
    return {"fragments": sum(c.get("transport_topic_fragments_rcvd_unknown", 0) for c in stats.values()),
            "bytes": sum(c.get("transport_topic_fragment_bytes_rcvd_unknown", 0) for c in stats.values())}


def topology(supervisor) -> dict:
    """This router as a node of the routing graph: its portals and what each is adjacent to.

    Other routers (learnt over peer links) go in `other_routers` with the same shape as this
    one, so a client that walks the graph does not change when peers arrive.
    """
    portals = []
    for name, worker in supervisor.workers.items():
        config = worker.config
        portal = {"name": name, "kind": config.kind, "cost": config.cost}
        if config.kind == "endpoint":
            portal["adjacent_domain_id"] = config.domain_id
        else:
            portal["adjacent_node_id"] = None          # learnt from the peer's route information
        portals.append(portal)
    domains = sorted({p["adjacent_domain_id"] for p in portals if "adjacent_domain_id" in p})
    return {**identity(supervisor), "portals": portals, "domains": domains, "other_routers": [],
            "router_count": 1, "domain_count": len(domains)}
