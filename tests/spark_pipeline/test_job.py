"""The whole pipeline on a small synthetic fleet: tables, charts, report, and totals that are right."""
import csv
import re

import pytest

from bench.make_synthetic_stats import generate
from spark_pipeline.__main__ import main


@pytest.fixture(scope="module")
def fleet_stats(tmp_path_factory):
    """2 routers × 8 portals, 5 s intervals: restarts, a router restart, drops, peers, gaps."""
    directory = tmp_path_factory.mktemp("stats")
    return directory, generate(directory, rows=4000, routers=2)


def read_csv(path):
    with open(path) as handle:
        return list(csv.DictReader(handle))


def test_command_line_writes_a_report_linking_every_table_and_chart_with_the_right_totals(
        spark, fleet_stats, tmp_path, capsys):
    stats, truth = fleet_stats
    assert main(["--input", str(stats), "--output", str(tmp_path / "report"), "--quiet"], spark=spark) == 0
    report = tmp_path / "report" / "index.html"
    assert capsys.readouterr().out.strip() == str(report)     # the one stdout line: scripts can use it
    page = report.read_text()
    links = re.findall(r"(?:href|src)='?\"?([^'\" >]+)", page)
    assert links and all((report.parent / link).exists() for link in links), links
    for table in ("fleet_summary", "portal_rates", "router_rates", "portal_totals", "segments", "drops", "rtt",
                  "map_sizes", "router_map_sizes"):
        assert f"csv/{table}.csv" in page and f"parquet/{table}" in page
    assert "parquet/intervals" in page
    fleet = {row["router"]: row for row in read_csv(report.parent / "csv" / "fleet_summary.csv")}
    assert {name: int(row["msgs_out"]) for name, row in fleet.items()} == truth["truth"]
    assert all(int(row["counter_resets"]) == 8 for row in fleet.values())    # one router restart × 8 portals
    rates = read_csv(report.parent / "csv" / "portal_rates.csv")
    assert all(float(r["msgs_out_per_s"]) >= 0 for r in rates if r["msgs_out_per_s"])
    assert len(read_csv(report.parent / "csv" / "rtt.csv")) == 4                # 2 peer portals per router


def test_no_statistics_is_a_clear_error_not_a_stack_trace(spark, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["--input", str(tmp_path / "missing"), "--output", str(tmp_path / "out")], spark=spark) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["--input", str(tmp_path / "empty"), "--output", str(tmp_path / "out")], spark=spark) == 2
    assert "no statistics rows" in capsys.readouterr().err


def test_a_router_younger_than_its_rotation_is_told_apart_from_one_writing_no_statistics(spark, tmp_path, capsys):
    """Before its first rotation a router's rows are all in the hidden `.open` part (readers skip
    it): the error says so, not that statistics look switched off."""
    import datetime as dt

    from router.monitor import parquet_sink
    from tests.monitor.test_parquet_sink import Portal, Worker
    now = dt.datetime(2026, 3, 1, 10, 30, tzinfo=dt.timezone.utc)
    sink = parquet_sink.ParquetSink("r1", lambda: {"LAN1": Worker(Portal("LAN1"))}, tmp_path / "stats",
                                    clock=lambda: now)
    sink.tick()
    assert sink.writer.stop(5)
    assert list((tmp_path / "stats").rglob(".part-*.parquet.open"))
    assert main(["--input", str(tmp_path / "stats"), "--output", str(tmp_path / "out")], spark=spark) == 2
    error = capsys.readouterr().err
    assert "not published yet" in error and "rotate_minutes" in error, error
    assert "is <monitor interval> set" not in error


def _sink_files(root, steps):
    """Statistics a real sink writes: every 5 s (as `steps` says: seconds the wall clock moves
    first, default 5) LAN1's worker beats (monotonic clock) and sends 500 messages. Returns the
    messages sent."""
    import datetime as dt

    from router.monitor import parquet_sink
    from tests.monitor.test_parquet_sink import Clock, Portal, Worker
    clock, lan1 = Clock(dt.datetime(2026, 3, 1, 10, 30, tzinfo=dt.timezone.utc)), Worker(Portal("LAN1"))
    lan1.counters.set("worker_pid", 4242)
    sink = parquet_sink.ParquetSink("r1", lambda: {"LAN1": lan1}, root, clock=clock)
    sink.tick()
    sent = 0
    for seconds in steps:
        clock.advance(seconds)
        lan1.counters.add("heartbeat_ns", 5_000_000_000)
        lan1.counters.add("transport_topic_fragments_sent", 500)
        sent += 500
        sink.tick()
    sink.close()
    return sent


