"""Keepalive RTT percentiles per peer portal, and interest map sizes over time."""
from pyspark.testing import assertDataFrameEqual

from spark_pipeline.deltas import interval_rows
from spark_pipeline.gauges import map_sizes, router_map_sizes, rtt_percentiles
from tests.spark_pipeline.conftest import at, stats_row


def peer_rows(portal: str, rtts: list[int]) -> list[dict]:
    """One keepalive per interval; the counters keep a running mean, sum, min and max as a peer does."""
    rows, total = [stats_row(0, portal=portal, kind="peer")], 0
    for n, rtt in enumerate(rtts, start=1):
        total += rtt
        rows.append(stats_row(n, portal=portal, kind="peer", rtt_samples=n, rtt_mean=total // n, rtt_sum_us=total,
                              rtt_min=min(rtts[:n]), rtt_max=max(rtts[:n])))
    return rows


def test_rtt_percentiles_are_over_each_interval_s_own_mean(make_stats):
    rtts = [100] * 50 + [200] * 45 + [1000] * 5          # p50 100, p90 200, p99 1000
    rows = peer_rows("EAST", rtts) + [stats_row(t, portal="LAN1") for t in range(3)]
    actual = rtt_percentiles(interval_rows(make_stats(rows)))
    assertDataFrameEqual(actual, [("r1", "EAST", 100, 100, 100, 100.0, 200.0, 1000.0, 1000)])


def test_portals_without_keepalive_samples_have_no_rtt_row(make_stats):
    rows = [stats_row(t, portal="WEST", kind="peer") for t in range(3)]
    assert rtt_percentiles(interval_rows(make_stats(rows))).count() == 0


def test_map_sizes_report_the_last_value_in_each_bucket_and_routers_add_their_portals(make_stats, expect):
    rows = [stats_row(0, portal="A", local_interest_topics=1, local_interest_pcre_patterns=1),
            stats_row(5, portal="A", local_interest_topics=4),
            stats_row(0, portal="B", local_interest_topics=2, local_interest_regex_patterns=3),
            stats_row(12, portal="A", local_interest_topics=9)]
    sizes = map_sizes(interval_rows(make_stats(rows)), 10)
    by_portal = sizes.select("portal", "bucket_start", "local_interest_topics")
    assertDataFrameEqual(by_portal, expect(by_portal, [("A", at(0), 4), ("B", at(0), 2), ("A", at(10), 9)]))
    by_router = router_map_sizes(sizes).select("bucket_start", "interest_topics", "interest_patterns")
    assertDataFrameEqual(by_router, expect(by_router, [(at(0), 6, 3), (at(10), 9, 0)]))
