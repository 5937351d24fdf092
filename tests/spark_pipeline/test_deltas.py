"""Per-interval deltas: right across worker restarts, counter resets, new epochs and gaps."""
from pyspark.testing import assertDataFrameEqual

from spark_pipeline.deltas import interval_rows, intervals_table
from tests.spark_pipeline.conftest import at, stats_row

SENT = "transport_topic_fragments_sent"
COLUMNS = ("ts", "interval_s", "segment", "msgs_out")


def deltas_of(make_stats, rows, columns=COLUMNS):
    return intervals_table(interval_rows(make_stats(rows))).select(*columns)


def expected(spark, rows, columns=COLUMNS):
    from spark_pipeline.schemas import INTERVALS
    from pyspark.sql.types import StructType
    schema = StructType([INTERVALS[c] for c in columns])
    return spark.createDataFrame([tuple(r) for r in rows], schema)


def test_steady_counter_gives_its_increments_and_the_first_row_counts_from_zero(spark, make_stats):
    actual = deltas_of(make_stats, [stats_row(0, **{SENT: 5}), stats_row(1, **{SENT: 105}),
                                    stats_row(2, **{SENT: 255})])
    # ts == counters_epoch: the sink's first row of a fresh segment, so its 5 happened since zero.
    assertDataFrameEqual(actual, expected(spark, [(at(0), None, 1, 5), (at(1), 1.0, 1, 100), (at(2), 1.0, 1, 150)]))


def test_restarted_worker_that_continued_the_totals_is_not_counted_twice(spark, make_stats):
    rows = [stats_row(0), stats_row(1, **{SENT: 100}), stats_row(2, pid=200, restarts=1, **{SENT: 180}),
            stats_row(3, pid=200, restarts=1, **{SENT: 300})]
    actual = deltas_of(make_stats, rows, ("ts", "segment", "msgs_out"))
    assertDataFrameEqual(actual, expected(spark, [(at(0), 1, 0), (at(1), 1, 100), (at(2), 2, 80), (at(3), 2, 120)],
                                          ("ts", "segment", "msgs_out")))


def test_counter_reset_counts_the_new_value_never_a_negative_delta(spark, make_stats):
    rows = [stats_row(0), stats_row(1, **{SENT: 1000}), stats_row(2, pid=200, restarts=1, **{SENT: 30}),
            stats_row(3, pid=200, restarts=1, **{SENT: 90})]
    actual = deltas_of(make_stats, rows, ("ts", "segment", "msgs_out"))
    assertDataFrameEqual(actual, expected(spark, [(at(0), 1, 0), (at(1), 1, 1000), (at(2), 2, 30), (at(3), 2, 60)],
                                          ("ts", "segment", "msgs_out")))


def test_new_epoch_counts_from_zero_and_its_first_interval_has_no_known_length(spark, make_stats):
    rows = [stats_row(0), stats_row(1, **{SENT: 500}),
            stats_row(10, pid=300, epoch=10, **{SENT: 7}), stats_row(11, pid=300, epoch=10, **{SENT: 57})]
    actual = deltas_of(make_stats, rows)
    assertDataFrameEqual(actual, expected(spark, [(at(0), None, 1, 0), (at(1), 1.0, 1, 500),
                                                  (at(10), None, 2, 7), (at(11), 1.0, 2, 50)]))


def test_data_set_starting_mid_epoch_has_an_unknown_first_delta(spark, make_stats):
    # The epoch began at 0 but the first row here is at 60: what happened before is unknown, not 10 000.
    actual = deltas_of(make_stats, [stats_row(60, **{SENT: 10_000}), stats_row(61, **{SENT: 10_100})])
    assertDataFrameEqual(actual, expected(spark, [(at(60), None, 1, None), (at(61), 1.0, 1, 100)]))


def test_missing_interval_makes_one_longer_interval_not_a_spike(spark, make_stats):
    rows = [stats_row(0), stats_row(1, **{SENT: 100}), stats_row(3, **{SENT: 300}), stats_row(4, **{SENT: 400})]
    actual = deltas_of(make_stats, rows)
    assertDataFrameEqual(actual, expected(spark, [(at(0), None, 1, 0), (at(1), 1.0, 1, 100),
                                                  (at(3), 2.0, 1, 200), (at(4), 1.0, 1, 100)]))


def test_endpoint_and_peer_counters_of_one_meaning_add_up_and_drops_keep_their_reason(spark, make_stats):
    rows = [stats_row(0, kind="peer"),
            stats_row(1, kind="peer", data_fragments_sent=40, data_fragments_dropped_not_operational=3,
                      data_fragments_dropped_would_block=2, data_msgs_rcvd=9)]
    columns = ("ts", "msgs_in", "msgs_out", "dropped", "dropped_not_operational", "dropped_would_block")
    actual = deltas_of(make_stats, rows, columns)
    assertDataFrameEqual(actual, expected(spark, [(at(0), 0, 0, 0, 0, 0), (at(1), 9, 40, 5, 3, 2)], columns))


