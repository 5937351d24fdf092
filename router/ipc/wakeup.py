"""Wakeups for ring participants that sleep instead of spinning.

A ``Wakeup`` is a file descriptor that becomes readable when someone calls ``wake()``; the
sleeper drains it. It plugs into any selectors / ``zmq.Poller`` loop through ``fileno()``.

- ``EventfdWakeup``: an eventfd, created by the owner (the supervisor) before it forks workers,
  which inherit it. The cheapest kind: one syscall to wake, one to drain.
- ``FifoWakeup``: a named FIFO next to the ring's segment in /dev/shm, for processes that are not
  related by fork (LBT-IPC applications). The sleeper holds it open read-write, so it never sees
  end-of-file; a waker that finds no sleeper (ENXIO) or a full pipe (EAGAIN) has nothing to do,
  because a sleeper will either open it later and recheck the ring, or already has a wakeup pending.

``RingWakeups`` bundles one wakeup per consumer slot and one for the producer of a ring.
"""
from __future__ import annotations

import errno
import os
import select
import stat
from dataclasses import dataclass
from typing import Protocol, Sequence

_FIFO_DIRECTORY = "/dev/shm"


class Wakeup(Protocol):
    def fileno(self) -> int: ...

    def wake(self) -> None: ...

    def drain(self) -> int: ...

    def wait(self, timeout: float | None) -> bool: ...

    def close(self) -> None: ...


def _poller(fd: int) -> select.poll:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return poller


def _milliseconds(timeout: float | None) -> int | None:
    return None if timeout is None else max(0, int(timeout * 1000 + 0.999))


class EventfdWakeup:
    """An eventfd wakeup; survives fork (the child inherits the fd), closed on exec."""

    def __init__(self) -> None:
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._poller: select.poll | None = None  # made on first wait, in the process that waits

    def fileno(self) -> int:
        return self._fd

    def wake(self) -> None:
        try:
            os.eventfd_write(self._fd, 1)
        except BlockingIOError:  # counter saturated: a wakeup is pending anyway
            pass

    def drain(self) -> int:
        """Consume pending wakeups; returns how many ``wake()`` calls they were (0 if none)."""
        try:
            return os.eventfd_read(self._fd)
        except BlockingIOError:
            return 0

    def wait(self, timeout: float | None) -> bool:
        """Sleep until woken or ``timeout`` seconds pass; True if woken. Drains."""
        if self._poller is None:
            self._poller = _poller(self._fd)
        if self._poller.poll(_milliseconds(timeout)):
            self.drain()
            return True
        return False

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class FifoWakeup:
    """A wakeup through a named FIFO, for processes that share nothing but a name."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._read_fd = -1
        self._write_fd = -1
        self._poller: select.poll | None = None

    @classmethod
    def create(cls, path: str) -> "FifoWakeup":
        """Make the FIFO (the ring owner does this); an existing FIFO is reused."""
        try:
            os.mkfifo(path, 0o600)
        except FileExistsError:
            if not stat.S_ISFIFO(os.stat(path).st_mode):
                raise
        return cls(path)

    def fileno(self) -> int:
        if self._read_fd < 0:
            # O_RDWR: the sleeper is also a writer, so reads never report end-of-file.
            self._read_fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        return self._read_fd

    def wake(self) -> None:
        try:
            if self._write_fd < 0:
                self._write_fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.write(self._write_fd, b"\x01")
        except BlockingIOError:  # pipe full: a wakeup is pending anyway
            pass
        except OSError as error:
            # ENXIO: nobody sleeps on it yet. EPIPE: the sleeper went away. Either way
            # nobody is waiting; reopen on the next wake.
            if error.errno not in (errno.ENXIO, errno.EPIPE, errno.ENOENT):
                raise
            self._close_writer()

    def drain(self) -> int:
        drained = 0
        fd = self.fileno()
        while True:
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:
                return drained
            if not chunk:
                return drained
            drained += len(chunk)

    def wait(self, timeout: float | None) -> bool:
        if self._poller is None:
            self._poller = _poller(self.fileno())
        if self._poller.poll(_milliseconds(timeout)):
            self.drain()
            return True
        return False

    def _close_writer(self) -> None:
        if self._write_fd >= 0:
            os.close(self._write_fd)
            self._write_fd = -1

    def close(self) -> None:
        self._close_writer()
        if self._read_fd >= 0:
            os.close(self._read_fd)
            self._read_fd = -1
            self._poller = None

    def unlink(self) -> None:
        """Remove the FIFO's name (the ring owner does this)."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


@dataclass
class RingWakeups:
    """The wakeups of one ring: ``consumers[i]`` wakes consumer i, ``producer`` the producer."""

    consumers: Sequence[Wakeup]
    producer: Wakeup

    @classmethod
    def eventfds(cls, consumer_slots: int) -> "RingWakeups":
        """For workers forked by the owner: create before forking."""
        return cls([EventfdWakeup() for _ in range(consumer_slots)], EventfdWakeup())

    @classmethod
    def fifos(cls, segment_name: str, consumer_slots: int, *, create: bool) -> "RingWakeups":
        """For unrelated processes: FIFOs named after the segment; the owner passes ``create``."""
        make = FifoWakeup.create if create else FifoWakeup
        base = os.path.join(_FIFO_DIRECTORY, segment_name.lstrip("/"))
        return cls([make(f"{base}.wake.c{i}") for i in range(consumer_slots)], make(f"{base}.wake.p"))

    def all(self) -> list[Wakeup]:
        return [*self.consumers, self.producer]

    def close(self) -> None:
        for wakeup in self.all():
            wakeup.close()

    def unlink(self) -> None:
        """Remove FIFO names, if these are FIFOs (the owner, at shutdown)."""
        for wakeup in self.all():
            if isinstance(wakeup, FifoWakeup):
                wakeup.unlink()