def test_a_wall_clock_stepped_back_neither_multiplies_the_totals_nor_counts_resets(spark, tmp_path):
    """NTP stepping the clock back a minute (a VM resumed, a host synchronised after the router
    started) makes later rows carry earlier times: the counters still only grew. Read in wall-clock
    order they seemed to go down and up again, and every fall counted the whole total once more."""
    sent = _sink_files(tmp_path / "stats", [5] * 12 + [-60] + [5] * 23)
    assert main(["--input", str(tmp_path / "stats"), "--output", str(tmp_path / "out"), "--quiet"], spark=spark) == 0
    [totals] = read_csv(tmp_path / "out" / "csv" / "portal_totals.csv")
    assert int(totals["msgs_out"]) == sent
    assert float(totals["peak_msgs_out_per_s"]) == 100.0
    [fleet] = read_csv(tmp_path / "out" / "csv" / "fleet_summary.csv")
    assert (int(fleet["counter_resets"]), int(fleet["worker_restarts"])) == (0, 0)
    rates = read_csv(tmp_path / "out" / "csv" / "portal_rates.csv")
    assert all(0 <= float(r["msgs_out_per_s"]) <= 100.0 for r in rates if r["msgs_out_per_s"]), rates
    [segment] = read_csv(tmp_path / "out" / "csv" / "segments.csv")
    assert (segment["began_with"], segment["rows"], segment["msgs_out"]) == ("first", "38", str(sent))


def test_a_part_file_cut_short_is_named_and_left_out_not_a_java_stack_trace(spark, tmp_path, capfd):
    """One unreadable file among a fleet's months of statistics (a copy from a router interrupted,
    a disk fault) stopped the whole report with a Py4JJavaError: it is left out, named and counted."""
    stats = tmp_path / "stats"
    sent = _sink_files(stats, [5] * 11)
    [part] = stats.rglob("part-*.parquet")
    cut = part.with_name("part-00100.parquet")
    cut.write_bytes(part.read_bytes()[:300])
    capfd.readouterr()
    assert main(["--input", str(stats), "--output", str(tmp_path / "out"), "--quiet"], spark=spark) == 0
    err = capfd.readouterr().err
    assert "1 file" in err and cut.name in err and "gave no rows (cut short" in err, err
    assert "Py4J" not in err and "java." not in err, err
    [totals] = read_csv(tmp_path / "out" / "csv" / "portal_totals.csv")
    assert int(totals["msgs_out"]) == sent
    assert cut.name in (tmp_path / "out" / "index.html").read_text()


def test_files_that_are_not_router_statistics_are_left_out_and_counted(spark, tmp_path, capfd):
    """Other Parquet files under --input (an inventory someone keeps there, or this job's own
    report from an earlier run, written inside the statistics directory) are not statistics rows:
    read as such they had no router, no time and no epoch, and the charts stopped with a TypeError."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    stats = tmp_path / "stats"
    sent = _sink_files(stats, [5] * 11)
    pq.write_table(pa.table({"host": ["a", "b"], "rack": [1, 2]}), stats / "inventory.parquet")
    for _ in range(2):          # the second run reads the first one's tables too
        capfd.readouterr()
        assert main(["--input", str(stats), "--output", str(stats / "report"), "--quiet"], spark=spark) == 0
        [totals] = read_csv(stats / "report" / "csv" / "portal_totals.csv")
        assert int(totals["msgs_out"]) == sent
    err = capfd.readouterr().err
    assert "not router statistics" in err and "inventory.parquet" in err, err
    assert "not router statistics" in (stats / "report" / "index.html").read_text()


def test_rows_a_stopped_router_never_published_are_named_not_silently_missing(spark, tmp_path, capfd):
    """A router that died (host lost, kill -9) leaves its newest rows, up to an hour of them, in
    the hidden part it was growing; it publishes them when it starts again, which may be never.
    The report of its other rows said nothing about the missing ones."""
    import datetime as dt

    from router.monitor import parquet_sink
    from tests.monitor.test_parquet_sink import Clock, Portal, Worker
    clock = Clock(dt.datetime(2026, 3, 1, 10, 59, tzinfo=dt.timezone.utc))
    sink = parquet_sink.ParquetSink("r1", lambda: {"LAN1": Worker(Portal("LAN1"))}, tmp_path / "stats", clock=clock)
    for _ in range(24):             # two minutes: the 10:00 part is published at 11:00, the 11:00 one grows
        sink.tick()
        clock.advance(5)
    assert sink.writer.stop(5)      # and the router dies: no close, nothing more published
    [growing] = (tmp_path / "stats").rglob(".part-*.parquet.open")
    capfd.readouterr()
    assert main(["--input", str(tmp_path / "stats"), "--output", str(tmp_path / "out"), "--quiet"], spark=spark) == 0
    err = capfd.readouterr().err
    assert "1 part" in err and "not published" in err and growing.name in err, err
    assert growing.name in (tmp_path / "out" / "index.html").read_text()


@pytest.mark.parametrize("bucket", ["0", "-300", "5m"])
def test_a_bucket_that_is_not_a_positive_number_of_seconds_is_a_usage_error(spark, tmp_path, capsys, bucket):
    """`--bucket -300` drew every chart one bucket late (buckets counted down from each time) and
    `--bucket 0` silently chose another length: both are the user's typo, to be told at once."""
    (tmp_path / "stats").mkdir()
    with pytest.raises(SystemExit) as exited:
        main(["--input", str(tmp_path / "stats"), "--output", str(tmp_path / "out"), "--bucket", bucket], spark=spark)
    assert exited.value.code == 2
    assert "--bucket" in capsys.readouterr().err
