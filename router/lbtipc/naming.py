"""Finding an LBT-IPC session from its advertisement, on this host.

The ring segment is `/umr.lbtipc.<owner pid>.<xport_id>-<session id>` (router.ipc.shm naming, so a
crashed source's leftovers are recognisable and removed). A receiver knows xport_id and session
id from the TIR and finds the owner by name. Consumer slots are files next to the segment, each
held by an exclusive lock (flock) of the receiver that claimed it: the kernel frees the slot of
one that dies, and no shared counter is needed.
"""
from __future__ import annotations

import fcntl
import glob
import hashlib
import os
import socket

from router.ipc.shm import SHM_DIRECTORY, pid_alive, remove_stale

OWNER = "lbtipc"


def host_id() -> int:
    """A stable 32-bit id of this host (UM advertises one so receivers elsewhere do not attach)."""
    try:
        with open("/etc/machine-id") as handle:
            seed = handle.read().strip()
    except OSError:
        seed = socket.gethostname()
    return int.from_bytes(hashlib.sha1(seed.encode()).digest()[:4], "big") or 1


def session_name(xport_id: int, session_id: int) -> str:
    return f"{xport_id}-{session_id:08x}"


def find_segment(xport_id: int, session_id: int) -> str | None:
    """The full shared-memory name of a live session, or None. The names are compared as text:
    a glob pattern per session would be compiled and cached per session (fnmatch keeps 32768),
    which a receiver joining sessions that come and go for months would fill. A name with no
    pid where the owner's goes is anyone's file, not a session."""
    prefix, suffix = f"umr.{OWNER}.", f".{session_name(xport_id, session_id)}"
    try:
        entries = os.listdir(SHM_DIRECTORY)
    except OSError:
        return None
    for entry in entries:
        if entry.startswith(prefix) and entry.endswith(suffix):
            owner = entry[len(prefix):-len(suffix)]
            if owner.isascii() and owner.isdigit() and pid_alive(int(owner)):
                return "/" + entry
    return None


def allocate_xport_id(low: int, high: int) -> int:
    """The first transport id in `transport_lbtipc_id_low..high` no live session uses (names stay
    unique anyway: the session id is part of them, so a full range only means sharing an id)."""
    remove_stale(f"umr.{OWNER}")
    used = set()
    for path in glob.glob(f"{SHM_DIRECTORY}/umr.{OWNER}.*.*-*"):
        try:
            used.add(int(os.path.basename(path).split(".")[3].split("-")[0]))
        except (IndexError, ValueError):
            continue
    for xport_id in range(low, high + 1):
        if xport_id not in used:
            return xport_id
    return low


def _slot_path(segment: str, slot: int) -> str:
    return f"{SHM_DIRECTORY}/{segment.lstrip('/')}.slot{slot}"


# (segment, slot) -> the descriptor whose lock holds the slot, for as long as this process does
_held: dict[tuple[str, int], int] = {}


def claim_slot(segment: str, slots: int) -> int:
    """A consumer slot of the ring for this process. A slot is held by an exclusive lock on its
    file, which the kernel lets go of when the holder dies: the slot of a receiver that died is
    free at once, whatever pid its file names (pids are reused), and two receivers starting
    together over a dead one's file cannot both take it (reading the pid, then replacing the file,
    let two of them in)."""
    for slot in range(slots):
        fd = _lock_slot(_slot_path(segment, slot))
        if fd is not None:
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())     # for whoever looks: the lock is what counts
            _held[(segment, slot)] = fd
            return slot
    raise OSError(f"all {slots} receiver slots of LBT-IPC session {segment} are taken")


def _lock_slot(path: str, attempts: int = 3) -> int | None:
    """The slot file's descriptor, locked by us; None if another holds it. A holder unlinks the
    file before it lets go, so a lock won on a file no longer at `path` (opened just before the
    unlink) claims nothing: the name is tried again, with the file there now."""
    for _ in range(attempts):
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        if _still_named(fd, path):
            return fd
        os.close(fd)
    return None


def release_slot(segment: str, slot: int) -> None:
    """Let go of a slot this process holds: its file goes first, while still locked (see _lock_slot)."""
    fd = _held.pop((segment, slot), None)
    if fd is None:
        return
    try:
        os.unlink(_slot_path(segment, slot))
    except FileNotFoundError:
        pass
    os.close(fd)


def live_slots(segment: str, slots: int) -> int:
    return sum(1 for slot in range(slots) if _claimant_alive(_slot_path(segment, slot)))


def remove_slots(segment: str, slots: int) -> None:
    for slot in range(slots):
        try:
            os.unlink(_slot_path(segment, slot))
        except FileNotFoundError:
            pass


def _still_named(fd: int, path: str) -> bool:
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _claimant_alive(path: str) -> bool:
    """Is the slot's lock held (by any process, this one included)?"""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)            # closing lets go of the shared lock taken to look
    return False
