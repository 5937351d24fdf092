"""One running router per statistics directory: `DIR/router=NAME` is written by whoever claims it.

A router's name is its Parquet partition, and a name taken from the configuration file's name
(`tnwgd.xml` gives `tnwgd`) is easily the same on two hosts that share a statistics volume, or for
a second router started by hand. Two writers in one directory do worse than mix their rows: each
picks part numbers by listing the directory, so they can write the same file in turn, and a router
starting publishes the `.open` part it finds as left by a crash, though the other router is still
growing it, which then publishes the same rows again.

So a writer first takes an exclusive `flock` on `router=NAME/.writer` (a hidden file: Spark and
pyarrow skip it, pruning leaves it) and writes who it is into it. The lock belongs to the open
file, so it goes when the router stops or dies, with nothing left to clean; the supervisor's forked
workers close their inherited copy (a worker outliving its supervisor must not keep it). Over NFS,
Linux takes such a lock as a POSIX lock on the server, so two hosts exclude each other too.
"""
from __future__ import annotations

import datetime as dt
import fcntl
import os
import socket
from pathlib import Path

CLAIM_FILE = ".writer"

_HELD: set[int] = set()         # descriptors of the claims this process holds


def _close_in_child() -> None:
    # Only the parent's copy holds the claim then: a forked worker lives on its own schedule.
    for fd in _HELD:
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


os.register_at_fork(after_in_child=_close_in_child)


class DirectoryClaim:
    def __init__(self, root: Path, router: str):
        self.path = Path(root) / f"router={router}" / CLAIM_FILE
        self.fd: int | None = None

    @property
    def held(self) -> bool:
        return self.fd is not None

    def take(self) -> str | None:
        """Claim the directory. None when this claim holds it (now or already); otherwise who does,
        as the holder wrote it. An OSError means the claim could not even be tried."""
        if self.fd is not None:
            return None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
            os.close(fd)
            return holder or "a writer that has not said who it is yet"
        except OSError:
            os.close(fd)
            raise
        since = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, since {since}\n".encode(), 0)
        self.fd = fd
        _HELD.add(fd)
        return None

    def release(self) -> None:
        if self.fd is not None:
            _HELD.discard(self.fd)
            os.close(self.fd)
            self.fd = None
