"""Comparing two configurations portal by portal, so a reload restarts only what changed.

Portals are matched by name. Where a portal was written (`line`, `locations`) is not part of its
equality, so moving a portal in the file or adding a comment changes nothing; its effective UM
options are, so an edited lbm-config or xml-config file changes the portals that use it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from router.config.model import GatewayConfig


@dataclass
class ConfigDiff:
    added: list[str] = field(default_factory=list)       # portal names, in the new file's order
    removed: list[str] = field(default_factory=list)     # in the old file's order
    changed: list[str] = field(default_factory=list)     # same name, different settings (or kind)
    kept: list[str] = field(default_factory=list)        # same name, same settings
    daemon_changed: bool = False

    @property
    def unchanged(self) -> bool:
        return not (self.added or self.removed or self.changed or self.daemon_changed)


def diff_configs(old: GatewayConfig, new: GatewayConfig) -> ConfigDiff:
    before = {portal.name: portal for portal in old.portals}
    after = {portal.name: portal for portal in new.portals}
    diff = ConfigDiff(daemon_changed=old.daemon != new.daemon)
    for name, portal in after.items():
        if name not in before:
            diff.added.append(name)
        elif before[name] == portal:          # dataclass equality also compares the type
            diff.kept.append(name)
        else:
            diff.changed.append(name)
    diff.removed = [name for name in before if name not in after]
    return diff
