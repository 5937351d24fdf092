"""The router at an earlier revision against the router of this tree, side by side in one run: did a
change move its speed, or did the machine? A router's absolute figures move with the host (the C
floor in bench.router_bench moves with them); two routers measured interleaved share that drift.

    python -m bench.ab_router REVISION [TRANSPORT]    (e.g. the commit a session started from)

Each tree runs a router of its own joining two domains of its own (a worker per portal); umsrc →
router → umrcv from the same tree, unpaced, at 64 B and 8 KB, runs interleaved. TRANSPORT is the
source's (tcp, the default, or lbtipc; the receiver's side is LBT-TCP). Not part of `make bench`:
it needs a revision to compare with.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import router_bench as rb
from bench.report import table, write_section

RUNS = 4
CASES = ((64, 500_000), (8192, 100_000))


def checkout(revision: str, directory: Path) -> Path:
    """`revision`'s files (git archive: no worktree, nothing written to the repository)."""
    tree = directory / "old"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(rb.ROOT), "archive", revision], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def trees_and_paths(revision: str, directory: Path) -> tuple[dict[str, Path], dict[str, tuple[Path, Path]]]:
    """The two trees (`revision`'s files, this one) and each one's source and receiver domains,
    of its own."""
    trees = {revision: checkout(revision, directory), "this tree": rb.ROOT}
    lans = [rb.domain(directory, n) for n in (1, 2, 3, 4)]
    return trees, dict(zip(trees, ((lans[0], lans[1]), (lans[2], lans[3]))))


def report(rates: dict, revision: str, cases, path: str, title: str, command: str) -> None:
    """The comparison's table, into BENCHMARKS.md under `title` with its command, and printed."""
    body = comparison(rates, revision, cases, path)
    write_section(title, body, command)
    print(body)


def interleaved(trees: dict[str, Path], paths: dict[str, tuple[Path, Path]], cases, runs: int,
                tag: str = "ab", source_extra=()) -> dict[tuple[str, int], list[float]]:
    """umsrc → umrcv from source domain to receiver domain of each tree's path (`paths[name]`),
    with that tree's tools: `runs` rounds, each every size of `cases` on every tree in turn, so
    drifting load hits both trees. Messages/s at the receiver by (tree, size); any loss ends it."""
    here, rates = rb.ROOT, {}
    try:
        for n in range(runs):
            for size, count in cases:
                for name, root in trees.items():
                    rb.ROOT = root                  # spawn() runs the tools from this tree
                    source_domain, receiver_domain = paths[name]
                    got = rb.um_run(source_domain, receiver_domain, count, size, source_extra,
                                    receiver_extra=("--idle-timeout", 15), topic=f"{tag}.{size}.{n}")
                    if (got["unique"], got["gaps"]) != (count, 0):
                        raise SystemExit(f"{name}, {size} B: lost messages: {got}")
                    rates.setdefault((name, size), []).append(got["rate_msgs_per_s"])
    finally:
        rb.ROOT = here
    return rates


def comparison(rates: dict[tuple[str, int], list[float]], revision: str, cases, path: str) -> str:
    """The table of an A/B run: per message size, each tree's median rate, their ratio and every run."""
    rows = []
    for size, count in cases:
        old, new = (statistics.median(rates[(name, size)]) for name in (revision, "this tree"))
        rows.append([f"{size} B", count, f"{old:,.0f}", f"{new:,.0f}", f"{new / old:.0%}",
                     " · ".join(f"{r:,.0f}" for r in rates[(revision, size)]),
                     " · ".join(f"{r:,.0f}" for r in rates[("this tree", size)])])
    runs = len(rates[(revision, cases[0][0])])
    return (f"{path}, unpaced, messages/s at the receiver: the median of {runs} interleaved runs "
            f"of each tree (each run listed), every message received once:\n\n"
            + table(["size", "messages", revision, "this tree", "this tree / it", f"runs at {revision}",
                     "runs of this tree"], rows))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (1, 2) or argv[1:] not in ([], ["tcp"], ["lbtipc"]):
        print(__doc__, file=sys.stderr)
        return 2
    revision, transport = argv[0], (argv[1:] or ["tcp"])[0]
    here = rb.ROOT
    with tempfile.TemporaryDirectory() as tmp:
        trees, paths = trees_and_paths(revision, Path(tmp))
        routers = {}
        try:
            for name, root in trees.items():
                rb.ROOT = root                      # spawn() runs the tools from this tree
                config_dir = Path(tempfile.mkdtemp(dir=tmp))
                routers[name] = rb.spawn("router.cli.tnwgd", rb.router_config(config_dir, *paths[name]))
                rb.wait_stderr(routers[name], "portals are up")
            rates = interleaved(trees, paths, CASES, RUNS, source_extra=("-T", transport))
        finally:
            rb.ROOT = here
            for proc in routers.values():
                rb.stop(proc, 30)
    tcp = transport == "tcp"
    report(rates, revision, CASES, "umsrc → router → umrcv" if tcp else f"umsrc on {transport} → router → umrcv",
           "Router before and after a change" + ("" if tcp else f", {transport} sources"),
           f".venv/bin/python -m bench.ab_router {revision}" + ("" if tcp else f" {transport}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
