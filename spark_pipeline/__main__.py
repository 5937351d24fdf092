"""`python -m spark_pipeline --input stats/ --output report/` (or `spark-submit spark_pipeline/__main__.py ...`).

Exit status: 0 report written, 2 nothing to report (no statistics where --input points).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

if not __package__:          # spark-submit runs this file as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_pipeline.extract import NoStatistics  # noqa: E402
from spark_pipeline.job import run  # noqa: E402
from spark_pipeline.session import build_session  # noqa: E402


def positive_seconds(text: str) -> int:
    """A bucket length: whole seconds above zero (buckets are counted up from the epoch)."""
    try:
        seconds = int(text)
    except ValueError:
        seconds = 0
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds above 0")
    return seconds


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m spark_pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True,
                        help="the sink's directory (holding router=NAME/...), or any directory below it")
    parser.add_argument("--output", required=True, help="directory for tables, charts and index.html")
    parser.add_argument("--master", default=None,
                        help="Spark master URL (default local[*]; under spark-submit, spark-submit's)")
    parser.add_argument("--bucket", type=positive_seconds, default=None, metavar="SECONDS",
                        help="chart and rate bucket length (default: chosen from the time span)")
    parser.add_argument("--driver-memory", default="2g", help="for local masters (default 2g)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser.parse_args(argv)


def main(argv=None, spark=None) -> int:
    """`spark`: a running session to use (and leave running), for tests; normally built here."""
    args = parse_args(argv)
    say = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    own = spark is None
    if own:
        spark = build_session(args.master, driver_memory=args.driver_memory)
    try:
        result = run(spark, args.input, Path(args.output), bucket_seconds=args.bucket, say=say,
                     warn=lambda line: print(f"spark_pipeline: {line}", file=sys.stderr, flush=True))
    except NoStatistics as err:
        print(f"spark_pipeline: {err}", file=sys.stderr)
        return 2
    finally:
        if own:
            spark.stop()
    print(result.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
