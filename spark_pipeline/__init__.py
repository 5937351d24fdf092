"""spark_pipeline: the routers' Parquet statistics → rates, drops, RTT, interest maps, a fleet report.

Owns reading the dataset the Parquet sink writes (router/monitor/stats_schema.py), the pure
transforms, and the tables, charts and HTML report. Run it with `python -m spark_pipeline
--input STATS --output REPORT` (local[*]), `--master URL`, or `spark-submit spark_pipeline/__main__.py`;
from Python, `run_report(input_dir, output_dir)`.
"""
from __future__ import annotations

import sys
from pathlib import Path


def run_report(input_dir, output_dir, *, master: str | None = None, spark=None, quiet: bool = False) -> Path:
    """Run the whole pipeline and return the HTML report's path. Builds (and stops) a local
    session unless `spark` is given; progress lines go to stderr unless `quiet`, and what the input held
    that the report leaves out always does."""
    from spark_pipeline.job import run
    from spark_pipeline.session import build_session
    say = (lambda line: None) if quiet else (lambda line: print(f"spark_pipeline: {line}", file=sys.stderr,
                                                                flush=True))
    own = spark is None
    if own:
        spark = build_session(master, ui=False)
    try:
        return run(spark, input_dir, Path(output_dir), say=say,
                   warn=lambda line: print(f"spark_pipeline: {line}", file=sys.stderr, flush=True)).report
    finally:
        if own:
            spark.stop()
