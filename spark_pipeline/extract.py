"""Reading the statistics dataset the routers' Parquet sinks wrote.

Files are found recursively and matched by name (`*.parquet`), without partition discovery: the
`router=`/`date=` directories are for people and for pruning by hand (`--input stats/router=r1`),
while every row already carries `router` and `ts`. Reading with the explicit schema makes a file
from an older schema version yield nulls for the counters it lacks instead of failing.
"""
from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_pipeline.schemas import STATS


class NoStatistics(Exception):
    """The input holds no statistics rows: nothing to report, and the user should know why."""


def read_stats(spark: SparkSession, path: str | Path) -> DataFrame:
    location = str(path)
    if "://" not in location and not Path(location).exists():
        raise NoStatistics(f"{location} does not exist (expected router=NAME/date=YYYY-MM-DD/part-N.parquet "
                           "under the directory of <format-module module=\"parquet\" options=\"dir=...\"/>)")
    return (spark.read.schema(STATS)
            .option("recursiveFileLookup", "true")
            .option("pathGlobFilter", "*.parquet")
            .parquet(location))


def describe(stats: DataFrame, location: str | Path) -> dict:
    """Rows, routers, portals and the time span, in one pass; NoStatistics when there are none."""
    row = stats.agg(F.count(F.lit(1)).alias("rows"), F.count_distinct("router").alias("routers"),
                    F.count_distinct("router", "portal").alias("portals"),
                    F.unix_micros(F.min("ts")).alias("first_us"),
                    F.unix_micros(F.max("ts")).alias("last_us")).first()
    if not row["rows"]:
        raise NoStatistics(_why_no_rows(str(location)))
    facts = row.asDict()
    facts["span_s"] = (facts["last_us"] - facts["first_us"]) / 1e6
    return facts


def _why_no_rows(location: str) -> str:
    """A router younger than its first rotation has written rows, all in the hidden part it is
    still growing (readers skip it until it is published): say so, rather than that statistics
    look switched off."""
    growing = [] if "://" in location else sorted(Path(location).rglob(".part-*.parquet.open"))
    if growing:
        return (f"no statistics rows under {location}: {len(growing)} part(s) are still being written, not "
                f"published yet ({growing[0]}{', ...' if len(growing) > 1 else ''}); a part is published when it "
                "rotates (<format-module module=\"parquet\"> option rotate_minutes, default 60: on the UTC hour) "
                "or when the router stops")
    return (f"no statistics rows under {location}: is <monitor interval> set and "
            "<format-module module=\"parquet\"> selected in the router's <daemon>?")
