"""Writing result tables: Parquet through Spark (any filesystem Spark can write), CSV on the driver.

The aggregated tables are small by construction (one row per portal, or per portal per chart
bucket), so each is computed once, written as Parquet, and collected for its CSV and its chart.
Timestamps are collected as epoch microseconds and turned into UTC datetimes here, because PySpark
would otherwise convert them to the driver's local time zone.
"""
from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampType


def parquet_path(output: Path, name: str) -> Path:
    return output / "parquet" / name


def csv_path(output: Path, name: str) -> Path:
    return output / "csv" / f"{name}.csv"


def write_parquet(frame: DataFrame, output: Path, name: str) -> Path:
    path = parquet_path(output, name)
    frame.write.mode("overwrite").parquet(str(path))
    return path


def write_table(frame: DataFrame, output: Path, name: str) -> list[dict]:
    """Parquet and CSV of a small table; returns its rows (UTC datetimes) for charts and the report."""
    frame = frame.persist()
    try:
        write_parquet(frame.coalesce(1), output, name)
        rows = collect(frame)
    finally:
        frame.unpersist()
    write_csv(rows, [f.name for f in frame.schema.fields], csv_path(output, name))
    return rows


def collect(frame: DataFrame) -> list[dict]:
    stamps = [f.name for f in frame.schema.fields if isinstance(f.dataType, TimestampType)]
    as_micros = frame.select(*[F.unix_micros(c).alias(c) if c in stamps else F.col(c) for c in frame.columns])
    rows = []
    for row in as_micros.collect():
        values = row.asDict()
        for column in stamps:
            if values[column] is not None:
                values[column] = dt.datetime.fromtimestamp(values[column] / 1e6, dt.timezone.utc)
        rows.append(values)
    return rows


def write_csv(rows: list[dict], columns: list[str], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(row[k]) for k in columns})
    return path


def _cell(value):
    """Empty for unknown (never a word like N/A in a number column); ISO 8601 UTC for times."""
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return value
