from __future__ import annotations

from router.admin import tables
from router.admin.commands.base import Command


class Portals(Command):
    """List the configured portals: kind, adjacent domain, cost, queue limit, worker state.

    Usage: routerctl portals

    Reply data: {"portals": [{"name", "kind", "domain_id", "cost", "max_queue", "lbm_config",
                              "acl", "state", "pid"}]}
    `domain_id` is null for peer portals; `acl` says whether the portal filters with an ACL.
    """

    def execute(self, supervisor, props: dict) -> dict:
        states = {p["name"]: p for p in supervisor.status()["portals"]}
        portals = []
        for name, worker in supervisor.workers.items():
            config = worker.config
            portals.append({
                "name": name, "kind": config.kind, "domain_id": getattr(config, "domain_id", None),
                "cost": config.cost, "max_queue": config.max_queue,
                "lbm_config": str(config.lbm_config) if config.lbm_config else None,
                "acl": config.acl is not None,
                "state": states[name]["state"], "pid": states[name]["pid"],
            })
        return {"portals": portals}

    def render(self, data: dict) -> str:
        rows = [[p["name"], p["kind"], p["domain_id"], p["cost"], p["max_queue"], "yes" if p["acl"] else "no",
                 p["state"], p["pid"], p["lbm_config"] or "-"] for p in data["portals"]]
        return tables.table(["PORTAL", "KIND", "DOMAIN", "COST", "MAX-QUEUE", "ACL", "STATE", "PID", "LBM-CONFIG"],
                            rows, right={2, 3, 4, 7})
