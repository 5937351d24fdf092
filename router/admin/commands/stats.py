from __future__ import annotations

from router.admin import tables
from router.admin.commands.base import Argument, Command, portal_names
from router.monitor.views import identity, portal_stats


class Stats(Command):
    """Show each portal's counters under the DRO's statistic names (spec/dro.md §3.2).

    Usage: routerctl stats [PORTAL]

    Counters are totals since the router started; they survive worker restarts. Endpoint portals
    show the endpoint counters, peer portals the peer counters. The web monitor and /metrics
    show the same figures.

    Reply data: {"router": NAME, "node_id": INT, "version": STR,
                 "portals": {PORTAL: {"kind": KIND, "counters": {COUNTER: INT}}}}
    """

    arguments = (Argument("portal", "only this portal"),)

    def execute(self, supervisor, props: dict) -> dict:
        names = portal_names(supervisor, props.get("portal"))
        stats = portal_stats(supervisor, names)
        portals = {name: {"kind": supervisor.workers[name].config.kind, "counters": stats[name]} for name in names}
        return {**identity(supervisor), "portals": portals}

    def render(self, data: dict) -> str:
        names = list(data["portals"])
        if not names:
            return "no portals"
        counters = list(data["portals"][names[0]]["counters"])
        for name in names[1:]:
            counters += [c for c in data["portals"][name]["counters"] if c not in counters]
        rows = [[counter] + [data["portals"][name]["counters"].get(counter) for name in names]
                for counter in counters]
        return tables.table(["COUNTER"] + names, rows, right=set(range(1, len(names) + 1)))
