"""Shared-memory segment lifecycle: naming, create/attach, unmap, unlink, stale-segment removal.

Segments are POSIX shared memory (``/dev/shm``) named ``/umr.<owner>.<pid>.<name>``: ``owner`` is the
router name, ``pid`` the owner's process id. Only the owner creates (``O_CREAT | O_EXCL``) and
unlinks; everyone else attaches read-write. Because the owner's pid is in the name, a segment
whose owner is gone is recognisable and ``remove_stale`` deletes it at the next start.

A mapping cannot be closed while memoryviews over it are alive: ``close()`` releases its own view
and tells you, with a clear error, if something else (a ring, a handler keeping a payload view)
still holds one. Close rings before their segment.

A new segment's pages are reserved when it is created: a tmpfs allocates a file's pages only when
they are first written, and one it has no room for then (a container's /dev/shm is 64 MiB unless
told otherwise) raises SIGBUS in whichever process writes, long after the segment was made. So
``create`` fails at once instead, with ``SharedMemoryFull``, and names what is missing.
"""
from __future__ import annotations

import atexit
import errno
import gc
import mmap
import os
import re

import posix_ipc

PREFIX = "umr"
SHM_DIRECTORY = "/dev/shm"
_NAME_PART = re.compile(r"^[A-Za-z0-9_-]+$")


def segment_name(owner: str, name: str, pid: int | None = None) -> str:
    """``/umr.<owner>.<pid>.<name>``; owner and name are letters, digits, '_' and '-'."""
    for label, part in (("owner", owner), ("name", name)):
        if not _NAME_PART.match(part):
            raise ValueError(f"shared-memory {label} {part!r} must be letters, digits, '_' or '-'")
    return f"/{PREFIX}.{owner}.{os.getpid() if pid is None else pid}.{name}"


class SharedMemoryFull(OSError):
    """/dev/shm has no room for a segment: its pages could not be reserved."""

    def __init__(self, name: str, size: int, free: int):
        self.name, self.size, self.free = name, size, free
        super().__init__(errno.ENOSPC, (
            f"cannot reserve {size} bytes of shared memory for segment {name}: {SHM_DIRECTORY} has "
            f"{free} bytes free; give the host or container more shared memory (docker run "
            f"--shm-size, or the size= of the tmpfs mounted on {SHM_DIRECTORY})"))

    def __str__(self) -> str:
        return self.strerror


def free_bytes() -> int:
    """Bytes of /dev/shm not in use now (what new segments can still reserve)."""
    stats = os.statvfs(SHM_DIRECTORY)
    return stats.f_bavail * stats.f_frsize


class SharedSegment:
    """One mapped POSIX shared-memory segment. Use ``create`` (owner) or ``attach``."""

    def __init__(self, name: str, memory: mmap.mmap, *, owner_pid: int | None):
        self.name = name
        self.size = len(memory)
        self._mmap = memory
        self._owner_pid = owner_pid
        self.memory: memoryview = memoryview(memory)
        if owner_pid is not None:
            atexit.register(self.close)

    @classmethod
    def create(cls, owner: str, name: str, size: int) -> "SharedSegment":
        """Create a new zero-filled segment, its pages reserved; fails if the name exists, and
        with SharedMemoryFull if /dev/shm cannot hold it. The caller owns it."""
        full_name = segment_name(owner, name)
        shm = posix_ipc.SharedMemory(full_name, posix_ipc.O_CREX, mode=0o600, size=size)
        try:
            _reserve(shm.fd, full_name, size)
            memory = mmap.mmap(shm.fd, size)
        except BaseException:
            shm.unlink()
            raise
        finally:
            shm.close_fd()
        return cls(full_name, memory, owner_pid=os.getpid())

    @classmethod
    def attach(cls, full_name: str) -> "SharedSegment":
        """Map an existing segment read-write; this process may not unlink it."""
        shm = posix_ipc.SharedMemory(full_name)
        try:
            memory = mmap.mmap(shm.fd, shm.size)
        finally:
            shm.close_fd()
        return cls(full_name, memory, owner_pid=None)

    @property
    def is_owner(self) -> bool:
        # A forked child inherits the object but not the ownership.
        return self._owner_pid == os.getpid()

    def unlink(self) -> None:
        """Remove the name (existing mappings stay valid). Only the owner may."""
        if not self.is_owner:
            raise PermissionError(f"only the owner (pid {self._owner_pid}) may unlink {self.name}")
        try:
            posix_ipc.unlink_shared_memory(self.name)
        except posix_ipc.ExistentialError:
            pass

    def close(self) -> None:
        """Unmap (and, for the owner, unlink). Raises BufferError if views are still alive."""
        if self.is_owner:
            self.unlink()
            self._owner_pid = None
            atexit.unregister(self.close)
        if self._mmap.closed:
            return
        self.memory.release()
        try:
            self._mmap.close()
        except BufferError:
            gc.collect()  # views caught in reference cycles
            try:
                self._mmap.close()
            except BufferError:
                raise BufferError(
                    f"cannot unmap {self.name}: memoryviews over it are still alive "
                    "(close rings first; handlers must not keep payload views)"
                ) from None

    def __enter__(self) -> "SharedSegment":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _reserve(fd: int, name: str, size: int) -> None:
    """Allocate the segment's pages now: ENOSPC here, rather than SIGBUS at a first write later."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.ENOMEM):   # ENOMEM: a container's memory limit
            raise
        raise SharedMemoryFull(name, size, free_bytes()) from None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, belongs to someone else
        return True
    return True


def remove_stale(prefix: str = PREFIX, *, ours_too: bool = False) -> list[str]:
    """Unlink segments (and wakeup FIFOs) named ``<prefix>...`` whose owner pid is not alive.

    ``prefix`` is ``umr`` or ``umr.<owner>`` to limit the sweep to one router. A pid that has been
    reused by an unrelated live process keeps its segments: removal errs on the safe side.
    ``ours_too``, for a process that has created none yet: those named with its own pid go as well,
    left by an earlier process that had this pid and was killed (a container's router is pid 1 at
    every start). Returns the names removed.
    """
    removed = []
    for entry in sorted(os.listdir(SHM_DIRECTORY)):
        if not entry.startswith(prefix + ".") and entry != prefix:
            continue
        fields = entry.split(".")
        if len(fields) < 4 or fields[0] != PREFIX or not fields[2].isdigit():
            continue
        pid = int(fields[2])
        if pid_alive(pid) and not (ours_too and pid == os.getpid()):
            continue
        try:
            os.unlink(os.path.join(SHM_DIRECTORY, entry))
        except FileNotFoundError:
            continue
        removed.append("/" + entry)
    return removed
