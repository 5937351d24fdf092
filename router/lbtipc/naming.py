"""Finding an LBT-IPC session from its advertisement, on this host.

The ring segment is `/umr.lbtipc.<owner pid>.<xport_id>-<session id>` (router.ipc.shm naming, so a
crashed source's leftovers are recognisable and removed). A receiver knows xport_id and session
id from the TIR and finds the owner by name. Consumer slots are claimed with exclusive-create
marker files next to the segment, each holding the claimant's pid: no lock, no shared counter.
"""
from __future__ import annotations

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


def claim_slot(segment: str, slots: int) -> int:
    """A consumer slot of the ring for this process; reclaims slots of receivers that died."""
    for slot in range(slots):
        path = _slot_path(segment, slot)
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            except FileExistsError:
                if _claimant_alive(path):
                    break
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                continue
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            return slot
    raise OSError(f"all {slots} receiver slots of LBT-IPC session {segment} are taken")


def release_slot(segment: str, slot: int) -> None:
    try:
        os.unlink(_slot_path(segment, slot))
    except FileNotFoundError:
        pass


def live_slots(segment: str, slots: int) -> int:
    return sum(1 for slot in range(slots) if _claimant_alive(_slot_path(segment, slot)))


def remove_slots(segment: str, slots: int) -> None:
    for slot in range(slots):
        release_slot(segment, slot)


def _claimant_alive(path: str) -> bool:
    try:
        with open(path) as handle:
            text = handle.read().strip()
    except FileNotFoundError:
        return False
    return bool(text) and text.isdigit() and pid_alive(int(text))
