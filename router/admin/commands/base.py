"""What every admin command is: properties it accepts, how it runs, how routerctl prints it.

Commands get the supervisor injected (tests pass a fake). A command reads the supervisor only on
its event loop, so it never races the reconciliation that changes it. Synchronous commands
implement `execute`; one that must wait for the workers overrides `start` and answers through
`reply` when the answers arrive, without blocking the loop.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from router.admin.protocol import AdminError, Errno


@dataclass(frozen=True)
class Argument:
    """A property, which routerctl takes as a positional argument."""
    name: str
    help: str
    required: bool = False


class Command:
    arguments: tuple[Argument, ...] = ()

    def __init__(self, name: str):
        self.name = name

    @property
    def summary(self) -> str:
        return (self.__doc__ or self.name).strip().splitlines()[0]

    @property
    def description(self) -> str:
        return (self.__doc__ or "").strip()

    def validate(self, props: dict) -> dict:
        known = {argument.name: argument for argument in self.arguments}
        unknown = sorted(set(props) - set(known))
        if unknown:
            raise AdminError(Errno.INVALID_PROPERTY, f"{self.name} takes no property {', '.join(unknown)}")
        for argument in self.arguments:
            value = props.get(argument.name)
            if value is None and argument.required:
                raise AdminError(Errno.INVALID_PROPERTY, f"{self.name} needs '{argument.name}'")
            if value is not None and (not isinstance(value, str) or not value or len(value) > 256):
                raise AdminError(Errno.INVALID_PROPERTY, f"'{argument.name}' must be a non-empty string")
        return {name: props.get(name) for name in known}

    def start(self, supervisor, props: dict, reply) -> None:
        reply.run(self.execute, supervisor, props)

    def execute(self, supervisor, props: dict):
        raise NotImplementedError

    def render(self, data) -> str:
        """The human form routerctl prints without --json."""
        return json.dumps(data, indent=2)


def portal_names(supervisor, portal: str | None) -> list[str]:
    """All portals, or the one asked for; an unknown name is the caller's error, not a bug."""
    names = list(supervisor.workers)
    if portal is None:
        return names
    if portal not in names:
        raise AdminError(Errno.UNKNOWN_PORTAL, f"no portal named '{portal}' (portals: {', '.join(names)})")
    return [portal]
