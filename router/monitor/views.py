"""What the admin socket and the web monitor show, read from the supervisor in one place.

`routerctl stats --json`, the web monitor's pages and /metrics must agree to the unit, so they all
take their figures from these functions. Everything here runs on the supervisor's loop and only
reads: the supervisor's state, its routing map, the bus's interest table, the portals'
shared-memory counters.
"""
from __future__ import annotations

import re
from importlib import metadata

from router.ipc import bus_messages as bm
from router.monitor.memory import process_memory
from router.monitor.portal_statistics import counters_of
from router.routing.topology import DOMAIN, ROUTER

# Each kind's counters as its portal page shows them (router/monitor/portal_statistics.py); the
# workers' pids and clock readings are not among them (status reports pids and heartbeat ages).
COUNTERS_OF_KIND = {kind: counters_of(kind) for kind in ("endpoint", "peer")}
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


# The UM options of an endpoint's two contexts, a page per scope as the DRO links them from its
# portal page: (title, which context, UM scope). An endpoint's proxy sources belong to its source
# context, its proxy receivers and wildcard receivers to its receive context (config/portal_um.py).
UM_OPTION_PAGES = {
    "source-context": ("LBM source context configuration", "source_um", "context"),
    "receive-context": ("LBM receive context configuration", "receiver_um", "context"),
    "source": ("LBM source configuration", "source_um", "source"),
    "receiver": ("LBM receiver configuration", "receiver_um", "receiver"),
    "wildcard-receiver": ("LBM wildcard receiver configuration", "receiver_um", "wildcard_receiver"),
}


def portal_options(supervisor, name: str, which: str) -> dict | None:
    """Every UM option of one scope of an endpoint's context, with its value, default and the
    file and line that set it; None if there is no such portal, page, or the portal is no endpoint."""
    worker = supervisor.workers.get(name)
    if worker is None or which not in UM_OPTION_PAGES or worker.config.kind != "endpoint":
        return None
    title, context, scope = UM_OPTION_PAGES[which]
    options = getattr(worker.config, context)
    return {"portal": name, "page": which, "title": title, "scope": scope,
            "options": options.dump(scope) if options is not None else []}


def memory(supervisor, status: dict | None = None) -> dict:
    """The memory of the supervisor and of each worker process (router/monitor/memory.py), with
    the portals each worker runs; a process that is gone (a worker restarting) is left out.
    `status`: supervisor.status(), when the caller has it already."""
    processes = []
    found = process_memory(supervisor.pid)
    if found is not None:
        processes.append({"process": "supervisor", "portals": [], "pid": supervisor.pid, **found})
    seen = set()
    for portal in (status or supervisor.status())["portals"]:
        pid = portal["pid"]
        if pid is None or pid in seen:
            continue
        seen.add(pid)
        found = process_memory(pid)
        if found is not None:
            processes.append({"process": "worker", "portals": portal["worker_portals"], "pid": pid, **found})
    return {"router": supervisor.name, "processes": processes,
            "total_pss_bytes": sum(p["pss_bytes"] for p in processes),
            "total_private_bytes": sum(p["private_bytes"] for p in processes)}


def statistics(supervisor) -> dict | None:
    """The Parquet sink's state (ParquetSink.status), None when `<monitor>` does not select it."""
    from router.monitor.parquet_sink import ParquetSink
    sink = next((e for e in supervisor.extensions if isinstance(e, ParquetSink)), None)
    return sink.status() if sink is not None else None


def interest_map(supervisor) -> dict[str, dict[str, list[str]]]:
    """The router's topic and pattern maps: symbol -> the portals whose domains want it."""
    maps: dict[str, dict[str, list[str]]] = {name: {} for name in INTEREST_KINDS.values()}
    for key in list(supervisor.hub.interest):        # (portal, [domain,] kind, symbol)
        portal, kind, symbol = key[0], key[-2], key[-1]
        maps[INTEREST_KINDS.get(kind, "topics")].setdefault(symbol, set()).add(portal)
    return {kind: {symbol: sorted(portals) for symbol, portals in sorted(symbols.items())}
            for kind, symbols in maps.items()}


