"""The Parquet statistics sink: rows, schema, atomic files, rotation, failures, the extension hook."""
from __future__ import annotations

import datetime as dt
import os
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from router.config.model import DaemonConfig, MonitorConfig
from router.monitor import parquet_files, parquet_sink, stats_schema
from router.monitor.directory_claim import DirectoryClaim
from router.monitor.counters import PortalCounters

T0 = dt.datetime(2026, 3, 1, 10, 30, 0, tzinfo=dt.timezone.utc)


@dataclass
class Portal:
    name: str
    kind: str = "endpoint"
    domain_id: int | None = 1


@dataclass
class Process:
    pid: int


@dataclass
class Worker:
    config: Portal
    counters: PortalCounters = field(default_factory=PortalCounters)
    segment: object = field(default_factory=object)
    process: Process | None = field(default_factory=lambda: Process(4242))
    restarts: int = 0


class Clock:
    def __init__(self, start: dt.datetime = T0):
        self.now = start

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


@pytest.fixture
def workers():
    lan1, lan2 = Worker(Portal("LAN1")), Worker(Portal("EAST", "peer", None))
    lan1.counters.set("worker_pid", 4242)
    return {"LAN1": lan1, "EAST": lan2}


@pytest.fixture
def make_sink(tmp_path, workers):
    made = []

    def make(**options):
        sink = parquet_sink.ParquetSink("r1", lambda: workers, tmp_path / "stats", clock=options.pop("clock", Clock()),
                                        **options)
        made.append(sink)
        return sink
    yield make
    for sink in made:
        sink.writer.stop(5)
        sink.claim.release()


def published(root: Path) -> list[Path]:
    """What a reader sees: Spark and pyarrow skip the hidden `.open` and `.tmp` files."""
    return sorted(p for p in root.rglob("part-*.parquet"))


def open_files(root: Path) -> list[Path]:
    return sorted(root.rglob(".part-*.parquet.open"))


