"""Reading the statistics dataset the routers' Parquet sinks wrote.

Files are found recursively and matched by name (`*.parquet`), without partition discovery: the
`router=`/`date=` directories are for people and for pruning by hand (`--input stats/router=r1`),
while every row already carries `router` and `ts`. Reading with the explicit schema makes a file
from an older schema version yield nulls for the counters it lacks instead of failing.

Months of files from a fleet hold the odd one that is not what the sink wrote: a part cut short
(a copy from a router interrupted, a disk fault), someone's other Parquet files, this job's own
report written inside the statistics directory. None of them stops the job: an unreadable file is
skipped (Spark's ignoreCorruptFiles), a row without the identity every statistics row has is left
out (`statistics_rows`), and `describe` counts and names both for the report, so nothing is lost
without a word.
"""
from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from router.monitor import stats_schema
from spark_pipeline.schemas import STATS

# Every row the sink writes has these; a row of another file read with STATS has them null.
IDENTITY = tuple(name for name, _, nullable in stats_schema.IDENTITY_COLUMNS if not nullable)
IS_STATISTICS = " AND ".join(f"{name} IS NOT NULL" for name in IDENTITY)
NAMED_FILES = 5             # a message names this many files, then says how many more


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
            .option("ignoreCorruptFiles", "true")
            .parquet(location))


def statistics_rows(stats: DataFrame) -> DataFrame:
    """The rows a router's sink wrote: those of other Parquet files are left out (`describe`
    counts them)."""
    return stats.where(IS_STATISTICS)


def describe(stats: DataFrame, location: str | Path) -> dict:
    """Rows, routers, portals and the time span of the statistics rows, in one pass, and what the
    report leaves out: `unreadable_files` (gave no rows: cut short, corrupt, empty, other types),
    `foreign_rows` in `foreign_files` (not statistics) and `unpublished_parts` (not read).
    NoStatistics when no row is statistics."""
    usable, file = F.expr(IS_STATISTICS), F.col("source_file")
    # Named in a projection first: Spark refuses input_file_name() inside an aggregate.
    stats = stats.withColumn("source_file", F.input_file_name())
    row = stats.agg(F.count(F.when(usable, 1)).alias("rows"), F.count(F.when(~usable, 1)).alias("foreign_rows"),
                    F.count_distinct(file).alias("files_read"),
                    F.count_distinct(F.when(usable, F.col("router"))).alias("routers"),
                    F.count_distinct(F.when(usable, F.col("router")), "portal").alias("portals"),
                    F.unix_micros(F.min(F.when(usable, F.col("ts")))).alias("first_us"),
                    F.unix_micros(F.max(F.when(usable, F.col("ts")))).alias("last_us")).first()
    facts = row.asDict()
    listed = stats.inputFiles()
    facts["files"] = len(listed)
    facts["unreadable_files"] = []
    if facts["files_read"] < len(listed):       # only then: a second pass for the names
        read = {found[0] for found in stats.select(file).distinct().collect()}
        facts["unreadable_files"] = sorted(set(listed) - read)
    facts["foreign_files"] = [] if not facts["foreign_rows"] else sorted(
        found[0] for found in stats.where(~usable).select(file).distinct().collect())
    facts["unpublished_parts"] = _growing(str(location))
    if not facts["rows"]:
        also = left_out({**facts, "unpublished_parts": []})        # the reason below names those
        raise NoStatistics(" ".join([_why_no_rows(str(location), facts["unpublished_parts"]), *also]))
    facts["span_s"] = (facts["last_us"] - facts["first_us"]) / 1e6
    return facts


def left_out(facts: dict) -> list[str]:
    """What `describe` found and the report leaves out, one sentence each (none when all was read)."""
    said = []
    if facts["unreadable_files"]:
        names = facts["unreadable_files"]
        said.append(f"Left out {_files(names)} that gave no rows (cut short, corrupt, empty, or columns of other "
                    f"types; the router publishes only complete files): {_names(names)}.")
    if facts["foreign_rows"]:
        said.append(f"Left out {facts['foreign_rows']:,} rows that are not router statistics (no "
                    f"{'/'.join(IDENTITY)}) from {_files(facts['foreign_files'])}: {_names(facts['foreign_files'])}.")
    if facts["unpublished_parts"]:
        parts = facts["unpublished_parts"]
        said.append(f"Not read: {len(parts)} part{'s' if len(parts) != 1 else ''} not published yet (the newest "
                    "rows of a router still writing them, or the last rows of one that stopped without publishing "
                    f"them; it does when it starts again): {_names([str(p) for p in parts])}.")
    return said


def _files(names: list[str]) -> str:
    return f"{len(names)} file{'s' if len(names) != 1 else ''}"


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:NAMED_FILES])
    return shown + (f" and {len(names) - NAMED_FILES} more" if len(names) > NAMED_FILES else "")


def _growing(location: str) -> list[Path]:
    """The hidden parts routers are still growing (or left when they stopped): readers skip them
    until the router publishes them at rotation, at shutdown, or when it starts again."""
    return [] if "://" in location else sorted(Path(location).rglob(".part-*.parquet.open"))


def _why_no_rows(location: str, growing: list[Path]) -> str:
    """A router younger than its first rotation has written rows, all in the hidden part it is
    still growing: say so, rather than that statistics look switched off."""
    if growing:
        return (f"no statistics rows under {location}: {len(growing)} part(s) are still being written, not "
                f"published yet ({growing[0]}{', ...' if len(growing) > 1 else ''}); a part is published when it "
                "rotates (<format-module module=\"parquet\"> option rotate_minutes, default 60: on the UTC hour) "
                "or when the router stops")
    return (f"no statistics rows under {location}: is <monitor interval> set and "
            "<format-module module=\"parquet\"> selected in the router's <daemon>?")
