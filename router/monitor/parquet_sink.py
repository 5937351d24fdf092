"""The Parquet statistics sink: a supervisor extension that records every portal's counters.

Selected the DRO way, `<monitor interval="5"><format-module module="parquet" options="dir=PATH"/>`;
every interval it reads each portal's shared counters (a copy of a few hundred bytes, so the
supervisor's loop is not held up) and appends one row per portal to the router's current part file
(router/monitor/parquet_files.py), which a background thread rewrites atomically and publishes
when it rotates. Workers never see any of this: statistics cost forwarding nothing.

Options (`options="k=v;k=v"`): `dir` (default: see `default_directory`); rotation limits of one
part file: `rotate_minutes` (default 60, how late the newest rows become visible to readers),
`max_rows` (default 10000) and `max_mb` (default 64); `retain_days` (default 90; 0 keeps
everything): date directories older than that many days, today counted, are removed at start and
as each UTC day begins (one that failed is tried again every PRUNE_RETRY_INTERVAL), so a router
left running for months does not fill its disk.

`DIR/router=NAME` is written by one running router at a time (router/monitor/directory_claim.py).
While another router of the same name holds it, this one writes nothing there and says so, in the
log (UMR-5001-3) and in `routerctl status`, and tries again every interval; when the other stops,
it takes the directory over (publishing what the other left open, if it died) and writes on. Its
counters are cumulative, so the intervals it missed only make one interval longer in the data.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
from pathlib import Path

from router.eventlog import event
from router.monitor import stats_schema
from router.monitor.directory_claim import DirectoryClaim
from router.monitor.parquet_files import BackgroundWriter, RollingParquetFile, expired_dates, recover, remove_date

log = logging.getLogger(__name__)

FLUSH_TIMEOUT = 10.0          # at shutdown, for the last interval to reach the disk
RETAIN_DAYS = 90              # a quarter's history for spark_pipeline, a bounded disk
# After a removal of old statistics failed (an I/O error, a file that cannot be unlinked for now):
# soon enough that a passing fault does not leave them for a day, seldom enough not to flood the log.
PRUNE_RETRY_INTERVAL = dt.timedelta(minutes=10)
SYSTEM_DIRECTORY = Path("/var/lib/umrouter/stats")


def make(supervisor) -> "ParquetSink | None":
    """The extension factory (router/extensions.py): a sink when `<monitor>` asks for parquet."""
    monitor = supervisor.config.daemon.monitor
    if monitor.format_module != "parquet" or monitor.interval <= 0:
        return None
    options = monitor.format_options
    directory = Path(options["dir"]) if options.get("dir") else default_directory()
    sink = ParquetSink(supervisor.name, lambda: supervisor.workers, directory,
                       max_rows=int(_positive(options, "max_rows", 10_000)),
                       max_bytes=int(_positive(options, "max_mb", 64) * (1 << 20)),
                       period_minutes=max(1, min(1440, int(_positive(options, "rotate_minutes", 60)))),
                       retain_days=_retain_days(options))
    sink.start(supervisor.loop, monitor.interval)
    log.info("statistics every %d s to %s", monitor.interval, sink.root / f"router={supervisor.name}")
    return sink


def _positive(options: dict[str, str], key: str, default: float) -> float:
    """A bad rotation limit is the operator's typo: say so and keep the default, keep routing."""
    try:
        value = float(options.get(key, default))
        if value > 0:
            return value
    except ValueError:
        pass
    log.error("<format-module module=\"parquet\"> option %s=%r is not a positive number; using %s",
              key, options.get(key), default)
    return default


def _retain_days(options: dict[str, str]) -> int:
    """`retain_days`: a whole number of days, 0 to keep everything."""
    text = options.get("retain_days", str(RETAIN_DAYS))
    if text.strip().isdigit():
        return int(text)
    log.error("<format-module module=\"parquet\"> option retain_days=%r is not a whole number of days "
              "(0 keeps everything); using %d", text, RETAIN_DAYS)
    return RETAIN_DAYS


def default_directory() -> Path:
    """`$STATE_DIRECTORY/stats` (systemd's StateDirectory=), else /var/lib/umrouter/stats when
    writable, else the user's state directory: a router started by hand still keeps statistics."""
    candidates = []
    if os.environ.get("STATE_DIRECTORY"):
        candidates.append(Path(os.environ["STATE_DIRECTORY"].split(":")[0]) / "stats")
    candidates.append(SYSTEM_DIRECTORY)
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    candidates.append(Path(state_home) / "umrouter" / "stats")
    for directory in candidates:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(directory, os.W_OK | os.X_OK):
            return directory
    return candidates[-1]          # the write fails with a clear message, the router keeps routing


