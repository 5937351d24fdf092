"""One module per admin command, registered automatically (after circus's commands package).

A command module defines one subclass of `Command`; its module name is the command's name and
its docstring is its specification (summary line, usage, reply data), shown by `routerctl -h`.
Adding a command is adding a file here: neither the server nor routerctl changes.
"""
from __future__ import annotations

import importlib
import pkgutil

from router.admin.commands.base import Command

_registry: dict[str, Command] | None = None


def commands() -> dict[str, Command]:
    """name -> command instance, for every module in this package."""
    global _registry
    if _registry is None:
        found = {}
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
            if info.name == "base" or info.name.startswith("_"):
                continue
            module = importlib.import_module(f"{__name__}.{info.name}")
            for value in vars(module).values():
                if isinstance(value, type) and issubclass(value, Command) and value.__module__ == module.__name__:
                    found[info.name] = value(info.name)
        _registry = found
    return _registry
