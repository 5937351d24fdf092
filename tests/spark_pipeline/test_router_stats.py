"""End to end: a router records its counters every second under traffic, the pipeline reads them.

The message count the pipeline computes for the egress portal must be what the receiver got, and a
worker killed mid-run (the supervisor restarts it; its counters continue) must show up as a worker
restart, never as a negative or doubled rate.
"""
from __future__ import annotations

import csv
import os
import signal

import pytest

from spark_pipeline import run_report
from tests.support.processes import wait_for
from tests.support.routers import endpoint_xml

pytestmark = pytest.mark.integration

RATE = 2000                     # messages per second from the source
SENT = "transport_topic_fragments_sent"


def monitored_router(routers, stats_dir, *domains):
    portals = "".join(endpoint_xml(f"LAN{i + 1}", i + 1, d.config_path) for i, d in enumerate(domains))
    monitor = (f'    <monitor interval="1"><format-module module="parquet" '
               f'options="dir={stats_dir}"/></monitor>\n')
    return routers.start(portals, daemon_extra=monitor).wait_ready()


def start_traffic(tools, lan1, lan2, messages: int):
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "-C", messages, "--idle-timeout", 3, "--timeout", 60,
                           "stats.topic")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", messages, "-l", 64, "-P", RATE,
                         "--start-on-stdin", "stats.topic")
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    return source, receiver


def read_csv(report, table):
    with open(report.parent / "csv" / f"{table}.csv") as handle:
        return list(csv.DictReader(handle))


def egress(report):
    [totals] = [row for row in read_csv(report, "portal_totals") if row["portal"] == "LAN2"]
    return totals


def test_pipeline_counts_what_the_receiver_got_and_a_killed_worker_is_a_restart_not_a_spike(
        spark, routers, tools, make_domain, tmp_path):
    lan1, lan2 = make_domain(), make_domain()
    stats_dir = tmp_path / "stats"
    router = monitored_router(routers, stats_dir, lan1, lan2)
    source, receiver = start_traffic(tools, lan1, lan2, 5 * RATE)
    # A second into the traffic, kill the egress portal's worker; the supervisor starts another.
    wait_for(lambda: router.counters()[1][SENT] >= RATE, 30, message="traffic through LAN2")
    victim = router.worker_pids()["1"]
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: router.worker_pids()["1"] not in (victim, 0), 30, message="LAN2's worker restarted")
    source.result(60)
    got = receiver.result(60)
    final_sent = router.counters()[1][SENT]
    assert router.stop() == 0

    report = run_report(stats_dir, tmp_path / "report", spark=spark, quiet=True)

    totals = egress(report)
    # Every message counted once: the deltas add up to the shared counter (a doubled interval would
    # exceed it), and to what the receiver got, give or take what one interval carries.
    assert int(totals["msgs_out"]) == final_sent
    assert abs(int(totals["msgs_out"]) - got["received"]) <= RATE, (totals, got)
    assert got["received"] > RATE
    segments = [row for row in read_csv(report, "segments") if row["portal"] == "LAN2"]
    assert [row["began_with"] for row in segments] == ["first", "worker_restart"]
    intervals = spark.read.parquet(str(report.parent / "parquet" / "intervals")).where("portal = 'LAN2'")
    assert intervals.where("msgs_out < 0 OR msgs_in < 0 OR dropped < 0").count() == 0
