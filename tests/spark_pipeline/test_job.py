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