def map_sizes(supervisor) -> dict[str, int]:
    sizes = {name: 0 for name in INTEREST_KINDS.values()}
    seen = {(key[-2], key[-1]) for key in list(supervisor.hub.interest)}
    for kind, _ in seen:
        sizes[INTEREST_KINDS.get(kind, "topics")] += 1
    return sizes


def unknown_fragments(supervisor, stats: dict[str, dict[str, int]]) -> dict[str, int]:
    """Fragments that arrived for a source the router did not know, over all portals since the
    router started, those a reload removed included: a total that went back when a portal went
    would read as a restart to Prometheus (rate() would count it all again)."""
    removed = supervisor.removed_portals_counters
    totals = {}
    for key, counter in (("fragments", "transport_topic_fragments_rcvd_unknown"),
                         ("bytes", "transport_topic_fragment_bytes_rcvd_unknown")):
        totals[key] = removed.get(counter) + sum(c.get(counter, 0) for c in stats.values())
    return totals


def topology(supervisor) -> dict:
    """This router as a node of the routing graph, and the graph as this router's map has it.

    `portals` are the configured portals and what each is adjacent to; other routers (learnt
    over peer links) go in `other_routers` with the same shape, so a client that walks the graph
    does not change when peers arrive. The rest is the routing map: its signature (routers that
    announce ours see the same map: `converged`), forbidden topologies, the paths between all
    domains, and when and why they were last recalculated.
    """
    routing = getattr(supervisor, "routing", None)
    if routing is None:
        return _configured_topology(supervisor)
    described = routing.describe()
    routers = {r["node_id"]: r for r in described["routers"]}
    local = routers[described["node_id"]]
    names = {node_id: r["name"] for node_id, r in routers.items()}
    # What the local map says about each portal: its own adjacency, gone while its link is down.
    adjacency_of = {a["portal"]: a for a in local["adjacencies"] if a["portal"]}
    portals = _configured_portals(supervisor, adjacency_of, names)
    others = [_other_router(record, names) for node_id, record in routers.items() if not record["local"]]
    return {**identity(supervisor), "portals": portals, "domains": described["domains"], "other_routers": others,
            "router_count": len(routers), "domain_count": len(described["domains"]),
            "self_version": local["version"], "signature": described["signature"],
            "announced_signature": local["signature"],
            "converged": all(r["signature"] == local["signature"] for r in others),
            "map_version": described["table_version"], "forbidden": described["forbidden"],
            "recalculations": described["recalculations"],
            "last_recalculation_age_s": described["last_recalculation_age_s"],
            "last_recalculation_ms": described["last_recalculation_ms"],
            "last_changes": described["last_changes"], "pending_changes": described["pending_changes"],
            "paths": described["paths"], "routing_counters": described["counters"]}


def adjacent_text(portal: dict, names: dict[int, str]) -> str:
    """What one portal (in topology()'s shape) leads to: a domain, a router, or nothing while its link is down."""
    if "adjacent_domain_id" in portal:
        return f"domain {portal['adjacent_domain_id']}"
    node_id = portal.get("adjacent_node_id")
    if node_id is None:
        return "link down"
    return f"router {portal.get('adjacent_router') or names.get(node_id, '?')} ({node_id:#x})"


def adjacency_summary(portals: list[dict], names: dict[int, str]) -> str:
    """A router's adjacencies on one line, ``D1[1] D2[3] R:other[2]``: domain or router, [cost].

    `portals` in the shape topology() gives them; routerctl topology and the topology page both
    print this, so they read the same."""
    parts = []
    for portal in portals:
        if "adjacent_domain_id" in portal:
            parts.append(f"D{portal['adjacent_domain_id']}[{portal['cost']}]")
        elif portal.get("adjacent_node_id") is not None:
            node_id = portal["adjacent_node_id"]
            name = portal.get("adjacent_router") or names.get(node_id) or f"{node_id:#x}"
            parts.append(f"R:{name}[{portal['cost']}]")
    return " ".join(parts) or "-"


def forbidden_line(message: str) -> str:
    """A forbidden-topology message as operators should not miss it (the map words it in lower case)."""
    prefix = "forbidden topology: "
    return "FORBIDDEN TOPOLOGY: " + (message[len(prefix):] if message.lower().startswith(prefix) else message)


