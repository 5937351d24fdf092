"""How much memory the router's processes use, read from /proc: what an operator watches on a router
that runs for months (the DRO's web monitor links a memory allocation page for the same reason).

RSS counts every page a process has resident, the shared-memory rings and counters included, which
all the router's processes map: summed over processes it counts them several times. PSS shares each
page out among the processes that map it, so PSS adds up; private memory is the process's own (its
Python heap, mostly), the figure that grows if something leaks.
"""
from __future__ import annotations

from pathlib import Path

_KB = 1024
# /proc/PID/status lines: (field, our name)
_STATUS = (("VmRSS", "rss_bytes"), ("VmHWM", "rss_peak_bytes"))
# /proc/PID/smaps_rollup lines summed into each of our names
_ROLLUP = {"pss_bytes": ("Pss",), "private_bytes": ("Private_Clean", "Private_Dirty"),
           "shared_bytes": ("Shared_Clean", "Shared_Dirty")}
FIELDS = ("rss_bytes", "rss_peak_bytes", "pss_bytes", "private_bytes", "shared_bytes", "threads")


def process_memory(pid: int) -> dict[str, int] | None:
    """The process's memory in bytes (and its thread count); None if it is gone."""
    try:
        status = _fields(Path(f"/proc/{pid}/status").read_text())
        rollup = _fields(Path(f"/proc/{pid}/smaps_rollup").read_text())
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    found = {name: _kilobytes(status.get(field)) for field, name in _STATUS}
    found.update({name: sum(_kilobytes(rollup.get(field)) for field in fields) for name, fields in _ROLLUP.items()})
    found["threads"] = int(status.get("Threads", "0").split()[0])
    return found


def _fields(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        key, separator, value = line.partition(":")
        if separator:
            fields[key.strip()] = value.strip()
    return fields


def _kilobytes(value: str | None) -> int:
    """'1234 kB' -> bytes (the kernel's kB are KiB)."""
    if not value:
        return 0
    number, _, unit = value.partition(" ")
    return int(number) * (_KB if unit.strip() == "kB" else 1)
