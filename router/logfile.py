"""`<log type="file" frequency=... size=...>`: the daemon's log file, rolled as the DRO rolls it.

A roll happens when the time period changes (`daily` at local midnight, `hourly` on the hour; the
internal `test` frequency every second) or when the file reaches `size` million bytes, whichever
comes first. The rolled file is renamed `NAME_PID.YYYY-MM-DD.SEQ` (SEQ counts from 1 in each
run) and a new NAME is started; nothing is ever deleted (spec/dro.md §1.1).

Workers are forked with the supervisor's handler, so several processes append to one file. Only
the process that called :meth:`RollingLogFile.claim` (the supervisor) renames it; every process
reopens NAME when it finds the file it writes to was renamed (WatchedFileHandler), so no line goes
to a rolled file after the roll. The supervisor also checks once a second, so a file that only the
workers write to still rolls at its size.
"""
from __future__ import annotations

import logging.handlers
import os
import time

PERIOD_FORMATS = {"daily": "%Y-%m-%d", "hourly": "%Y-%m-%d %H", "test": "%Y-%m-%d %H:%M:%S"}


class RollingLogFile(logging.handlers.WatchedFileHandler):
    def __init__(self, path: str, frequency: str = "disable", size_millions: int = 0):
        # Topic names are any bytes on the wire (router.um.wire._codec): a line naming one is
        # written with those escaped, never lost to an encoding error.
        super().__init__(path, encoding="utf-8", errors="backslashreplace")
        self.path = path
        self.period_format = PERIOD_FORMATS.get(frequency)
        self.max_bytes = size_millions * 1_000_000
        self.owner: int | None = None          # the pid that may roll (set by claim)
        self.sequence = 1
        self.period = self._period_now()

    def claim(self) -> None:
        """This process (the supervisor) rolls the file from now on."""
        self.owner = os.getpid()
        self.period = self._period_now()

    def emit(self, record: logging.LogRecord) -> None:
        if self.owner == os.getpid():
            self.roll_if_due()
        super().emit(record)

    def roll_if_due(self) -> bool:
        if self.owner != os.getpid() or not self._due():
            return False
        self.acquire()
        try:
            self._roll()
        finally:
            self.release()
        return True

    def _period_now(self) -> str | None:
        return time.strftime(self.period_format) if self.period_format else None

    def _due(self) -> bool:
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return False
        if self.period_format and self._period_now() != self.period:
            if not size:            # nothing was logged in that period: no empty rolled file
                self.period = self._period_now()
                return False
            return True
        return bool(self.max_bytes) and size >= self.max_bytes

    def _roll(self) -> None:
        if self.stream is not None:
            self.stream.flush()
            self.stream.close()
            self.stream = None
        rolled = f"{self.path}_{self.owner}.{time.strftime('%Y-%m-%d')}.{self.sequence}"
        try:
            os.rename(self.path, rolled)
            self.sequence += 1
        except FileNotFoundError:
            pass                    # removed by hand: just start a new one
        self.period = self._period_now()
        self.stream = self._open()
        self._statstream()
