from __future__ import annotations

from router.admin.commands.base import Command
from router.admin.protocol import AdminError, Errno


class Reload(Command):
    """Re-read the configuration file; restart only the portals whose configuration changed.

    Usage: routerctl reload

    The same code path as SIGHUP and systemd's ExecReload. A portal whose cost alone changed
    re-advertises its proxies without a restart. An invalid file changes nothing: the reply is
    errno 6 (CONFIG_INVALID) with the validator's message, and the old configuration keeps running.

    `<daemon>` settings are set up when the router starts: edited ones are listed in
    daemon_pending and take effect at the next start (the running ones stay in force meanwhile).

    Reply data: {"added": [PORTAL], "removed": [PORTAL], "changed": [PORTAL], "kept": [PORTAL],
                 "cost_only": [PORTAL], "daemon_pending": [ELEMENT]}
                (cost_only: changed portals that were not restarted; daemon_pending: <daemon>
                 child elements edited, e.g. "web-monitor", applied at the next restart)
    """

    def execute(self, supervisor, props: dict) -> dict:
        result = dict(supervisor.reload())
        if not result.pop("ok", False):
            raise AdminError(Errno.CONFIG_INVALID, result.get("error") or "configuration rejected")
        return result

    def render(self, data: dict) -> str:
        lines = []
        for key in ("added", "removed", "changed", "kept"):
            names = data.get(key) or []
            lines.append(f"{key:8} {', '.join(names) if names else '-'}")
        if data.get("cost_only"):
            lines.append(f"(cost change only, not restarted: {', '.join(data['cost_only'])})")
        if data.get("daemon_pending"):
            lines.append(f"<daemon> changes take effect when the router restarts: {', '.join(data['daemon_pending'])}")
        return "\n".join(lines)