class ParquetSink:
    def __init__(self, router: str, workers, root: Path, max_rows: int = 10_000, max_bytes: int = 64 << 20,
                 period_minutes: int = 60, clock=lambda: dt.datetime.now(dt.timezone.utc),
                 retain_days: int = RETAIN_DAYS):
        self.router, self.workers, self.root, self.clock = router, workers, Path(root), clock
        self.retain_days = retain_days
        self.pruned_for: dt.date | None = None    # the UTC day old statistics were last removed for
        self.pruning = False                      # a removal is queued on the writer's thread
        self.prune_retry_at: dt.datetime | None = None    # after a failed one
        self.dates_removed = 0
        self.schema = stats_schema.arrow_schema()
        self.writer = BackgroundWriter(self.schema)
        self.file = RollingParquetFile(self.root, router, self.writer, max_rows, max_bytes, period_minutes)
        self.epochs: dict[str, tuple[object, dt.datetime]] = {}   # portal -> (segment, first seen)
        self.writers: dict[str, tuple[int | None, int]] = {}      # portal -> (worker pid, restarts then)
        self.seen: dict[str, object] = {}                         # portal -> its worker, as of the last row
        self.timer = None
        self.tick_errors = 0
        self.claim = DirectoryClaim(self.root, router)
        self.held_by: str | None = None           # the other router writing our directory, as it says
        self.claim_error: str | None = None       # why the claim could not even be tried, last said
        self.rows_not_written = 0                 # read while another router held the directory

    def start(self, loop, interval: float) -> None:
        self.tick()            # a first row at start: the baseline every later delta counts from
        self.timer = loop.call_every(interval, self.tick)

    def tick(self) -> None:
        # Counted here as tick_errors, which status reports (the loop counts failures of any callback).
        try:
            now = self.clock()
            batch = self.read_batch(now)
            if not self._directory_is_ours():
                self.rows_not_written += batch.num_rows
                return
            if batch.num_rows:
                self.file.append(batch, now)
            self._prune_when_the_day_begins(now)
        except Exception:
            self.tick_errors += 1
            log.exception("statistics interval skipped")

    def _directory_is_ours(self) -> bool:
        """Claim `router=NAME` if no other router holds it (directory_claim.py); on taking it,
        publish what an earlier writer left open when it died."""
        if self.claim.held:
            return True
        directory = self.claim.path.parent
        try:
            holder = self.claim.take()
        except OSError as err:
            # Nor would a write succeed: the writer says so and retries, with the rows kept.
            if str(err) != self.claim_error:
                self.claim_error = str(err)
                log.error("statistics: cannot claim %s: %s; trying again every interval", directory, err)
            return True
        if holder is not None:
            if holder != self.held_by:
                self.held_by = holder
                event("statistics-directory-taken",
                      f"statistics: NOT written: {directory} is being written by another router ({holder}). "
                      f"Two routers are named '{self.router}': give one of them another <daemon><name>. "
                      f"Trying again every interval")
            return False
        if self.held_by is not None:
            log.info("statistics: %s is ours now (the router that held it stopped); writing", directory)
        self.held_by = self.claim_error = None
        try:
            for published in recover(self.root, self.router, keep=self.file.path):
                log.info("published %s, left open by an earlier run that did not stop cleanly", published)
        except OSError as err:          # an unwritable directory is reported by every write, not fatal
            log.error("statistics: cannot tidy %s: %s", directory, err)
        return True

    def _prune_when_the_day_begins(self, now: dt.datetime) -> None:
        """Once per UTC day; a day whose removal failed is tried again after PRUNE_RETRY_INTERVAL."""
        today = now.astimezone(dt.timezone.utc).date()
        if self.retain_days <= 0 or today == self.pruned_for or self.pruning:
            return
        if self.prune_retry_at is not None and now < self.prune_retry_at:
            return
        self.pruning = True
        self.writer.call(lambda: self._prune(today, now))

    def _prune(self, today: dt.date, now: dt.datetime) -> None:
        """On the writer's thread: remove the date directories older than `retain_days`."""
        try:
            self._remove_expired(today)
        except OSError:
            self.prune_retry_at = now + PRUNE_RETRY_INTERVAL
            raise
        else:
            self.pruned_for, self.prune_retry_at = today, None
        finally:
            self.pruning = False

    def _remove_expired(self, today: dt.date) -> None:
        for directory in expired_dates(self.root, self.router, today, self.retain_days):
            try:
                files = remove_date(directory)
            except OSError as err:
                minutes = PRUNE_RETRY_INTERVAL.total_seconds() / 60
                raise OSError(f"cannot remove {directory} (older than retain_days={self.retain_days}): "
                              f"{err}; trying again in {minutes:.0f} minutes") from None
            if not files:           # only what is not ours is left there: said once already
                continue
            self.dates_removed += 1
            event("statistics-removed", f"statistics: removed {directory}, {files} file(s), older than "
                                        f"{self.retain_days} day(s) (<format-module> retain_days)")

    def read_batch(self, now: dt.datetime):
        """One row per portal, as of `now`, after a last row for each portal a reload removed."""
        import pyarrow as pa
        current = dict(self.workers())
        rows = self._last_rows_of_removed(current, now)
        rows += [self._row(name, worker, now) for name, worker in current.items() if worker.counters is not None]
        self.seen = {name: worker for name, worker in current.items() if worker.counters is not None}
        self._forget_removed_portals()
        columns = {name: [row[name] for row in rows] for name in stats_schema.COLUMN_NAMES}
        return pa.RecordBatch.from_pydict(columns, schema=self.schema)

    def _last_rows_of_removed(self, current: dict, now: dt.datetime) -> list[dict]:
        """A portal removed since the last row still counted until it went: the supervisor keeps
        the final figures in the removed worker's counters, so they are recorded once, or that last
        interval's traffic and drops would be missing from every total. One removed and added back
        within the interval has its old segment's row a microsecond before the new one's first,
        so (portal, ts) stays unique and the old row sorts first."""
        rows = []
        for name, worker in self.seen.items():
            now_there = current.get(name)
            if now_there is worker or worker.counters is None:
                continue
            when = now if now_there is None else now - dt.timedelta(microseconds=1)
            rows.append(self._row(name, worker, when))
        return rows

    def _row(self, name: str, worker, now: dt.datetime) -> dict:
        counters = worker.counters.snapshot()
        pid, restarts = self._writer(name, worker, counters)
        row = {name: counters.get(name) for name in stats_schema.COUNTER_COLUMNS}
        row.update(ts=now, router=self.router, portal=name, portal_kind=worker.config.kind,
                   domain_id=getattr(worker.config, "domain_id", None), worker_pid=pid,
                   worker_restarts=restarts, counters_epoch=self._epoch(name, worker, now))
        return row

    def _writer(self, name: str, worker, counters: dict) -> tuple[int | None, int]:
        """The worker whose counters these are, and the restart count when it started. The pid is
        the one the worker wrote at boot (a dead worker's pid stays until its successor writes its
        own); the restart count is taken when that pid first appears, so both change in the same
        row and one restart is one segment boundary, not two (the supervisor counts the restart
        when it reaps, an interval or so before the new worker writes its pid)."""
        pid = counters.get("worker_pid") or (worker.process.pid if worker.process is not None else None)
        known = self.writers.get(name)
        if known is None or known[0] != pid:
            known = self.writers[name] = (pid, worker.restarts)
        return known

    def _epoch(self, name: str, worker, now: dt.datetime) -> dt.datetime:
        # A different segment object means the counters started again from zero (the portal was
        # removed and added back); the same one means a restarted worker continued them.
        known = self.epochs.get(name)
        if known is None or known[0] is not worker.segment:
            known = self.epochs[name] = (worker.segment, now)
        return known[1]

    def _forget_removed_portals(self) -> None:
        current = self.workers()
        for name in [n for n in self.epochs if n not in current]:
            del self.epochs[name]
            self.writers.pop(name, None)

    def close(self) -> None:
        """At shutdown (workers already stopped): the final counters, then wait for the disk."""
        if self.timer is not None:
            self.timer.cancel()
        self.tick()
        self.file.rotate()
        if not self.writer.stop(FLUSH_TIMEOUT):
            log.error("statistics: the last interval was not written within %.0f s", FLUSH_TIMEOUT)
        self.claim.release()            # after the last publish: the next router starts clean

    def status(self) -> dict:
        """For the web monitor and routerctl: is the sink keeping up."""
        return {"dir": str(self.root), "file": str(self.file.path) if self.file.path else None,
                "rows_in_file": self.file.rows, "writes": self.writer.writes,
                "write_errors": self.writer.errors, "last_error": self.writer.last_error,
                "rows_dropped": self.writer.rows_dropped,
                "tick_errors": self.tick_errors, "retain_days": self.retain_days,
                "dates_removed": self.dates_removed,
                "held_by": self.held_by, "rows_not_written": self.rows_not_written}
