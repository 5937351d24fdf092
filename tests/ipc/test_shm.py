"""Segment lifecycle: owner-only create/unlink, attach, stale segments of dead owners."""
from __future__ import annotations

import os
import subprocess
import sys

import posix_ipc
import pytest

from router.ipc.shm import SharedSegment, remove_stale, segment_name

from .conftest import OWNER


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def _exists(name: str) -> bool:
    return os.path.exists("/dev/shm" + name)


def test_name_carries_owner_and_pid_and_rejects_separators():
    assert segment_name("r1", "ring-0", pid=42) == "/umr.r1.42.ring-0"
    assert segment_name("r1", "x") == f"/umr.r1.{os.getpid()}.x"
    with pytest.raises(ValueError, match="letters, digits"):
        segment_name("a.b", "x")
    with pytest.raises(ValueError, match="letters, digits"):
        segment_name("a", "x/y")


def test_owner_creates_attacher_shares_memory_and_owner_unlinks(unique_name):
    with SharedSegment.create(OWNER, unique_name, 8192) as owner:
        assert owner.is_owner and _exists(owner.name)
        with pytest.raises(posix_ipc.ExistentialError):
            SharedSegment.create(OWNER, unique_name, 8192)  # O_CREX: never reuse a name
        other = SharedSegment.attach(owner.name)
        other.memory[100:105] = b"hello"
        assert bytes(owner.memory[100:105]) == b"hello"
        other.close()
        assert _exists(owner.name)  # closing an attachment does not unlink
    assert not _exists(owner.name)


def test_non_owner_cannot_unlink(unique_name, fork_context):
    with SharedSegment.create(OWNER, unique_name, 4096) as owner:
        attached = SharedSegment.attach(owner.name)
        with pytest.raises(PermissionError, match="only the owner"):
            attached.unlink()
        attached.close()

        def child():  # a forked worker inherits the object, not the ownership
            try:
                owner.unlink()
            except PermissionError:
                os._exit(0)
            os._exit(1)

        process = fork_context.Process(target=child)
        process.start()
        process.join(30)
        assert process.exitcode == 0
        assert _exists(owner.name)


def test_stale_segments_of_dead_owners_are_removed_and_live_ones_kept(unique_name):
    dead = _dead_pid()
    stale_name = segment_name(OWNER, unique_name, pid=dead)
    posix_ipc.SharedMemory(stale_name, posix_ipc.O_CREX, size=4096).close_fd()
    with SharedSegment.create(OWNER, unique_name, 4096) as live:
        try:
            removed = remove_stale(f"umr.{OWNER}")
            assert stale_name in removed
            assert not _exists(stale_name)
            assert _exists(live.name) and live.name not in removed
        finally:
            if _exists(stale_name):
                posix_ipc.unlink_shared_memory(stale_name)


def test_close_reports_views_that_are_still_alive(unique_name):
    segment = SharedSegment.create(OWNER, unique_name, 4096)
    kept = segment.memory[0:10]
    with pytest.raises(BufferError, match="still alive"):
        segment.close()
    assert not _exists(segment.name)  # the owner's unlink happened anyway
    kept.release()
    segment.close()


# Runs in a mount namespace of its own whose /dev/shm is a 1 MiB tmpfs (Docker's default is 64 MiB:
# a router's rings and counters can exceed it). Creating a segment does not allocate its pages: the
# first write to one the tmpfs cannot back raised SIGBUS in whichever process touched it.
_SMALL_SHM_CHILD = """
import os, sys
from router.ipc.shm import SharedSegment
size = 4 << 20
try:
    segment = SharedSegment.create("pytest", "big", size)
except OSError as err:
    print("refused:", err)
    print("left:", sorted(os.listdir("/dev/shm")))
    sys.exit(0)
segment.memory[:] = b"x" * size
print("written")
"""


def test_a_segment_dev_shm_cannot_hold_is_refused_at_creation_not_a_sigbus_at_first_write():
    from tests.support.processes import ROOT
    argv = ["unshare", "--mount", "--", "sh", "-c",
            'mount -t tmpfs -o size=1m tmpfs /dev/shm && exec "$0" -c "$1"', sys.executable, _SMALL_SHM_CHILD]
    child = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert child.returncode == 0, (child.returncode, child.stdout, child.stderr)
    assert "refused:" in child.stdout, child.stdout
    message = child.stdout
    assert "/umr.pytest." in message and ".big" in message, message          # names the segment
    assert "4194304 bytes" in message, message                                  # what it needs
    assert "bytes free" in message and "--shm-size" in message, message        # what there is, what to do
    assert "left: []" in message, message                                       # nothing left behind
