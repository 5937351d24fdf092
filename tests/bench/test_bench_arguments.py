"""A benchmark given an argument it does not take (`--help`, a typo) says what it measures and
exits, instead of running for minutes and rewriting BENCHMARKS.md; a comparison with a revision
that is no commit names it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("module", ["bench", "bench.direct_bench", "bench.ring_bench", "bench.router_bench",
                                    "bench.wake_cost", "bench.scheduling_bench", "bench.hops_bench",
                                    "bench.uim_bench", "bench.soak_bench"])
def test_a_benchmark_given_an_argument_it_does_not_take_prints_its_description_and_exits_2(module):
    before = (ROOT / "BENCHMARKS.md").read_bytes()
    done = run(module, "--help")
    assert done.returncode == 2, done.stderr
    first_line = (ROOT / module.replace(".", "/")).with_suffix(".py")
    if module == "bench":
        first_line = ROOT / "bench" / "__main__.py"
    assert first_line.read_text().split('"""')[1].splitlines()[0] in done.stderr
    assert (ROOT / "BENCHMARKS.md").read_bytes() == before


@pytest.mark.parametrize("module", ["bench.ab_router", "bench.ab_hops"])
@pytest.mark.parametrize("revision", ["--help", "no-such-revision"])
def test_a_comparison_with_a_revision_that_names_no_commit_says_so(module, revision):
    done = run(module, revision)
    assert done.returncode != 0
    assert f"{revision!r} names no commit of this repository" in done.stderr
    assert "Traceback" not in done.stderr
