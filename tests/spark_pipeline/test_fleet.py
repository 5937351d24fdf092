"""The fleet summary: one row per router from the per-portal tables."""
import pytest
from pyspark.testing import assertDataFrameEqual

from spark_pipeline.deltas import interval_rows
from spark_pipeline.fleet import fleet_summary
from spark_pipeline.gauges import map_sizes, router_map_sizes, rtt_percentiles
from spark_pipeline.traffic import portal_rates, portal_totals, router_rates
from tests.spark_pipeline.conftest import stats_row

SENT = "transport_topic_fragments_sent"


def summary(rows):
    sizes = map_sizes(rows, 3600)
    return fleet_summary(rows, portal_totals(rows), router_rates(portal_rates(rows, 3600)),
                         router_map_sizes(sizes), rtt_percentiles(rows))


@pytest.fixture
def two_routers(make_stats):
    rows = []
    for t in range(4):     # r1: two portals at 10 and 30 msgs/s, one restart; 2 drops of 42 offered
        rows.append(stats_row(t, portal="A", pid=1 if t < 2 else 2, restarts=0 if t < 2 else 1,
                              local_interest_topics=t, **{SENT: 10 * t}))
        rows.append(stats_row(t, portal="B", **{SENT: 30 * t}))
    rows.append(stats_row(4, portal="B", transport_topic_fragments_dropped_would_block=2, **{SENT: 120}))
    rows += [stats_row(t, router="r2", portal="EAST", kind="peer", rtt_samples=t, rtt_mean=50 * bool(t),
                       rtt_min=50 * bool(t), rtt_max=50 * bool(t)) for t in range(3)]
    return interval_rows(make_stats(rows))


def test_one_row_per_router_with_what_it_carried_dropped_and_how_often_it_restarted(two_routers):
    actual = summary(two_routers).select("router", "portals", "peer_portals", "hours", "worker_restarts",
                                         "counter_resets", "msgs_out", "dropped", "drop_fraction",
                                         "peak_interest_topics", "worst_rtt_p99_us")
    assertDataFrameEqual(actual, [("r1", 2, 0, 4 / 3600, 1, 0, 150, 2, 2 / 152, 3, None),
                                  ("r2", 1, 1, 2 / 3600, 0, 0, 0, 0, None, 0, 50.0)])
