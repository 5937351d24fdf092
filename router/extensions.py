"""What runs inside the supervisor besides the workers: the admin socket, the web monitor, the
statistics sink. Each is a factory `make(supervisor) -> object with close()`; it registers its own
sockets and timers on `supervisor.loop`, reads `supervisor.status()` and the portals' counters, and
is closed at shutdown. Adding a feature here never touches the supervisor's reconciliation loop."""
from __future__ import annotations

import importlib
import logging

log = logging.getLogger(__name__)

# "module:function" so that importing the supervisor does not import every extension's libraries.
FACTORIES: list[str] = [
    "router.monitor.rates:start",        # before the admin socket and web monitor, which read its rates
    "router.admin.server:start",
    "router.monitor.web:start",
    "router.monitor.parquet_sink:make",
]


def start_all(supervisor) -> list:
    started = []
    for spec in FACTORIES:
        module_name, _, function = spec.partition(":")
        factory = getattr(importlib.import_module(module_name), function)
        extension = factory(supervisor)
        if extension is not None:
            started.append(extension)
    return started
