from __future__ import annotations

from router.admin.commands.base import Command


class Stop(Command):
    """Stop the router cleanly: proxies send final advertisements, workers exit, segments go.

    Usage: routerctl stop

    The reply is sent before the router stops; it then behaves as after SIGTERM and exits 0.
    Under systemd prefer `systemctl stop`, which also keeps the unit from being restarted.

    Reply data: {"stopping": true, "pid": INT}
    """

    def execute(self, supervisor, props: dict) -> dict:
        supervisor.stop()
        return {"stopping": True, "pid": supervisor.pid}

    def render(self, data: dict) -> str:
        return f"router (pid {data['pid']}) is stopping"
