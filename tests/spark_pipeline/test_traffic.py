"""Rates, totals, segments and drops from the per-interval frame."""
import pytest
from pyspark.testing import assertDataFrameEqual

from spark_pipeline.deltas import interval_rows
from spark_pipeline.traffic import (choose_bucket_seconds, drops_by_reason, portal_rates, portal_totals,
                                    router_rates, segments)
from tests.spark_pipeline.conftest import at, stats_row

SENT, RCVD = "transport_topic_fragments_sent", "transport_topic_fragments_rcvd"


@pytest.fixture
def restart_run(make_stats):
    """LAN2 sends 100 msgs/s for 6 s; interval 3 is missing; its worker restarts at 4 s (the totals
    continue); LAN1 receives 50 msgs/s and its counters are reset at 5 s by a worker that zeroed them."""
    rows = [stats_row(0, portal="LAN2", **{SENT: 0}), stats_row(1, portal="LAN2", **{SENT: 100}),
            stats_row(2, portal="LAN2", **{SENT: 200}),
            stats_row(4, portal="LAN2", pid=101, restarts=1, **{SENT: 400}),
            stats_row(5, portal="LAN2", pid=101, restarts=1, **{SENT: 500}),
            stats_row(6, portal="LAN2", pid=101, restarts=1, **{SENT: 600})]
    rows += [stats_row(t, portal="LAN1", pid=200, **{RCVD: 50 * t}) for t in range(5)]
    rows += [stats_row(5, portal="LAN1", pid=201, restarts=1, **{RCVD: 50}),
             stats_row(6, portal="LAN1", pid=201, restarts=1, **{RCVD: 100})]
    return interval_rows(make_stats(rows))


def test_rates_stay_flat_across_a_missing_interval_a_restart_and_a_reset(restart_run):
    rates = portal_rates(restart_run, 1).where("seconds IS NOT NULL")
    per_second = {(r["portal"], r["bucket_start"]): (r["msgs_out_per_s"], r["msgs_in_per_s"])
                  for r in rates.collect()}
    assert {v[0] for (portal, _), v in per_second.items() if portal == "LAN2"} == {100.0}
    assert {v[1] for (portal, _), v in per_second.items() if portal == "LAN1"} == {50.0}


def test_bucketed_rate_is_deltas_over_the_seconds_they_cover(restart_run):
    actual = portal_rates(restart_run, 10).select("portal", "seconds", "msgs_out", "msgs_in", "msgs_out_per_s",
                                                  "msgs_in_per_s")
    assertDataFrameEqual(actual, [("LAN1", 6.0, 0, 300, 0.0, 50.0), ("LAN2", 6.0, 600, 0, 100.0, 0.0)])


def test_router_rates_add_up_the_portals(restart_run):
    actual = router_rates(portal_rates(restart_run, 10)).select("router", "msgs_in_per_s", "msgs_out_per_s")
    assertDataFrameEqual(actual, [("r1", 50.0, 100.0)])


def test_totals_count_every_message_once(restart_run):
    actual = portal_totals(restart_run).select("portal", "segments", "msgs_in", "msgs_out",
                                               "peak_msgs_out_per_s", "peak_msgs_in_per_s")
    assertDataFrameEqual(actual, [("LAN1", 2, 300, 0, 0.0, 50.0), ("LAN2", 2, 0, 600, 100.0, 0.0)])


def test_segments_say_which_worker_and_why_each_began(restart_run, expect):
    actual = segments(restart_run).select("portal", "segment", "started", "ended", "worker_pid", "began_with",
                                          "rows")
    assertDataFrameEqual(actual, expect(actual, [("LAN1", 1, at(0), at(4), 200, "first", 5),
                                  ("LAN1", 2, at(5), at(6), 201, "counters_reset", 2),
                                  ("LAN2", 1, at(0), at(2), 100, "first", 3),
                                  ("LAN2", 2, at(4), at(6), 101, "worker_restart", 3)]))


def test_drops_by_reason_with_their_fraction_of_the_portal_traffic(make_stats):
    rows = [stats_row(0, portal="LAN2"),
            stats_row(1, portal="LAN2", transport_topic_fragments_sent=900,
                      transport_topic_fragments_dropped_would_block=75,
                      transport_topic_fragment_bytes_dropped_would_block=7500,
                      transport_topic_fragments_dropped_queue_failure=25),
            stats_row(0, portal="PEER", kind="peer"),
            stats_row(1, portal="PEER", kind="peer", data_fragments_sent=10)]
    actual = drops_by_reason(interval_rows(make_stats(rows))).select(
        "portal", "reason", "msgs_dropped", "bytes_dropped", "msgs_offered", "fraction")
    assertDataFrameEqual(actual, [("LAN2", "would_block", 75, 7500, 1000, 0.075),
                                  ("LAN2", "queue_failure", 25, 0, 1000, 0.025)])


@pytest.mark.parametrize("span, bucket", [(60, 1), (3600, 5), (86400, 300), (30 * 86400, 3600)])
def test_chart_buckets_keep_a_chart_readable(span, bucket):
    assert choose_bucket_seconds(span) == bucket
