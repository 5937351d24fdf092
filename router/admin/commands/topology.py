from __future__ import annotations

from router.admin import tables
from router.admin.commands.base import Command
from router.monitor import views


class Topology(Command):
    """Show this router as a node of the routing graph: its portals and what each is adjacent to.

    Usage: routerctl topology

    Reply data:
      {"router": NAME, "node_id": INT, "version": STR,
       "portals": [{"name", "kind", "cost", "adjacent_domain_id" (endpoint) | "adjacent_node_id" (peer)}],
       "domains": [DOMAIN_ID], "other_routers": [{"router", "node_id", "version", "portals": [...]}],
       "router_count": INT, "domain_count": INT}
    Other routers, learnt over peer links, have the same shape as this one; fields are only added.
    """

    def execute(self, supervisor, props: dict) -> dict:
        return views.topology(supervisor)

    def render(self, data: dict) -> str:
        head = f"router {data['router']} (node id {data['node_id']:#018x}, version {data['version']})"
        rows = [[p["name"], p["kind"], p.get("adjacent_domain_id", p.get("adjacent_node_id")), p["cost"]]
                for p in data["portals"]]
        lines = [head, tables.table(["PORTAL", "KIND", "ADJACENT", "COST"], rows, right={2, 3})]
        for other in data["other_routers"]:
            lines.append(f"router {other['router']} (node id {other['node_id']:#018x})")
        lines.append(f"{data['router_count']} router(s), {data['domain_count']} domain(s)")
        return "\n".join(lines)
