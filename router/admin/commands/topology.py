from __future__ import annotations

from router.admin import tables
from router.admin.commands.base import Command
from router.monitor import views


class Topology(Command):
    """Show the routing graph: this router's portals, every router and its adjacencies, the paths.

    Usage: routerctl topology

    Forbidden topologies (two peer links between two routers, two endpoint portals of one router
    on one domain, one domain under two domain ids, two routers with one node id) are listed first:
    paths are still computed, but the configuration needs fixing. `converged` says whether every
    router announces the same topology signature as this one, i.e. whether all of them see the
    same map.

    Reply data (fields are only ever added):
      {"router": NAME, "node_id": INT, "version": STR,
       "portals": [{"name", "kind", "cost", "adjacent_domain_id" (endpoint)
                    | "adjacent_node_id", "adjacent_router" (peer; null while its link is down)}],
       "domains": [DOMAIN_ID],
       "other_routers": [{"router", "node_id", "version", "last_heard_age_ms", "signature",
                          "portals": [...same shape, "name" null: portal names do not travel]}],
       "router_count": INT, "domain_count": INT,
       "self_version": INT,            this router's version in the map (changes with its adjacencies)
       "signature": HEX,               64-bit signature of this router's map
       "announced_signature": HEX,     its 32-bit form, what routers announce and `converged` compares
       "converged": BOOL,
       "map_version": INT,             route table version (one per recalculation)
       "forbidden": [{"kind", "message", "routers": [NODE_ID]}],
       "recalculations": INT, "last_recalculation_age_s": FLOAT|null,
       "last_recalculation_ms": FLOAT|null,     how long the last recalculation took
       "last_changes": [STR], "pending_changes": [STR],   (triggers, e.g. "LINK CAME UP (portal P1)")
       "paths": [{"from", "to", "cost", "routers", "text",
                  "hops": [{"kind", "node", "name", "cost", "portal"}]}],
       "routing_counters": {COUNTER: INT}}
    `signature`, `self_version` and `map_version` are null on a router that keeps no routing map.
    """

    def execute(self, supervisor, props: dict) -> dict:
        return views.topology(supervisor)

    def render(self, data: dict) -> str:
        names = {data["node_id"]: data["router"]}
        names.update({other["node_id"]: other["router"] for other in data["other_routers"]})
        blocks = []
        # Forbidden topologies first: they are what an operator must act on.
        for item in data.get("forbidden", []):
            blocks.append(views.forbidden_line(item["message"]))
        signature = data.get("signature") or "-"
        head = (f"router {data['router']} (node id {data['node_id']:#018x}, version {data['version']}, "
                f"topology signature {signature})")
        rows = [[p["name"], p["kind"], views.adjacent_text(p, names), p["cost"]] for p in data["portals"]]
        blocks.append(head + "\n" + tables.table(["PORTAL", "KIND", "ADJACENT", "COST"], rows, right={3}))
        blocks.append("routers\n" + tables.table(
            ["NAME", "NODE ID", "VERSION", "SIGNATURE", "HEARD", "ADJACENCIES"],
            [_router_row(data, names)] + [_other_row(other, names) for other in data["other_routers"]]))
        if data.get("paths"):
            rows = [[path["from"], path["to"], path["cost"], path["text"]] for path in data["paths"]]
            blocks.append("paths\n" + tables.table(["FROM", "TO", "COST", "ROUTE"], rows, right={0, 1, 2}))
        else:
            blocks.append("paths: none")
        summary = [f"{data['router_count']} router(s), {data['domain_count']} domain(s)",
                   f"converged: {'yes' if data.get('converged', True) else 'no'}"]
        if data.get("map_version") is not None:
            age = data.get("last_recalculation_age_s")
            took = data.get("last_recalculation_ms")
            summary.append(f"route table version {data['map_version']}, {data.get('recalculations', 0)} "
                           f"recalculation(s), last {'-' if age is None else tables.duration(age) + ' ago'}"
                           + ("" if took is None else f" (took {took:.1f} ms)"))
        if data.get("pending_changes"):
            summary.append(f"pending changes: {', '.join(data['pending_changes'])}")
        blocks.append("\n".join(summary))
        return "\n\n".join(blocks)


def _router_row(data: dict, names: dict[int, str]) -> list:
    return [data["router"] + " (this router)", f"{data['node_id']:#x}", data.get("self_version"),
            data.get("announced_signature"), "-", views.adjacency_summary(data["portals"], names)]


def _other_row(other: dict, names: dict[int, str]) -> list:
    age = other.get("last_heard_age_ms")
    return [other["router"], f"{other['node_id']:#x}", other["version"], other.get("signature"),
            "-" if age is None else f"{age / 1000:.1f}s ago", views.adjacency_summary(other["portals"], names)]
