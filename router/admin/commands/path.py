from __future__ import annotations

from router.admin import tables
from router.admin.commands.base import Argument, Command
from router.admin.protocol import AdminError, Errno
from router.monitor.views import path_info


class Path(Command):
    """Show the path data takes from one domain to another: every router on it and its cost.

    Usage: routerctl path FROM TO

    FROM and TO are domain ids. The path is the one every router computes from the same map
    (routerctl topology shows whether they all have it); each router hop names the cost paid
    leaving it, and, for this router, the portal it leaves by. A domain id that is not a number,
    not in the map, or not reachable from FROM is errno 4 (INVALID_PROPERTY); the reason says which.

    Reply data: {"from": INT, "to": INT, "cost": INT, "routers": INT, "text": STR,
                 "hops": [{"kind": "domain"|"router", "node": INT, "name": STR, "cost": INT, "portal": STR}]}
    """

    arguments = (Argument("from", "source domain id", required=True),
                 Argument("to", "destination domain id", required=True))

    def execute(self, supervisor, props: dict) -> dict:
        found = path_info(supervisor, props["from"], props["to"])
        if found["error"] is not None:
            raise AdminError(Errno.INVALID_PROPERTY, f"no path from {props['from']} to {props['to']}: "
                                                     f"{found['error']}")
        return found["path"]

    def render(self, data: dict) -> str:
        rows = []
        for number, hop in enumerate(data["hops"]):
            if hop["kind"] == "domain":
                rows.append([number, f"domain {hop['node']}", "-", "-", "-"])
            else:
                rows.append([number, f"router {hop['name'] or '?'}", f"{hop['node']:#x}", hop["cost"],
                             hop["portal"] or "-"])
        table = tables.table(["HOP", "NODE", "NODE ID", "COST", "LEAVES BY"], rows, right={0, 3})
        return (f"path from domain {data['from']} to domain {data['to']}: total cost {data['cost']}, "
                f"{data['routers']} router(s)\n{table}\n{data['text']}")
