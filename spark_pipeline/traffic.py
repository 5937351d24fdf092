"""Traffic: message and byte rates per portal and per router, totals, segments, drops by reason.

Every function takes the per-interval frame from `deltas.interval_rows` and is pure. A rate is a
sum of deltas over the seconds those deltas cover (rows whose duration is known), so a bucket with
a missing interval averages over the gap instead of spiking, and a bucket reports no rate at all
rather than an invented one when none of its durations are known.

Drops: a portal's *offered* traffic is what it sent plus everything it dropped for any reason, so
the fractions of one portal's reasons add up to its overall drop fraction. Only reasons that
dropped something get a row: an operator reads that table to find where it hurts.
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_pipeline.schemas import (DROP_REASONS, DROPS, MEASURES, PORTAL_RATES, PORTAL_TOTALS, ROUTER_RATES,
                                    SEGMENTS, conform)

_KEY = ("router", "portal", "portal_kind")


def bucket_start(seconds: int) -> Column:
    """The start of the `seconds`-long UTC bucket `ts` falls in."""
    micros = seconds * 1_000_000
    return F.timestamp_micros(F.floor(F.unix_micros("ts") / micros) * micros)


def choose_bucket_seconds(span_seconds: float, max_points: int = 720) -> int:
    """The smallest usual bucket that keeps a chart of `span_seconds` under `max_points` points."""
    for seconds in (1, 5, 10, 30, 60, 300, 900, 3600, 6 * 3600, 86400):
        if span_seconds / seconds <= max_points:
            return seconds
    return 7 * 86400


def _per_second(amount: str) -> Column:
    return F.when(F.col("seconds") > 0, F.col(amount) / F.col("seconds"))


def _timed(column: str) -> Column:
    """The delta when its duration is known (the numerator that matches `seconds`)."""
    return F.when(F.col("interval_s").isNotNull(), F.col(column))


def portal_rates(rows: DataFrame, bucket_seconds: int) -> DataFrame:
    sums = (rows.withColumn("bucket_start", bucket_start(bucket_seconds))
            .groupBy(*_KEY, "bucket_start")
            .agg(F.sum("interval_s").alias("seconds"),
                 *[F.sum(_timed(m)).alias(m) for m in MEASURES],
                 F.sum("dropped").alias("dropped")))
    rates = sums.select("*", *[_per_second(m).alias(f"{m}_per_s")
                               for m in ("msgs_in", "msgs_out", "bytes_in", "bytes_out")])
    return conform(rates, PORTAL_RATES)


def router_rates(rates: DataFrame) -> DataFrame:
    """Fleet view: a router's portals added up per bucket (rates of one bucket share its length)."""
    summed = rates.groupBy("router", "bucket_start").agg(
        F.sum("msgs_in_per_s").alias("msgs_in_per_s"), F.sum("msgs_out_per_s").alias("msgs_out_per_s"),
        F.sum("bytes_out_per_s").alias("bytes_out_per_s"), F.sum("dropped").alias("dropped"))
    return conform(summed, ROUTER_RATES)


def portal_totals(rows: DataFrame) -> DataFrame:
    """Whole-run totals (every known delta counts, timed or not) and the peak interval rates."""
    def peak(measure: str) -> Column:
        return F.max(F.when(F.col("interval_s") > 0, F.col(measure) / F.col("interval_s")))
    totals = rows.groupBy(*_KEY).agg(
        F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts"), F.max("segment").alias("segments"),
        *[F.sum(m).alias(m) for m in MEASURES], F.sum("dropped").alias("dropped"),
        peak("msgs_out").alias("peak_msgs_out_per_s"), peak("msgs_in").alias("peak_msgs_in_per_s"))
    return conform(totals, PORTAL_TOTALS)


def segments(rows: DataFrame) -> DataFrame:
    """One row per (portal, segment): which worker and counter epoch, and what it carried."""
    grouped = rows.groupBy(*_KEY, "segment").agg(
        F.min("ts").alias("started"), F.max("ts").alias("ended"),
        F.min_by("worker_pid", "ts").alias("worker_pid"),
        F.min_by("worker_restarts", "ts").alias("worker_restarts"),
        F.min_by("counters_epoch", "ts").alias("counters_epoch"),
        # Only a segment's first row says why it began (deltas.began_with): its first in reading
        # order, which after a wall clock stepped back is not the one of the earliest `ts`.
        F.max("began_with").alias("began_with"), F.count(F.lit(1)).alias("rows"),
        F.sum("msgs_in").alias("msgs_in"), F.sum("msgs_out").alias("msgs_out"))
    return conform(grouped, SEGMENTS)


def drops_by_reason(rows: DataFrame) -> DataFrame:
    sums = rows.groupBy(*_KEY).agg(
        F.coalesce(F.sum("msgs_out"), F.lit(0)).alias("msgs_out"),
        F.coalesce(F.sum("dropped"), F.lit(0)).alias("dropped"),
        *[F.coalesce(F.sum(f"dropped_{r}"), F.lit(0)).alias(f"dropped_{r}") for r in DROP_REASONS],
        *[F.coalesce(F.sum(f"dropped_bytes_{r}"), F.lit(0)).alias(f"dropped_bytes_{r}") for r in DROP_REASONS])
    by_reason = F.explode(F.array(*[
        F.struct(F.lit(r).alias("reason"), F.col(f"dropped_{r}").alias("msgs_dropped"),
                 F.col(f"dropped_bytes_{r}").alias("bytes_dropped")) for r in DROP_REASONS]))
    long = sums.select(*_KEY, (F.col("msgs_out") + F.col("dropped")).alias("msgs_offered"),
                       by_reason.alias("drop")).select("*", "drop.*")
    found = long.where(F.col("msgs_dropped") > 0).withColumn(
        "fraction", F.col("msgs_dropped") / F.col("msgs_offered"))
    return conform(found, DROPS)