def test_duplicates_dropped_are_counted_apart_from_the_drops_of_what_was_lost(spark, make_stats):
    rows = [stats_row(0), stats_row(1, transport_topic_fragments_sent=50, transport_topic_fragments_dropped_duplicate=7,
                                    transport_topic_fragments_dropped_would_block=1),
            stats_row(0, kind="peer", portal="P"),
            stats_row(1, kind="peer", portal="P", data_fragments_dropped_duplicate=4)]
    columns = ("ts", "msgs_out", "duplicates_dropped", "dropped")
    actual = intervals_table(interval_rows(make_stats(rows))).where("ts = timestamp'2026-03-01 12:00:01'") \
        .select("portal", *columns[1:])
    assertDataFrameEqual(actual, [("LAN1", 50, 7, 1), ("P", 0, 4, 0)])


def test_portals_and_routers_are_independent(spark, make_stats):
    rows = [stats_row(0, portal="A"), stats_row(0, portal="B"), stats_row(0, portal="A", router="r2"),
            stats_row(1, portal="A", **{SENT: 10}), stats_row(1, portal="B", **{SENT: 20}),
            stats_row(1, portal="A", router="r2", **{SENT: 30})]
    actual = intervals_table(interval_rows(make_stats(rows))).where("ts = timestamp'2026-03-01 12:00:01'") \
        .select("router", "portal", "msgs_out")
    assertDataFrameEqual(actual, [("r1", "A", 10), ("r1", "B", 20), ("r2", "A", 30)])


def test_interval_rtt_mean_comes_from_the_running_mean_and_stays_within_min_and_max(spark, make_stats):
    # Files written before rtt_sum_us existed read it as null: the running mean stands in.
    old = {"rtt_sum_us": None}
    rows = [stats_row(0, kind="peer", **old),
            stats_row(5, kind="peer", rtt_samples=1, rtt_mean=100, rtt_min=100, rtt_max=100, **old),
            stats_row(10, kind="peer", rtt_samples=2, rtt_mean=150, rtt_min=100, rtt_max=200, **old),
            # rounding of a long running mean claims 9 µs, below any sample seen: clamped to the min
            stats_row(15, kind="peer", rtt_samples=3, rtt_mean=103, rtt_min=100, rtt_max=200, **old)]
    actual = deltas_of(make_stats, rows, ("ts", "rtt_samples", "rtt_mean_us"))
    assertDataFrameEqual(actual, expected(spark, [(at(0), 0, None), (at(5), 1, 100.0), (at(10), 1, 200.0),
                                                  (at(15), 1, 100.0)], ("ts", "rtt_samples", "rtt_mean_us")))


def test_interval_rtt_mean_is_exact_from_the_rtt_sum(spark, make_stats):
    rows = [stats_row(0, kind="peer"),
            stats_row(5, kind="peer", rtt_samples=1, rtt_mean=100, rtt_sum_us=100, rtt_min=100, rtt_max=100),
            stats_row(10, kind="peer", rtt_samples=3, rtt_mean=133, rtt_sum_us=400, rtt_min=100, rtt_max=200)]
    actual = deltas_of(make_stats, rows, ("ts", "rtt_samples", "rtt_mean_us"))
    assertDataFrameEqual(actual, expected(spark, [(at(0), 0, None), (at(5), 1, 100.0), (at(10), 2, 150.0)],
                                          ("ts", "rtt_samples", "rtt_mean_us")))


def test_a_run_whose_clock_overlaps_the_previous_run_counts_both_in_full(spark, make_stats):
    """A host rebooted with its clock behind (no RTC, NTP not yet synchronised) starts a new
    counter epoch whose rows carry the same times as the last rows of the run before: each run's
    deltas come from its own rows, not from the other run's rows interleaved by time."""
    beat = 1_000_000_000
    first = [stats_row(t, heartbeat_ns=(1000 + t) * beat, **{SENT: 100 * t}) for t in range(5)]
    second = [stats_row(t, pid=300, epoch=2, heartbeat_ns=(10 + t) * beat, **{SENT: 100 * (t - 2)})
              for t in range(2, 7)]
    actual = deltas_of(make_stats, first + second, ("ts", "segment", "msgs_out"))
    assert sorted((r["segment"], r["msgs_out"]) for r in actual.collect()) == \
        [(1, 0), (1, 100), (1, 100), (1, 100), (1, 100), (2, 0), (2, 100), (2, 100), (2, 100), (2, 100)]
