"""Where a router keeps its sockets: the runtime directory and the admin and bus endpoints.

`$RUNTIME_DIRECTORY` (systemd's RuntimeDirectory=), else /run/umrouter when writable, else
`$XDG_RUNTIME_DIR/umrouter`, else a per-user directory under the temp dir (DESIGN.md §4).
routerctl uses the same function, so both agree without configuration.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def runtime_dir(create: bool = True) -> Path:
    candidates = []
    if os.environ.get("RUNTIME_DIRECTORY"):
        candidates.append(Path(os.environ["RUNTIME_DIRECTORY"].split(":")[0]))
    candidates.append(Path("/run/umrouter"))
    if os.environ.get("XDG_RUNTIME_DIR"):
        candidates.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "umrouter")
    candidates.append(Path(tempfile.gettempdir()) / f"umrouter-{os.getuid()}")
    for directory in candidates:
        if _usable(directory, create):
            return directory
    raise OSError("no usable runtime directory for the admin socket")


def _usable(directory: Path, create: bool) -> bool:
    try:
        if create:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        return directory.is_dir() and os.access(directory, os.W_OK | os.X_OK)
    except OSError:
        return False


def admin_endpoint(name: str, directory: Path | None = None) -> str:
    return f"ipc://{(directory or runtime_dir()) / f'{name}.admin'}"


def bus_endpoints(name: str, pid: int, directory: Path | None = None) -> tuple[str, str]:
    base = (directory or runtime_dir()) / f"{name}.{pid}.bus"
    return f"ipc://{base}", f"ipc://{base}-pub"


def remove_stale_bus_sockets(name: str, directory: Path) -> list[Path]:
    """The bus sockets of router `name`'s earlier runs that did not stop cleanly (killed, say):
    their supervisor's pid is in the name and no longer alive. The directory outlives the runs
    (systemd's RuntimeDirectoryPreserve=), so nothing else would ever remove them."""
    from router.ipc.shm import pid_alive
    removed = []
    for path in directory.glob(f"{name}.*.bus*"):
        pid = path.name[len(name) + 1:].partition(".")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed
