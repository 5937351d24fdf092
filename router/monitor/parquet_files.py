"""The statistics files on disk: a hidden file that grows every interval, published when it rotates.

The current part lives as `.part-N.parquet.open`, a complete Parquet file rewritten every interval
(written to `.part-N.parquet.tmp`, then renamed over it). At rotation (UTC hour, `max_rows`,
`max_bytes`) or shutdown it is renamed to `part-N.parquet` and never touched again.

Why not append row groups to an open writer: a Parquet file is readable only once its footer is
written, so a crash would lose the whole file. Why not rewrite `part-N.parquet` itself in place:
readers open a file more than once (pyarrow and Spark read the footer, then the pages), and a
rename between the two opens hands them pages of a newer file than the footer describes. Why not a
file per interval: 17 280 files a day per router at 5 s, and compacting them is never atomic for a
reader listing the directory.

So: a reader sees only published files, each complete and immutable (names starting with a dot
are skipped by Spark and pyarrow); a crash loses at most the interval being written, because the
next start publishes the `.open` file it left; rewriting is bounded by the rotation limits. The
price is that the current part becomes visible when it rotates, at most an hour later by default.

Writes happen on one background thread so the supervisor's loop keeps reaping and heartbeating
while the disk is slow; only the newest snapshot of each file is written, older ones are superseded.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from router.eventlog import event

log = logging.getLogger(__name__)

PART = re.compile(r"^\.?part-(\d+)\.parquet(\.open)?$")
# What pruning removes: published parts and half-written ones. Never an `.open` part: while the
# router runs that is a live file (yesterday's is published only after the day turned), and those
# a crash left are published by `recover` at start, before any pruning.
EXPIRED_FILE = re.compile(r"^(part-\d+\.parquet|\.part-\d+\.parquet\.tmp)$")
DATE_DIR = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")
COMPRESSION = "zstd"
# Rotated part files whose writes keep failing (a full or broken disk) wait in the supervisor's
# memory for the disk to come back: at most this much of them (some 20 000 rows, hours of a
# router's statistics), the oldest given up first, or a disk broken for days would grow the
# supervisor until the kernel killed it, and the router with it.
MAX_UNWRITTEN_BYTES = 64 << 20


def partition_dir(root: Path, router: str, when: dt.datetime) -> Path:
    return root / f"router={router}" / f"date={when.strftime('%Y-%m-%d')}"


def open_name(path: Path) -> Path:
    """Where `part-N.parquet` grows until it is published."""
    return path.with_name(f".{path.name}.open")


def next_part_number(directory: Path) -> int:
    """One past the highest part there, published or open: a restarted router overwrites nothing."""
    try:
        numbers = [int(m.group(1)) for m in map(PART.match, os.listdir(directory)) if m]
    except OSError:                  # not there yet, or unusable: the write will say so, and retry
        numbers = []
    return max(numbers, default=0) + 1


def recover(root: Path, router: str, keep: Path | None = None) -> list[Path]:
    """After a crash: publish the `.open` parts it left (complete files) and drop half-written
    `.tmp` ones. Returns the files published. `keep`: a part this process is writing (the sink
    wrote before it could claim the directory), whose files are live, not left over."""
    published = []
    base = root / f"router={router}"
    live = set() if keep is None else {keep.with_name(f".{keep.name}.tmp"), open_name(keep)}
    for leftover in base.glob("date=*/.part-*.parquet.tmp"):
        if leftover not in live:
            leftover.unlink(missing_ok=True)
    for current in sorted(base.glob("date=*/.part-*.parquet.open")):
        if current not in live:
            published.append(publish(current, current.parent / current.name[1:-len(".open")]))
    return published


def publish(current: Path, target: Path) -> Path:
    """Rename a complete file to its visible name, never over another published file."""
    if target.exists():
        target = target.parent / f"part-{next_part_number(target.parent):05d}.parquet"
    os.replace(current, target)
    return target


def expired_dates(root: Path, router: str, today: dt.date, retain_days: int) -> list[Path]:
    """The router's date directories older than the `retain_days` days before `today` (today is
    day one); none when `retain_days` is 0 (keep everything). Only `date=YYYY-MM-DD` names count:
    anything else under the router's directory is not ours to remove."""
    if retain_days <= 0:
        return []
    oldest_kept = today - dt.timedelta(days=retain_days - 1)
    expired = []
    try:
        names = os.listdir(root / f"router={router}")
    except OSError:
        return []
    for name in sorted(names):
        match = DATE_DIR.match(name)
        if match is None:
            continue
        try:
            day = dt.date.fromisoformat(match.group(1))
        except ValueError:
            continue
        if day < oldest_kept:
            expired.append(root / f"router={router}" / name)
    return expired


def remove_date(directory: Path) -> int:
    """Remove a date directory's statistics files (EXPIRED_FILE), then the directory if that
    emptied it. Returns the files removed; a file of another name stays, and so does its
    directory."""
    removed = 0
    for entry in os.listdir(directory):
        if EXPIRED_FILE.match(entry):
            (directory / entry).unlink(missing_ok=True)
            removed += 1
    try:
        directory.rmdir()
    except OSError:                 # something else lives there: left as it is
        pass
    return removed


@dataclass
class Snapshot:
    batches: list
    rows: int
    publish: bool = False

    @property
    def nbytes(self) -> int:
        """The batches' size in memory: what a file waiting for the disk holds."""
        return sum(batch.nbytes for batch in self.batches)


class BackgroundWriter:
    """Writes `Snapshot`s of part files on its own thread; the newest snapshot per file wins."""

    def __init__(self, schema):
        self.schema = schema
        self.pending: dict[Path, Snapshot] = {}
        self.failed: dict[Path, Snapshot] = {}    # final snapshots whose write failed: retried with the next
        self.written: dict[Path, int] = {}        # rows in each open file as last written
        self.sizes: dict[Path, int] = {}          # its bytes on disk
        self.writes = self.errors = 0
        self.rows_dropped = 0                     # rows of rotated files given up while the disk failed
        self.last_error: str | None = None
        self.busy = self.stopping = False
        self.jobs: list = []                      # other disk work (pruning), in order, after the writes
        self.condition = threading.Condition()
        self.thread = threading.Thread(target=self._run, name="parquet-sink", daemon=True)
        self.thread.start()

    def submit(self, path: Path, snapshot: Snapshot) -> None:
        with self.condition:
            if self.failed:                       # a published file's last rows are retried
                self.pending = {**self.failed, **self.pending}
                self.failed = {}
            self.pending[path] = snapshot         # replacing keeps the file's place in the queue
            self._give_up_the_oldest_unwritten()
            self.condition.notify()

    def _give_up_the_oldest_unwritten(self) -> None:
        """Bound what rotated files waiting for the disk hold (MAX_UNWRITTEN_BYTES): the oldest
        go first, the newest always stays. Called with the condition held, after `failed` was
        merged into `pending` (oldest first), so every file still waiting is in `pending`."""
        waiting = [(path, snapshot) for path, snapshot in self.pending.items() if snapshot.publish]
        held = sum(snapshot.nbytes for _, snapshot in waiting)
        given_up = []
        for path, snapshot in waiting[:-1]:
            if held <= MAX_UNWRITTEN_BYTES:
                break
            del self.pending[path]
            held -= snapshot.nbytes
            self.rows_dropped += snapshot.rows
            given_up.append(path)
        if given_up:
            event("statistics-write-failed",
                  f"statistics: {len(given_up)} part file(s) given up after their writes kept failing "
                  f"(the oldest first; {self.rows_dropped} rows given up so far): {', '.join(map(str, given_up))}")

    def call(self, job) -> None:
        """Run `job()` on the writer's thread (disk work that must not hold up the loop either)."""
        with self.condition:
            self.jobs.append(job)
            self.condition.notify()

    def flush(self, timeout: float) -> bool:
        """Wait until everything submitted is on disk (or failed); False at the deadline."""
        deadline = time.monotonic() + timeout
        with self.condition:
            while self.pending or self.jobs or self.busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.condition.wait(left)
        return True

    def stop(self, timeout: float) -> bool:
        flushed = self.flush(timeout)
        with self.condition:
            self.stopping = True
            self.condition.notify_all()
        self.thread.join(timeout)
        return flushed

    def _run(self) -> None:
        while True:
            with self.condition:
                while not self.pending and not self.jobs and not self.stopping:
                    self.condition.wait()
                if self.pending:
                    path = next(iter(self.pending))
                    snapshot = self.pending.pop(path)
                    job = None
                elif self.jobs:
                    job = self.jobs.pop(0)
                else:
                    return
                self.busy = True
            try:
                if job is None:
                    self._apply(path, snapshot)
                else:
                    self._run_job(job)
            finally:
                with self.condition:
                    self.busy = False
                    self.condition.notify_all()

    def _apply(self, path: Path, snapshot: Snapshot) -> None:
        try:
            if self.written.get(path) != snapshot.rows:
                self._write(path, snapshot.batches)
                self.written[path] = snapshot.rows
            if snapshot.publish:
                publish(open_name(path), path)
                self.written.pop(path, None)
                self.sizes.pop(path, None)
        except Exception as err:  # disk full, permissions: keep the rows, the next interval retries
            if snapshot.publish:
                with self.condition:
                    self.failed[path] = snapshot
            self.errors += 1
            if self.last_error != str(err):
                event("statistics-write-failed", f"statistics not written to {path} (will retry every interval): {err}")
            self.last_error = str(err)

    def _run_job(self, job) -> None:
        try:
            job()
        except Exception as err:    # a job says what it failed at; the writer goes on
            self.errors += 1
            self.last_error = str(err)
            event("statistics-write-failed", f"statistics: {err}")

    def _write(self, path: Path, batches: list) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq
        temporary = path.with_name(f".{path.name}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # One chunk per column, not one per interval: writing thousands of tiny chunks is 4x slower.
            table = pa.Table.from_batches(batches, schema=self.schema).combine_chunks()
            with open(temporary, "wb") as handle:
                pq.write_table(table, handle, compression=COMPRESSION)
                handle.flush()
                os.fsync(handle.fileno())         # the rename must not outrun the data on power loss
            os.replace(temporary, open_name(path))
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        self.sizes[path] = open_name(path).stat().st_size
        self.writes += 1


class RollingParquetFile:
    """The part file rows go to now; rotates by UTC hour (or period), row count and size on disk."""

    def __init__(self, root: Path, router: str, writer: BackgroundWriter,
                 max_rows: int = 10_000, max_bytes: int = 64 << 20, period_minutes: int = 60):
        self.root, self.router, self.writer = root, router, writer
        self.max_rows, self.max_bytes, self.period_minutes = max_rows, max_bytes, period_minutes
        self.path: Path | None = None             # the published name; grows under open_name(path)
        self.period: dt.datetime | None = None
        self.batches: list = []
        self.rows = 0
        self.last_part: tuple[Path, int] | None = None

    def append(self, batch, when: dt.datetime) -> Path:
        """Add one interval's rows (a pyarrow RecordBatch) and schedule the file's rewrite."""
        if self.path is not None and self._full(batch.num_rows, when):
            self.rotate()
        if self.path is None:
            self._open(when)
        self.batches.append(batch)
        self.rows += batch.num_rows
        self.writer.submit(self.path, Snapshot(list(self.batches), self.rows))
        return self.path

    def rotate(self) -> None:
        """Publish the current file (after its last snapshot is written) and start afresh."""
        if self.path is not None:
            self.writer.submit(self.path, Snapshot(list(self.batches), self.rows, publish=True))
        self.path, self.period, self.batches, self.rows = None, None, [], 0

    def _full(self, adding: int, when: dt.datetime) -> bool:
        return (self._period_of(when) != self.period or self.rows + adding > self.max_rows
                or self.writer.sizes.get(self.path, 0) >= self.max_bytes)

    def _open(self, when: dt.datetime) -> None:
        directory = partition_dir(self.root, self.router, when)
        number = next_part_number(directory)
        # The file rotated a moment ago may still be queued, not on disk yet: never reuse its number.
        if self.last_part is not None and self.last_part[0] == directory:
            number = max(number, self.last_part[1] + 1)
        self.last_part = (directory, number)
        self.path = directory / f"part-{number:05d}.parquet"
        self.period = self._period_of(when)

    def _period_of(self, when: dt.datetime) -> dt.datetime:
        """The UTC period `when` falls in: an hour by default, or `period_minutes` from midnight."""
        midnight = when.astimezone(dt.timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
        minutes = int((when - midnight).total_seconds() // 60)
        return midnight + dt.timedelta(minutes=minutes - minutes % self.period_minutes)
