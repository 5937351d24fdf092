"""The fleet summary: one row per router, built from the per-portal tables.

What an operator of many routers scans first: how long each router was observed, how much it
carried, how much it dropped (and what fraction), how often its workers restarted or its counters
started again, its busiest moment, its largest interest maps and its worst peer RTT.
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_pipeline.schemas import FLEET, MEASURES, conform


def fleet_summary(rows: DataFrame, totals: DataFrame, router_rates: DataFrame,
                  router_maps: DataFrame, rtt: DataFrame) -> DataFrame:
    observed = rows.groupBy("router").agg(
        F.count_distinct("portal").alias("portals"),
        F.count_distinct(F.when(F.col("portal_kind") == "peer", F.col("portal"))).alias("peer_portals"),
        F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts"),
        F.sum((F.col("began_with") == "worker_restart").cast("long")).alias("worker_restarts"),
        F.sum((F.col("began_with") == "counters_reset").cast("long")).alias("counter_resets"))
    carried = totals.groupBy("router").agg(*[F.sum(m).alias(m) for m in MEASURES],
                                           F.sum("dropped").alias("dropped"))
    peaks = router_rates.groupBy("router").agg(F.max("msgs_out_per_s").alias("peak_msgs_out_per_s"))
    maps = router_maps.groupBy("router").agg(F.max("interest_topics").alias("peak_interest_topics"),
                                             F.max("interest_patterns").alias("peak_interest_patterns"))
    worst = rtt.groupBy("router").agg(F.max("rtt_p99_us").alias("worst_rtt_p99_us"))
    joined = (observed.join(carried, "router", "left").join(peaks, "router", "left")
              .join(maps, "router", "left").join(worst, "router", "left"))
    offered = F.col("msgs_out") + F.col("dropped")
    summary = joined.select(
        "*", ((F.unix_micros("last_ts") - F.unix_micros("first_ts")) / 3.6e9).alias("hours"),
        F.when(offered > 0, F.col("dropped") / offered).alias("drop_fraction"))
    return conform(summary, FLEET).orderBy("router")
