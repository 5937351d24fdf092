"""Building the SparkSession: only `__main__` and `run_report` call this, never a transform.

`local[*]` unless told otherwise; under spark-submit the master and resources come from
spark-submit (it hands Python a running JVM through PYSPARK_GATEWAY_PORT) and are left alone.
Local runs get enough driver memory to cache a few million statistics rows. Shuffle partitions
are sized to the input once its row count is known (`size_shuffles`), unless the user set them:
Spark's default of 200 makes a small data set crawl through 200 tasks per stage.
"""
from __future__ import annotations

import os


def under_spark_submit() -> bool:
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(master: str | None = None, app_name: str = "umrouter-stats", ui: bool = True,
                  driver_memory: str = "2g"):
    from pyspark.sql import SparkSession
    builder = SparkSession.builder.appName(app_name).config("spark.sql.session.timeZone", "UTC")
    if master is None and not under_spark_submit():
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
    if master is not None and master.startswith("local"):
        builder = (builder.config("spark.driver.memory", driver_memory)
                   .config("spark.ui.enabled", str(ui).lower())
                   .config("spark.ui.showConsoleProgress", "true"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    _quiet_skipped_file_warnings(spark)
    return spark


def _quiet_skipped_file_warnings(spark) -> None:
    """Spark logs every file it skips as unreadable (extract.read_stats: ignoreCorruptFiles) with a
    WARN and a Java stack trace, once per pass over the input; the job names those files itself,
    once and plainly (extract.left_out). Where log4j is not reachable the warnings just stay."""
    try:
        jvm = spark.sparkContext._jvm
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            "org.apache.spark.sql.execution.datasources.FileScanRDD", jvm.org.apache.logging.log4j.Level.ERROR)
    except Exception:           # noqa: BLE001 - a logging nicety, never a reason not to run
        pass


def size_shuffles(spark, rows: int, rows_per_partition: int = 250_000) -> int:
    """One shuffle partition per `rows_per_partition` input rows, at least one per core, unless
    `spark.sql.shuffle.partitions` was set (spark-submit --conf, or the session's builder)."""
    configured = spark.sparkContext.getConf().get("spark.sql.shuffle.partitions")
    if configured is not None:
        return int(configured)
    partitions = max(spark.sparkContext.defaultParallelism, min(4000, rows // rows_per_partition + 1))
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    return partitions
