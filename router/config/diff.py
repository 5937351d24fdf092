"""Comparing two configurations portal by portal, so a reload restarts only what changed.

Portals are matched by name. Where a portal was written (`line`, `locations`) is not part of its
equality, so moving a portal in the file or adding a comment changes nothing; its effective UM
options are, so an edited lbm-config or xml-config file changes the portals that use it.

`<daemon>` settings are listed by element (`daemon_changes`): a running router applies them at
its next start, and says so (router.supervisor.Supervisor.reload).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from router.config.model import DaemonConfig, GatewayConfig

# <xml-config> is merged into every portal's UM options when the file is loaded, so an edit
# changes (and restarts) the portals that use it at once: it is never a pending daemon setting.
_APPLIED_THROUGH_PORTALS = ("xml_config", "xml_config_digest")
# Model fields whose element name is not the field's name with dashes.
_ELEMENT_OF_FIELD = {"worker_groups": "worker-group"}


@dataclass
class ConfigDiff:
    added: list[str] = field(default_factory=list)       # portal names, in the new file's order
    removed: list[str] = field(default_factory=list)     # in the old file's order
    changed: list[str] = field(default_factory=list)     # same name, different settings (or kind)
    kept: list[str] = field(default_factory=list)        # same name, same settings
    daemon_changes: list[str] = field(default_factory=list)   # <daemon> child elements, e.g. "web-monitor"

    @property
    def daemon_changed(self) -> bool:
        return bool(self.daemon_changes)

    @property
    def unchanged(self) -> bool:
        return not (self.added or self.removed or self.changed or self.daemon_changes)


def diff_configs(old: GatewayConfig, new: GatewayConfig) -> ConfigDiff:
    before = {portal.name: portal for portal in old.portals}
    after = {portal.name: portal for portal in new.portals}
    diff = ConfigDiff(daemon_changes=daemon_changes(old.daemon, new.daemon))
    for name, portal in after.items():
        if name not in before:
            diff.added.append(name)
        elif before[name] == portal:          # dataclass equality also compares the type
            diff.kept.append(name)
        else:
            diff.changed.append(name)
    diff.removed = [name for name in before if name not in after]
    return diff


def daemon_changes(old: DaemonConfig, new: DaemonConfig) -> list[str]:
    """The `<daemon>` elements whose settings differ (those a restart would apply)."""
    changed: list[str] = []
    for item in fields(DaemonConfig):
        if item.compare and item.name not in _APPLIED_THROUGH_PORTALS \
                and _setting(old, item.name) != _setting(new, item.name):
            changed.append(_ELEMENT_OF_FIELD.get(item.name, item.name.replace("_", "-")))
    return changed


def _setting(daemon: DaemonConfig, name: str):
    if name == "worker_groups":         # which portals share a worker; not the order they are written in
        return {frozenset(group.portals) for group in daemon.worker_groups}
    return getattr(daemon, name)