def _other_router(record: dict, names: dict[int, str]) -> dict:
    """A router from the map in this router's own shape; its portal names do not travel, so none."""
    portals = []
    for adjacency in record["adjacencies"]:
        portal = {"name": adjacency["portal"] or None, "kind": "endpoint" if adjacency["kind"] == DOMAIN else "peer",
                  "cost": adjacency["cost"]}
        if adjacency["kind"] == DOMAIN:
            portal["adjacent_domain_id"] = adjacency["neighbor"]
        else:
            portal["adjacent_node_id"] = adjacency["neighbor"]
            portal["adjacent_router"] = names.get(adjacency["neighbor"])
        portals.append(portal)
    return {"router": record["name"], "node_id": record["node_id"], "version": record["version"],
            "portals": portals, "last_heard_age_ms": record["last_heard_age_ms"], "signature": record["signature"]}


def _configured_portals(supervisor, adjacency_of: dict[str, dict], names: dict[int, str]) -> list[dict]:
    """Every configured portal; a peer portal names the router its link reaches (None while down)."""
    portals = []
    for name, worker in supervisor.workers.items():
        config = worker.config
        portal = {"name": name, "kind": config.kind, "cost": config.cost}
        if config.kind == "endpoint":
            portal["adjacent_domain_id"] = config.domain_id
        else:
            adjacency = adjacency_of.get(name)
            up = adjacency is not None and adjacency["kind"] == ROUTER
            portal["adjacent_node_id"] = adjacency["neighbor"] if up else None
            portal["adjacent_router"] = names.get(adjacency["neighbor"]) if up else None
        portals.append(portal)
    return portals


def _configured_topology(supervisor) -> dict:
    """The reply's shape for a router that keeps no routing map: its configured portals alone."""
    portals = _configured_portals(supervisor, {}, {})
    domains = sorted({p["adjacent_domain_id"] for p in portals if "adjacent_domain_id" in p})
    return {**identity(supervisor), "portals": portals, "domains": domains, "other_routers": [],
            "router_count": 1, "domain_count": len(domains),
            "self_version": None, "signature": None, "announced_signature": None, "converged": True,
            "map_version": None, "forbidden": [], "recalculations": 0, "last_recalculation_age_s": None,
            "last_recalculation_ms": None,
            "last_changes": [], "pending_changes": [], "paths": [], "routing_counters": {}}


def path_info(supervisor, source, destination) -> dict:
    """The one path data takes from domain `source` to domain `destination` (ids, as ints or text).

    `error` says why there is none: an id that is not a number, a domain the map does not know
    (and which it does know), or two known domains with no path between them.
    """
    reply = {"from": _domain_id(source), "to": _domain_id(destination), "path": None, "error": None}
    for label, value in (("from", source), ("to", destination)):
        if reply[label] is None:
            reply["from"], reply["to"] = source, destination
            reply["error"] = f"{label}: {str(value)[:64]!r} is not a domain id"
            return reply
    routing = getattr(supervisor, "routing", None)
    if routing is None:
        reply["error"] = f"router {supervisor.name} keeps no routing map"
        return reply
    known = list(routing.routes.domains)
    unknown = [d for d in (reply["from"], reply["to"]) if d not in known]
    if unknown:
        unknown = list(dict.fromkeys(unknown))
        which = " and ".join(f"domain {d}" for d in unknown)
        listed = ", ".join(map(str, known)) or "none"
        reply["error"] = (f"{which} {'is' if len(unknown) == 1 else 'are'} not in the topology map "
                          f"(known domains: {listed})")
        return reply
    reply["path"] = routing.path(reply["from"], reply["to"])
    if reply["path"] is None:
        reply["error"] = (f"domain {reply['to']} is unreachable from domain {reply['from']}: "
                          f"no chain of routers links them (see routerctl topology)")
    return reply


def _domain_id(value) -> int | None:
    """A domain id (u32, as route-info carries it) from an int or decimal text; None if it is not one."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"[0-9]{1,10}", value.strip()):
        number = int(value.strip())
    else:
        return None
    return number if 0 <= number <= 0xFFFF_FFFF else None
