"""One local SparkSession for the whole test session, and a builder for small statistics frames.

Lean on purpose (2 cores, 2 shuffle partitions, no UI): the JVM starts once, every test reuses it.
"""
from __future__ import annotations

import datetime as dt
import shutil

import pytest

from router.monitor import stats_schema

T0 = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


@pytest.fixture(scope="session")
def spark():
    if shutil.which("java") is None:
        pytest.fail("Spark needs Java: run scripts/install-sysdeps.sh (or `make test`, which does)")
    from pyspark.sql import SparkSession
    session = (SparkSession.builder.master("local[2]").appName("umrouter-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.memory", "1g")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def stats_row(ts: float, portal: str = "LAN1", router: str = "r1", kind: str = "endpoint", pid: int = 100,
              restarts: int = 0, epoch: float = 0.0, **counters) -> dict:
    """A statistics row as the sink writes it: every counter 0 unless given; times in seconds from T0."""
    row = {name: 0 for name in stats_schema.COUNTER_COLUMNS}
    unknown = set(counters) - set(row)
    assert not unknown, f"not counters: {unknown}"
    row.update(counters)
    row.update(ts=at(ts), router=router, portal=portal, portal_kind=kind,
               domain_id=1 if kind == "endpoint" else None, worker_pid=pid, worker_restarts=restarts,
               counters_epoch=at(epoch))
    return row


@pytest.fixture
def make_stats(spark):
    """`make_stats([stats_row(...), ...])` → a DataFrame with the input schema."""
    from spark_pipeline.schemas import STATS

    def make(rows: list[dict]):
        return spark.createDataFrame([tuple(r[f.name] for f in STATS.fields) for r in rows], STATS)
    return make


@pytest.fixture
def expect(spark):
    """`expect(actual, rows)`: the expected frame for `assertDataFrameEqual(actual, ...)`, built with
    the actual's column names and types (a timestamp compares as a timestamp, not a Python datetime)."""
    def build(actual, rows: list[tuple]):
        return spark.createDataFrame(rows, actual.schema)
    return build
