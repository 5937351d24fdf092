from __future__ import annotations

from router.admin.commands.base import Command
from router.monitor import views


class Recalculate(Command):
    """Recalculate the routes now (the DRO's FORCED RECALC), without waiting for the backoff.

    Usage: routerctl recalculate

    The router computes its paths again from the topology map as it stands, with any changes
    still pending, as the DRO does when its web monitor forces a recalculation; the log says
    "route recalculation triggered: FORCED RECALC (routerctl)". Other routers are not asked to:
    run it on each whose routes you doubt. `routerctl topology` shows the result.

    Reply data: {"recalculations": INT, "map_version": INT, "signature": HEX, "converged": BOOL,
                 "last_changes": [STR]}
    """

    def execute(self, supervisor, props: dict) -> dict:
        supervisor.routing.force("routerctl")
        described = views.topology(supervisor)
        return {key: described[key] for key in ("recalculations", "map_version", "signature", "converged",
                                                "last_changes")}

    def render(self, data: dict) -> str:
        return (f"routes recalculated (recalculation {data['recalculations']}, route table version "
                f"{data['map_version']}, signature {data['signature']}, "
                f"{'converged' if data['converged'] else 'not converged'}): {', '.join(data['last_changes'])}")