def rows_of(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def test_one_row_per_portal_with_identity_columns_counters_and_a_versioned_schema(make_sink, workers, tmp_path):
    sink = make_sink()
    workers["LAN1"].counters.add_pair("transport_topic_fragments_rcvd", "transport_topic_fragment_bytes_rcvd", 3, 192)
    sink.tick()
    sink.close()
    [path] = published(tmp_path / "stats")
    assert path == tmp_path / "stats" / "router=r1" / "date=2026-03-01" / "part-00001.parquet"
    table = pq.read_table(path)
    assert table.schema.metadata[stats_schema.METADATA_KEY] == stats_schema.SCHEMA_VERSION.encode()
    assert table.column_names == list(stats_schema.COLUMN_NAMES)
    rows = {row["portal"]: row for row in table.to_pylist()}
    assert rows["LAN1"]["ts"] == T0 and rows["LAN1"]["counters_epoch"] == T0
    assert (rows["LAN1"]["router"], rows["LAN1"]["portal_kind"], rows["LAN1"]["domain_id"]) == ("r1", "endpoint", 1)
    assert (rows["LAN1"]["worker_pid"], rows["LAN1"]["worker_restarts"]) == (4242, 0)
    lan1 = rows["LAN1"]
    assert (lan1["transport_topic_fragments_rcvd"], lan1["transport_topic_fragment_bytes_rcvd"]) == (3, 192)
    assert (rows["EAST"]["portal_kind"], rows["EAST"]["domain_id"]) == ("peer", None)
    # a worker that has not booted yet has not written its pid: the supervisor's process pid stands in
    assert rows["EAST"]["worker_pid"] == 4242


def test_the_open_part_is_complete_after_every_interval_and_published_only_when_it_rotates(make_sink):
    clock = Clock()
    sink = make_sink(clock=clock)
    for _ in range(3):
        sink.tick()
        clock.advance(1)
        assert sink.writer.flush(5)
        assert not published(sink.root) and not list(sink.root.rglob("*.tmp"))
    [current] = open_files(sink.root)
    assert pq.read_table(current).num_rows == 6          # what a crash now would leave: every interval
    sink.close()
    assert [pq.read_table(p).num_rows for p in published(sink.root)] == [8] and not open_files(sink.root)


def test_epoch_stays_across_a_worker_restart_and_changes_with_a_new_counter_segment(make_sink, workers):
    clock = Clock()
    sink = make_sink(clock=clock)
    sink.tick()
    clock.advance(1)
    workers["LAN1"].restarts, workers["LAN1"].process = 1, Process(5000)      # same segment: totals continue
    sink.tick()
    clock.advance(1)
    workers["EAST"].segment = object()                                        # removed and re-added by a reload
    sink.tick()
    sink.close()
    epochs = {(r["portal"], r["ts"]): r["counters_epoch"] for r in rows_of(published(sink.root)[0])}
    assert epochs[("LAN1", T0 + dt.timedelta(seconds=2))] == T0
    assert epochs[("EAST", T0 + dt.timedelta(seconds=1))] == T0
    assert epochs[("EAST", T0 + dt.timedelta(seconds=2))] == T0 + dt.timedelta(seconds=2)


def _retire(workers: dict, name: str) -> Worker:
    """What the supervisor's reload does to a removed portal: its worker leaves the table and keeps
    a copy of its counters' last values (the shared segment is unlinked)."""
    worker = workers.pop(name)
    last = PortalCounters()
    last.values[:] = worker.counters.values
    worker.counters = last
    return worker


def test_a_portal_removed_by_a_reload_records_what_it_counted_in_its_last_interval(make_sink, workers):
    clock = Clock()
    sink = make_sink(clock=clock)
    lan1 = workers["LAN1"]
    lan1.counters.add_pair("transport_topic_fragments_sent", "transport_topic_fragment_bytes_sent", 5, 500)
    sink.tick()
    clock.advance(5)
    lan1.counters.add_pair("transport_topic_fragments_sent", "transport_topic_fragment_bytes_sent", 7, 700)
    _retire(workers, "LAN1")                       # removed before the next interval's row
    sink.tick()
    clock.advance(5)
    sink.tick()
    # Removed and added back by the next reload, between two rows: the old segment's last
    # figures and the new segment's first row are both recorded, the old one first.
    workers["EAST"].counters.add("data_fragments_sent", 3)
    _retire(workers, "EAST")
    workers["EAST"] = Worker(Portal("EAST", "peer", None))
    workers["EAST"].counters.add("data_fragments_sent", 1)
    clock.advance(5)
    sink.tick()
    clock.advance(5)
    sink.close()
    rows = rows_of(published(sink.root)[0])
    lan1_rows = [(r["ts"], r["transport_topic_fragments_sent"], r["transport_topic_fragment_bytes_sent"])
                 for r in rows if r["portal"] == "LAN1"]
    assert lan1_rows == [(T0, 5, 500), (T0 + dt.timedelta(seconds=5), 12, 1200)]     # once, not every interval
    east = [(r["ts"], r["counters_epoch"], r["data_fragments_sent"]) for r in rows if r["portal"] == "EAST"]
    replaced = T0 + dt.timedelta(seconds=15)
    assert east[-3:] == [(replaced - dt.timedelta(microseconds=1), T0, 3), (replaced, replaced, 1),
                         (replaced + dt.timedelta(seconds=5), replaced, 1)]
    assert len({(r["portal"], r["ts"]) for r in rows}) == len(rows)     # one row per portal and time


def test_a_worker_restart_changes_pid_and_restart_count_in_the_same_row(make_sink, workers):
    clock = Clock()
    sink = make_sink(clock=clock)
    lan1 = workers["LAN1"]
    steps = [lambda: None,
             lambda: setattr(lan1, "process", None) or setattr(lan1, "restarts", 1),   # reaped
             lambda: setattr(lan1, "process", Process(5000)),                          # respawned
             lambda: lan1.counters.set("worker_pid", 5000)]                            # booted
    for step in steps:
        step()
        sink.tick()
        clock.advance(1)
    sink.close()
    identities = [(r["worker_pid"], r["worker_restarts"]) for r in rows_of(published(sink.root)[0])
                  if r["portal"] == "LAN1"]
    assert identities == [(4242, 0), (4242, 0), (4242, 0), (5000, 1), (5000, 1)]


def test_rotates_at_the_hour_and_the_date_directory_follows(make_sink):
    clock = Clock(dt.datetime(2026, 3, 1, 23, 59, 59, tzinfo=dt.timezone.utc))
    sink = make_sink(clock=clock)
    sink.tick()
    clock.advance(2)
    sink.tick()
    assert sink.writer.flush(5)
    assert [p.relative_to(sink.root).as_posix() for p in published(sink.root)] == [
        "router=r1/date=2026-03-01/part-00001.parquet"]
    sink.close()
    assert [p.relative_to(sink.root).as_posix() for p in published(sink.root)] == [
        "router=r1/date=2026-03-01/part-00001.parquet", "router=r1/date=2026-03-02/part-00001.parquet"]


def test_rotates_by_rows_by_size_and_by_a_shorter_period_never_reusing_a_part_number(make_sink):
    clock = Clock()
    by_rows = make_sink(clock=clock, max_rows=4)
    for _ in range(5):
        by_rows.tick()
        clock.advance(1)
    by_rows.close()                                       # its final tick is the sixth interval
    assert [pq.read_table(p).num_rows for p in published(by_rows.root)] == [4, 4, 4]
    by_size = make_sink(clock=Clock(T0 + dt.timedelta(seconds=30)), max_bytes=1)
    for _ in range(2):
        by_size.tick()
        assert by_size.writer.flush(5)                    # the size is known once the file is on disk
    assert [p.name for p in published(by_rows.root)][-1] == "part-00004.parquet"
    by_size.writer.stop(5)
    by_size.claim.release()                               # its process ends
    clock = Clock(T0 + dt.timedelta(minutes=4))
    by_period = make_sink(clock=clock, period_minutes=5)
    by_period.tick()
    clock.advance(60)
    by_period.tick()
    assert by_period.writer.flush(5)
    assert [p.name for p in published(by_rows.root)][-1] == "part-00006.parquet"


def test_after_a_crash_the_next_start_publishes_the_open_part_and_drops_half_written_ones(make_sink, workers):
    crashed = make_sink()
    crashed.tick()
    crashed.tick()
    assert crashed.writer.flush(5)            # then the process dies: no close(), nothing published
    crashed.claim.release()                   # (its claim on the directory goes with it)
    [left_open] = open_files(crashed.root)
    half = left_open.with_name(".part-00001.parquet.tmp")
    half.write_bytes(b"PAR1 half a file")
    restarted = make_sink()
    restarted.start(loop=FakeLoop(), interval=5)
    assert restarted.writer.flush(5)
    assert not half.exists()
    [recovered] = published(crashed.root)
    assert recovered.name == "part-00001.parquet" and pq.read_table(recovered).num_rows == 4
    assert [p.name for p in open_files(crashed.root)] == [".part-00002.parquet.open"]


HOLD_CLAIM = """
import sys
from router.monitor.directory_claim import DirectoryClaim
assert DirectoryClaim(sys.argv[1], sys.argv[2]).take() is None
print("held", flush=True)
sys.stdin.read()
"""


def claim_in_another_process(root: Path, router: str = "r1") -> subprocess.Popen:
    """Another router's supervisor: a process holding the claim on `router=<router>` until killed."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD_CLAIM, str(root), router], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    return holder


def test_a_directory_another_router_of_the_same_name_writes_is_left_to_it_until_it_stops(make_sink, caplog):
    clock = Clock()
    sink = make_sink(clock=clock)
    other = claim_in_another_process(sink.root)
    try:
        theirs = parquet_files.partition_dir(sink.root, "r1", T0) / ".part-00001.parquet.open"
        theirs.parent.mkdir(parents=True)
        theirs.write_bytes(b"the other router's growing file")
        with caplog.at_level("INFO", logger="router"):
            sink.start(FakeLoop(), 5)
            clock.advance(5)
            sink.tick()
            assert sink.writer.flush(5)
        # Neither its live file published as a crash's leftover, nor anything of ours written there.
        assert theirs.read_bytes() == b"the other router's growing file" and not published(sink.root)
        assert open_files(sink.root) == [theirs]
        said = [r.getMessage() for r in caplog.records if "UMR-5001-3" in r.getMessage()]
        assert len(said) == 1, "said once, not every interval"
        assert f"pid {other.pid} on {socket.gethostname()}" in said[0] and "named 'r1'" in said[0]
        status = sink.status()
        assert status["held_by"].startswith(f"pid {other.pid} on ") and status["rows_not_written"] == 4
        from router.admin.commands.status import _statistics
        assert "NOT written" in _statistics(status) and "4 rows not written" in _statistics(status)
    finally:
        other.kill()                                # it dies: no clean stop, its file left open
        other.wait()
    clock.advance(5)
    with caplog.at_level("INFO", logger="router"):
        sink.tick()
    assert sink.status()["held_by"] is None and "is ours now" in caplog.text
    sink.close()
    assert [p.name for p in published(sink.root)] == ["part-00001.parquet", "part-00002.parquet"]
    assert (published(sink.root)[0].read_bytes() == b"the other router's growing file"), "published for it"
    assert len(rows_of(published(sink.root)[1])) == 4           # this interval and close's: 2 portals each


def test_rows_written_before_the_claim_could_be_tried_are_not_taken_for_a_crash_s_leftovers(make_sink, caplog):
    """A claim that cannot even be tried (here `.writer` is a directory) leaves the rows to the
    writer; once the claim is taken, the part it has been writing is live, not left over."""
    clock = Clock()
    sink = make_sink(clock=clock)
    sink.claim.path.mkdir(parents=True)
    sink.tick()
    assert sink.writer.flush(5) and open_files(sink.root) and "cannot claim" in caplog.text
    sink.claim.path.rmdir()
    clock.advance(5)
    sink.tick()
    assert sink.claim.held and sink.writer.flush(5)
    sink.close()
    [only] = published(sink.root)
    assert len(rows_of(only)) == 6, "every interval once, in one file"


def test_a_forked_worker_does_not_keep_the_supervisor_s_claim(tmp_path):
    claim = DirectoryClaim(tmp_path, "r1")
    assert claim.take() is None and claim.take() is None          # taken once, held after
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:                                               # a worker: lives on after the supervisor
        os.close(write_end)
        os.read(read_end, 1)
        os._exit(0)
    os.close(read_end)
    try:
        assert DirectoryClaim(tmp_path, "r1").take() is not None, "the parent holds it"
        claim.release()
        other = claim_in_another_process(tmp_path)
        other.kill()
        other.wait()
    finally:
        os.close(write_end)
        os.waitpid(child, 0)


def test_a_reader_never_sees_a_half_written_or_changing_file(make_sink):
    clock = Clock()
    sink = make_sink(clock=clock, max_rows=20)
    stop, failures, seen = threading.Event(), [], {}

    def read_constantly():
        while not stop.is_set():
            for path in published(sink.root):
                try:
                    rows = pq.read_table(path).num_rows
                except Exception as err:  # noqa: BLE001 - any failure is the finding
                    failures.append(err)
                    continue
                if seen.setdefault(path, rows) != rows:
                    failures.append(f"{path.name} changed from {seen[path]} to {rows} rows")

    reader = threading.Thread(target=read_constantly)
    reader.start()
    try:
        for _ in range(200):
            clock.advance(1)
            sink.tick()
            assert sink.writer.flush(5)
    finally:
        stop.set()
        reader.join()
    assert not failures and len(seen) >= 15
    sink.close()
    assert sum(pq.read_table(p).num_rows for p in published(sink.root)) == 402


def test_a_failing_disk_is_reported_and_retried_and_never_raises(make_sink, caplog):
    sink = make_sink()
    sink.root.parent.mkdir(parents=True, exist_ok=True)
    sink.root.write_text("a file where the directory should be")
    sink.tick()
    assert sink.writer.flush(5)
    assert sink.status()["write_errors"] == 1 and "not written" in caplog.text
    sink.root.unlink()
    sink.close()
    assert pq.read_table(published(sink.root)[0]).num_rows == 4        # the failed interval's rows too


def _unwritten_rows(writer: parquet_files.BackgroundWriter) -> int:
    """Rows of rotated part files the writer still holds in memory, waiting for the disk."""
    with writer.condition:
        held = {**writer.failed, **{path: s for path, s in writer.pending.items() if s.publish}}
    return sum(snapshot.rows for snapshot in held.values())


def test_a_disk_that_stays_broken_does_not_grow_the_supervisor_s_memory_for_ever(make_sink, monkeypatch, caplog):
    files_kept = 5
    clock = Clock()
    sink = make_sink(clock=clock, max_rows=2)                            # a part file per interval
    sink.root.parent.mkdir(parents=True, exist_ok=True)
    sink.root.write_text("a file where the directory should be")        # every write fails, for days
    sink.tick()
    one_file = sink.file.batches[0].nbytes
    monkeypatch.setattr(parquet_files, "MAX_UNWRITTEN_BYTES", files_kept * one_file, raising=False)
    assert sink.writer.flush(5)
    clock.advance(5)
    for _ in range(39):
        sink.tick()
        assert sink.writer.flush(5)
        clock.advance(5)
    assert _unwritten_rows(sink.writer) <= 2 * files_kept
    status = sink.status()
    assert status["rows_dropped"] == 2 * 39 - _unwritten_rows(sink.writer) > 0      # counted, and said
    assert "given up" in caplog.text
    sink.root.unlink()                                                   # the disk is back
    sink.close()
    rows = sum(pq.read_table(p).num_rows for p in published(sink.root))
    assert rows + sink.status()["rows_dropped"] == 2 * 41                # the newest are kept, none lost unseen


def test_a_slow_disk_does_not_hold_up_the_supervisor_loop(make_sink, monkeypatch):
    sink = make_sink()
    release, writing = threading.Event(), threading.Event()
    real_write = parquet_files.BackgroundWriter._write

    def slow_write(self, path, batches):
        writing.set()
        release.wait(10)
        real_write(self, path, batches)
    monkeypatch.setattr(parquet_files.BackgroundWriter, "_write", slow_write)
    sink.tick()
    assert writing.wait(5)
    sink.tick()                       # returns while the first write is still blocked
    sink.tick()
    release.set()
    sink.close()
    assert pq.read_table(published(sink.root)[0]).num_rows == 8


def test_close_records_the_final_counters_and_waits_for_the_disk(make_sink, workers):
    sink = make_sink()
    sink.start(FakeLoop(), 5)
    workers["LAN1"].counters.add("transport_topic_fragments_sent", 7)
    sink.close()
    rows = rows_of(published(sink.root)[0])
    assert [r["transport_topic_fragments_sent"] for r in rows if r["portal"] == "LAN1"] == [0, 7]
    assert not sink.writer.thread.is_alive()


class FakeLoop:
    def __init__(self):
        self.timers = []

    def call_every(self, interval, callback):
        timer = FakeTimer(interval, callback)
        self.timers.append(timer)
        return timer


class FakeTimer:
    def __init__(self, interval, callback):
        self.interval, self.callback, self.cancelled = interval, callback, False

    def cancel(self):
        self.cancelled = True


class FakeSupervisor:
    def __init__(self, monitor: MonitorConfig, workers):
        self.name, self.loop, self.workers = "r1", FakeLoop(), workers
        self.config = type("Config", (), {"daemon": DaemonConfig(name="r1", monitor=monitor)})()


def test_extension_runs_only_when_monitor_selects_parquet(tmp_path, workers):
    assert parquet_sink.make(FakeSupervisor(MonitorConfig(interval=0, format_module="parquet"), workers)) is None
    assert parquet_sink.make(FakeSupervisor(MonitorConfig(interval=5, format_module="csv"), workers)) is None
    supervisor = FakeSupervisor(MonitorConfig(interval=5, format_module="parquet",
                                              format_options={"dir": str(tmp_path / "s"), "max_rows": "oops"}),
                                workers)
    sink = parquet_sink.make(supervisor)
    try:
        assert sink.root == tmp_path / "s" and sink.file.max_rows == 10_000
        assert supervisor.loop.timers[0].interval == 5
    finally:
        sink.close()
    assert published(tmp_path / "s")


def test_default_directory_is_the_state_directory_else_the_system_one_else_the_user_s(tmp_path, monkeypatch):
    monkeypatch.setenv("STATE_DIRECTORY", f"{tmp_path / 'state'}:{tmp_path / 'other'}")
    monkeypatch.setattr(parquet_sink, "SYSTEM_DIRECTORY", tmp_path / "var")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert parquet_sink.default_directory() == tmp_path / "state" / "stats"
    monkeypatch.delenv("STATE_DIRECTORY")
    assert parquet_sink.default_directory() == tmp_path / "var"
    (tmp_path / "blocked").write_text("not a directory")
    monkeypatch.setattr(parquet_sink, "SYSTEM_DIRECTORY", tmp_path / "blocked" / "stats")
    assert parquet_sink.default_directory() == tmp_path / "xdg" / "umrouter" / "stats"


def test_the_sink_is_registered_as_a_supervisor_extension():
    from router import extensions
    assert "router.monitor.parquet_sink:make" in extensions.FACTORIES


def _date_dir(root: Path, router: str, day: dt.date, *names: str) -> Path:
    directory = root / f"router={router}" / f"date={day.isoformat()}"
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_bytes(b"x")
    return directory


def test_date_directories_older_than_retain_days_are_removed_at_start_and_as_each_day_begins(make_sink, caplog):
    clock = Clock()                                  # 2026-03-01
    sink = make_sink(clock=clock, retain_days=3)
    root, today = sink.root, T0.date()
    kept = [_date_dir(root, "r1", today - dt.timedelta(days=n), "part-00001.parquet") for n in (1, 2)]
    expired = _date_dir(root, "r1", today - dt.timedelta(days=3), "part-00001.parquet", "part-00002.parquet",
                        ".part-00003.parquet.tmp")
    expired_with_notes = _date_dir(root, "r1", today - dt.timedelta(days=40), "part-00001.parquet", "notes.txt")
    other_router = _date_dir(root, "r2", today - dt.timedelta(days=40), "part-00001.parquet")
    not_a_date = root / "router=r1" / "date=2026-02-30"
    not_a_date.mkdir()
    with caplog.at_level("INFO", logger="router"):
        sink.tick()
        assert sink.writer.flush(5)
    assert not expired.exists() and all(directory.exists() for directory in kept)
    assert sorted(p.name for p in expired_with_notes.iterdir()) == ["notes.txt"], "not ours: left"
    assert other_router.exists() and not_a_date.exists()
    assert sink.dates_removed == 2
    # The half-written file went first, as at every start (recover); the published ones by age.
    assert any(f"removed {expired}, 2 file(s), older than 3 day(s)" in r.getMessage() for r in caplog.records)
    sink.tick()                                      # the same day: nothing more to look at
    clock.advance(86400)                             # the next day: one more directory expires
    sink.tick()
    assert sink.writer.flush(5)
    assert not kept[1].exists() and kept[0].exists()
    assert sink.status()["dates_removed"] == 3 and sink.status()["retain_days"] == 3
    # Today's and yesterday's rows are written as before (yesterday's file published as the day turned).
    assert [p.relative_to(root).as_posix() for p in open_files(root)] == [
        "router=r1/date=2026-03-02/.part-00001.parquet.open"]
    assert len(rows_of(root / "router=r1" / "date=2026-03-01" / "part-00001.parquet")) == 2 * len(sink.workers())


def test_a_failed_removal_of_old_statistics_is_tried_again_the_same_day(make_sink, caplog):
    """A removal that fails (an I/O error, a file the filesystem will not unlink for now) is tried
    again within the retry interval, not only when the next UTC day begins."""
    clock = Clock()                                  # 2026-03-01 10:30
    sink = make_sink(clock=clock, retain_days=3)
    expired = _date_dir(sink.root, "r1", T0.date() - dt.timedelta(days=5), "part-00002.parquet")
    (expired / "part-00001.parquet").mkdir()         # unlink() fails on it: EISDIR
    (expired / "part-00001.parquet" / "x").write_bytes(b"x")
    sink.tick()
    assert sink.writer.flush(5)
    assert expired.exists() and sink.dates_removed == 0
    assert "cannot remove" in caplog.text and sink.status()["write_errors"] == 1
    (expired / "part-00001.parquet" / "x").unlink()
    (expired / "part-00001.parquet").rmdir()         # the obstacle is gone
    (expired / "part-00001.parquet").write_bytes(b"x")
    sink.tick()                                      # a moment later: not hammered every interval
    assert sink.writer.flush(5) and expired.exists()
    clock.advance(parquet_sink.PRUNE_RETRY_INTERVAL.total_seconds())
    sink.tick()
    assert sink.writer.flush(5)
    assert not expired.exists() and sink.dates_removed == 1
    clock.advance(3600)                              # done for the day: not looked at again
    (_date_dir(sink.root, "r1", T0.date() - dt.timedelta(days=6), "part-00001.parquet"))
    sink.tick()
    assert sink.writer.flush(5) and sink.dates_removed == 1


def test_with_one_day_kept_the_day_that_just_ended_expires_without_a_failed_write(make_sink, workers):
    """At midnight yesterday's part is published while yesterday expires: pruning never takes a
    part that is still open, so the publication does not fail and is not retried for ever."""
    clock = Clock(dt.datetime(2026, 3, 1, 23, 59, 58, tzinfo=dt.timezone.utc))
    sink = make_sink(clock=clock, retain_days=1)
    sink.tick()
    assert sink.writer.flush(5)
    clock.advance(4)                                 # 2026-03-02: rotation and pruning in one tick
    sink.tick()
    assert sink.writer.flush(5)
    assert sink.writer.errors == 0 and not sink.writer.failed and sink.dates_removed == 1
    assert not (sink.root / "router=r1" / "date=2026-03-01").exists()
    assert len(rows_of(open_files(sink.root)[0])) == len(workers)      # today's rows, as before


def test_retain_days_zero_keeps_everything_and_a_bad_value_keeps_the_default(make_sink, tmp_path, workers, caplog):
    sink = make_sink(retain_days=0)
    ancient = _date_dir(sink.root, "r1", dt.date(2001, 1, 1), "part-00001.parquet")
    sink.tick()
    assert sink.writer.flush(5) and ancient.exists()
    supervisor = FakeSupervisor(MonitorConfig(interval=5, format_module="parquet",
                                              format_options={"dir": str(tmp_path / "s"), "retain_days": "a week"}),
                                workers)
    with caplog.at_level("ERROR", logger="router"):
        made = parquet_sink.make(supervisor)
    try:
        assert made.retain_days == parquet_sink.RETAIN_DAYS
        assert "retain_days='a week' is not a whole number of days" in caplog.text
    finally:
        made.close()
