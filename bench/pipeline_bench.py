"""The statistics pipeline on 1 million synthetic rows: how long each stage takes on this machine.

Generates the rows (bench/make_synthetic_stats.py: 5 routers × 8 portals × 25 000 five-second
intervals, with worker restarts, a router restart each, drop bursts, peers, missing intervals), runs
the whole pipeline on `local[*]` exactly as `python -m spark_pipeline` does, checks that every
router's computed message total equals what the generator sent, and records the times.

Run: ``.venv/bin/python -m bench.pipeline_bench`` (``--quick``: 50 000 rows, writes nothing).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from bench.make_synthetic_stats import generate
from bench.report import table, write_section

COMMAND = ".venv/bin/python -m bench.pipeline_bench"
ROWS = 1_000_000


def measure(rows: int, workdir: Path) -> dict:
    from spark_pipeline.job import run
    from spark_pipeline.session import build_session
    began = time.monotonic()
    dataset = generate(workdir / "stats", rows=rows)
    generated = time.monotonic() - began
    began = time.monotonic()
    spark = build_session("local[*]", ui=False)
    started = time.monotonic() - began
    try:
        began = time.monotonic()
        result = run(spark, workdir / "stats", workdir / "report",
                     say=lambda line: print(f"  {line}", flush=True))
        pipeline = time.monotonic() - began
    finally:
        spark.stop()
    computed = {row["router"]: row["msgs_out"] for row in result.tables["fleet_summary"]}
    return {"dataset": dataset, "generate_s": generated, "session_s": started, "pipeline_s": pipeline,
            "stages": result.seconds, "totals_match": computed == dataset["truth"], "report": result.report}


def markdown(m: dict) -> str:
    d = m["dataset"]
    summary = table(["rows", "files", "routers", "portals", "span", "session start", "pipeline", "totals right"],
                    [[f"{d['rows']:,}", d["files"], d["routers"], d["portals"], f"{d['hours']:.1f} h",
                      f"{m['session_s']:.1f} s", f"**{m['pipeline_s']:.1f} s**",
                      "yes" if m["totals_match"] else "**NO**"]])
    stages = table(["stage", "seconds"], [[name, f"{seconds:.1f}"] for name, seconds in m["stages"].items()])
    return (f"{summary}\n\nThe pipeline time is from reading the files to the written report (tables, charts, "
            f"HTML), with `local[*]` and the default 2 GB driver; generating the rows took "
            f"{m['generate_s']:.1f} s and is not included. \"Totals right\": every router's computed message "
            f"count equals what the generator sent, across worker restarts, a router restart and missing "
            f"intervals.\n\n{stages}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--quick", action="store_true", help="50 000 rows, nothing recorded")
    parser.add_argument("--keep", type=Path, default=None, help="keep the data set and report here")
    args = parser.parse_args(argv)
    rows = 50_000 if args.quick else args.rows
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as scratch:
        workdir = args.keep or Path(scratch)
        m = measure(rows, workdir)
    print(markdown(m))
    if not args.quick:
        write_section(f"Statistics pipeline on {rows:,} synthetic rows", markdown(m), COMMAND)
    return 0 if m["totals_match"] else 1


if __name__ == "__main__":
    sys.exit(main())
