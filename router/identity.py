"""`<daemon><uid>` and `<gid>`: the user and group the router switches to when started as root
(spec/dro.md §1.3), as daemons drop root: once the log file and the pidfile are open, before any
socket, shared-memory segment or worker exists, so everything the router creates afterwards is
the user's and nothing it does after start-up runs as root.

What the router still needs later must be reachable by that user: the runtime directory (its
admin and bus sockets; made the user's here when root created it), the log file (made the user's
here) and, when it rolls, its directory; and for a reload, the configuration files. Its code need
not be: every module of the router is imported before the switch.
"""
from __future__ import annotations

import importlib
import logging
import os
import pwd
import stat
from pathlib import Path

from router.runtime import runtime_dir

log = logging.getLogger(__name__)


class IdentityError(OSError):
    """The router cannot run as the configured user and group; the message says why."""


def switch_identity(uid: int | None, gid: int | None, log_path: str | None = None,
                    log_rolls: bool = False) -> str | None:
    """Become `uid`/`gid` if running as root; returns what was done, for the log (None: nothing
    was asked). Not root: the router keeps its identity and says so (a warning)."""
    if uid is None and gid is None:
        return None
    if os.geteuid() != 0:
        log.warning("<uid>/<gid> are for a router started as root: running on as uid %d gid %d",
                    os.geteuid(), os.getegid())
        return None
    if gid is None:
        gid = _primary_group(uid)
    target_uid = uid if uid is not None else os.geteuid()
    if log_path and log_rolls and not _writable_by(Path(log_path).parent, target_uid, gid):
        raise IdentityError(f"the log file rolls, but its directory {Path(log_path).parent} is not writable "
                            f"by uid {target_uid} gid {gid}")
    directory = runtime_dir()
    _give(directory, target_uid, gid, "runtime directory (admin and bus sockets)")
    # The supervisor, its workers and routerctl must agree on the directory: pin the one chosen.
    os.environ["RUNTIME_DIRECTORY"] = str(directory)
    if log_path:
        _give(Path(log_path), target_uid, gid, "log file")
    _load_code()
    try:
        os.setgroups([])
        if gid is not None:
            os.setgid(gid)
        if uid is not None:
            os.setuid(uid)
    except OSError as err:
        raise IdentityError(f"cannot switch to uid {uid} gid {gid}: {err.strerror}") from None
    return f"running as uid {os.getuid()} gid {os.getgid()} (started as root)"


# Modules imported only when first used: by multiprocess when it waits for a worker, by the
# statistics sink (pyarrow, kept out of the other processes' start).
LIBRARY_MODULES_IMPORTED_LATE = ("multiprocess.connection", "pyarrow", "pyarrow.parquet")


def _load_code() -> None:
    """Import every module of the router now, while its files are certainly readable: a package
    installed where only root may read (a virtualenv under /root, say) would otherwise fail the
    first time a later code path imports a module, in the middle of a run."""
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):     # by file: some packages have no __init__.py
        name = ".".join(("router", *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
        if not name.startswith("router.cli."):  # the tools' entry points: not the router
            importlib.import_module(name)
    for name in LIBRARY_MODULES_IMPORTED_LATE:
        importlib.import_module(name)


def _primary_group(uid: int | None) -> int | None:
    """A <uid> without a <gid>: the user's own group, not root's."""
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        raise IdentityError(f"uid {uid} has no passwd entry to take its group from: set <gid> too") from None


def _give(path: Path, uid: int, gid: int | None, what: str) -> None:
    """Make `path` usable by the user: its owner unless it already is (parents must let it in)."""
    for parent in path.resolve().parents:
        if not _searchable_by(parent, uid, gid):
            raise IdentityError(f"{what} {path}: uid {uid} gid {gid} cannot reach it ({parent} is closed to it)")
    try:
        if os.stat(path).st_uid != uid:
            os.chown(path, uid, -1 if gid is None else gid)
    except OSError as err:
        raise IdentityError(f"{what} {path}: cannot give it to uid {uid}: {err.strerror}") from None


def _allows(path: Path, uid: int, gid: int | None, user_bits: int, group_bits: int, other_bits: int) -> bool:
    """The permission bits that apply to that user (owner, else group, else others) hold all asked."""
    info = os.stat(path)
    if info.st_uid == uid:
        bits = user_bits
    elif gid is not None and info.st_gid == gid:
        bits = group_bits
    else:
        bits = other_bits
    return info.st_mode & bits == bits


def _searchable_by(directory: Path, uid: int, gid: int | None) -> bool:
    return _allows(directory, uid, gid, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)


def _writable_by(directory: Path, uid: int, gid: int | None) -> bool:
    return _allows(directory, uid, gid, stat.S_IWUSR | stat.S_IXUSR, stat.S_IWGRP | stat.S_IXGRP,
                   stat.S_IWOTH | stat.S_IXOTH)
