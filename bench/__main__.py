"""`make bench`: every benchmark in turn; each records its table in BENCHMARKS.md."""
from __future__ import annotations

import importlib
import sys

from bench.report import refuse_arguments

BENCHMARKS = ["bench.direct_bench", "bench.ring_bench", "bench.router_bench", "bench.wake_cost", "bench.scheduling_bench", "bench.hops_bench",
              "bench.uim_bench", "bench.pipeline_bench", "bench.soak_bench"]


def main() -> int:
    status = 0
    for name in BENCHMARKS:
        print(f"== {name}", flush=True)
        status |= importlib.import_module(name).main() or 0
    return status


if __name__ == "__main__":
    refuse_arguments(__doc__)
    sys.exit(main())
