"""Levels over time: keepalive RTT per peer portal, and topic and pattern map sizes.

RTT: a peer portal's counters hold the number of RTT samples and their running mean, min and max
(µs, spec/dro.md). `deltas.interval_rows` turns mean × samples into a running total, so each
interval with new samples has its own mean (`rtt_mean_us`); the percentiles are over those
intervals, the min and max are the counters' own extremes over the same rows.

Map sizes are levels (gauges), not totals: a bucket reports the last value seen in it, the size at
the end of the bucket, never a sum over the bucket.
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_pipeline.schemas import MAP_GAUGES, MAP_SIZES, ROUTER_MAPS, RTT, conform
from spark_pipeline.traffic import bucket_start

PERCENTILES = (0.5, 0.9, 0.99)


def rtt_percentiles(rows: DataFrame) -> DataFrame:
    sampled = rows.where((F.col("portal_kind") == "peer") & (F.col("rtt_samples") > 0))
    # accuracy 100 000: a percentile is off by under 1/100 000 of the ranks, exact for small counts
    percentiles = F.percentile_approx("rtt_mean_us", list(PERCENTILES), 100_000)
    stats = sampled.groupBy("router", "portal").agg(
        F.sum("rtt_samples").alias("samples"), F.count(F.lit(1)).alias("intervals"),
        F.min("rtt_min").alias("rtt_min_us"), F.max("rtt_max").alias("rtt_max_us"),
        percentiles.alias("p"))
    named = stats.select("*", *[F.col("p")[i].alias(f"rtt_p{round(q * 100)}_us")
                                for i, q in enumerate(PERCENTILES)])
    return conform(named, RTT)


def map_sizes(rows: DataFrame, bucket_seconds: int) -> DataFrame:
    last = (rows.withColumn("bucket_start", bucket_start(bucket_seconds))
            .groupBy("router", "portal", "portal_kind", "bucket_start")
            .agg(*[F.max_by(g, "ts").alias(g) for g in MAP_GAUGES]))
    return conform(last, MAP_SIZES)


def router_map_sizes(sizes: DataFrame) -> DataFrame:
    """A router's portals added up per bucket: interest topics and patterns, proxies."""
    summed = sizes.groupBy("router", "bucket_start").agg(
        F.sum("local_interest_topics").alias("interest_topics"),
        F.sum(F.col("local_interest_pcre_patterns") + F.col("local_interest_regex_patterns"))
        .alias("interest_patterns"),
        F.sum("receiver_topics").alias("receiver_topics"),
        F.sum("proxy_sources").alias("proxy_sources"))
    return conform(summed, ROUTER_MAPS)
