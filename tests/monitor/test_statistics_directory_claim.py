"""Two running routers of one name, given one statistics directory (a configuration copied to a
second host on a shared volume): one writes `router=NAME`, the other says why it does not and takes
over when the first stops; no row is written twice, none of either router's files is lost. Its
/metrics tell an alert which of the two is writing."""
from __future__ import annotations

import os
from collections import Counter

import pyarrow.parquet as pq
import pytest

from tests.monitor.test_web_monitor import fetch
from tests.support.processes import wait_for
from tests.support.routers import RouterRunner, endpoint_xml, free_port

pytestmark = pytest.mark.integration


def two_lans(make_domain) -> str:
    return "".join(endpoint_xml(f"LAN{i}", i, make_domain().config_path) for i in (1, 2))


def writer_of(stats, name: str) -> str:
    try:
        return (stats / f"router={name}" / ".writer").read_text()
    except FileNotFoundError:
        return ""


def statistics_metrics(port: int) -> dict[str, float]:
    """The umrouter_statistics_* samples of a router's /metrics."""
    from prometheus_client.parser import text_string_to_metric_families
    _, _, body = fetch(f"http://127.0.0.1:{port}/metrics")
    return {sample.name: sample.value for family in text_string_to_metric_families(body.decode())
            for sample in family.samples if sample.name.startswith("umrouter_statistics_")}


def test_two_routers_of_one_name_take_turns_at_its_statistics_directory(routers, make_domain, tmp_path):
    stats = tmp_path / "stats"
    monitor = f'    <monitor interval="1"><format-module module="parquet" options="dir={stats}"/></monitor>\n'
    first_web, second_web = free_port(), free_port()
    name = f"twin{os.getpid() % 10000}"
    first = routers.start(two_lans(make_domain), monitor + f"    <web-monitor>127.0.0.1:{first_web}</web-monitor>\n",
                          name=name).wait_ready()
    wait_for(lambda: writer_of(stats, name).startswith(f"pid {first.pid} "), 15, message="the first router's claim")
    (tmp_path / "second").mkdir()
    elsewhere = RouterRunner(tmp_path / "second")        # its own copy of the file: same name, other domains
    try:
        second = elsewhere.start(two_lans(make_domain),
                                 monitor + f"    <web-monitor>127.0.0.1:{second_web}</web-monitor>\n",
                                 name=name).wait_ready()
        second.wait_for_log("UMR-5001-3", 15)
        assert f"being written by another router (pid {first.pid} on " in second.log()
        wait_for(lambda: statistics_metrics(second_web)["umrouter_statistics_rows_not_written_total"] >= 4, 15,
                 message="the rows the second router could not write, counted")
        assert statistics_metrics(second_web)["umrouter_statistics_writing"] == 0
        assert statistics_metrics(first_web)["umrouter_statistics_writing"] == 1
        pids = {**{f"first{k}": v for k, v in first.worker_pids().items()},
                **{f"second{k}": v for k, v in second.worker_pids().items()}}
        assert first.stop() == 0
        second.wait_for_log("is ours now", 15)
        wait_for(lambda: writer_of(stats, name).startswith(f"pid {second.pid} "), 15, message="the claim moved")
        taken_over = statistics_metrics(second_web)
        assert taken_over["umrouter_statistics_writing"] == 1 and taken_over["umrouter_statistics_write_errors_total"] == 0
        wait_for(lambda: statistics_metrics(second_web)["umrouter_statistics_writes_total"] > 0, 15,
                 message="the second router's writes")
        assert second.stop() == 0
    finally:
        elsewhere.cleanup()
    directory = stats / f"router={name}"
    assert not list(directory.rglob(".part-*")), "everything published at stop"
    rows = [row for path in sorted(directory.rglob("part-*.parquet")) for row in pq.read_table(path).to_pylist()]
    written_twice = [key for key, n in Counter((r["portal"], r["worker_pid"], r["ts"]) for r in rows).items() if n > 1]
    assert not written_twice
    assert {r["worker_pid"] for r in rows} == set(pids.values()), "both routers' rows, each its own"
