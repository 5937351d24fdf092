"""The router at an earlier revision against the router of this tree, side by side in one run: did a
change move its speed, or did the machine? A router's absolute figures move with the host (the C
floor in bench.router_bench moves with them); two routers measured interleaved share that drift.

    python -m bench.ab_router REVISION [TRANSPORT]    (e.g. the commit a session started from)

Each tree runs a router of its own joining two domains of its own (a worker per portal); umsrc →
router → umrcv from the same tree, unpaced, at 64 B and 8 KB, runs interleaved. TRANSPORT is the
source's (tcp, the default, lbtipc, or lbtrm; the receiver's side is LBT-TCP). An LBT-RM source
sends at most 1 Gbit/s (its data rate limit; UM's default is 10 Mbit/s), so at 8 KB both trees
are paced alike and what tells them apart is the CPU each router spent per message, in the
table beside the rates. Not part of `make bench`: it needs a revision to compare with.
"""
from __future__ import annotations

import os
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
    commit = subprocess.run(["git", "-C", str(rb.ROOT), "rev-parse", "--verify", "--quiet", "--end-of-options",
                             f"{revision}^{{commit}}"], capture_output=True, text=True).stdout.strip()
    if not commit:
        raise SystemExit(f"{revision!r} names no commit of this repository: give one such as HEAD~1 or a hash")
    tree = directory / "old"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(rb.ROOT), "archive", commit], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def trees_and_paths(revision: str, directory: Path) -> tuple[dict[str, Path], dict[str, tuple[Path, Path]]]:
    """The two trees (`revision`'s files, this one) and each one's source and receiver domains,
    of its own."""
    trees = {revision: checkout(revision, directory), "this tree": rb.ROOT}
    lans = [rb.domain(directory, n) for n in (1, 2, 3, 4)]
    return trees, dict(zip(trees, ((lans[0], lans[1]), (lans[2], lans[3]))))


LBTRM_RATE_LIMIT = 1_000_000_000        # bits/s: a rate the router keeps up with at 8 KB, no loss


def setting(cfg: Path, name: str) -> str:
    """The value of `context NAME VALUE` in a plain-text UM configuration file."""
    return next(line.split()[2] for line in cfg.read_text().splitlines() if line.split()[1:2] == [name])


def lbtrm_source_domain(cfg: Path, n: int) -> Path:
    """The source domain `cfg` for an LBT-RM source: a multicast group and UDP ports of its own
    (each tree's, so one tree's router never hears the other's session), 1 Gbit/s, and the
    receive buffer the kernel allows for the router's proxy receiver."""
    path = cfg.with_name(cfg.stem + "-lbtrm.cfg")
    base = int(setting(cfg, "resolver_multicast_port"))
    path.write_text(cfg.read_text()
                    + f"context transport_lbtrm_multicast_address_low 239.195.{os.getpid() % 200}.{n}\n"
                    f"context transport_lbtrm_multicast_address_high 239.195.{os.getpid() % 200}.{n}\n"
                    f"context transport_lbtrm_destination_port {base + 3}\n"
                    f"context transport_lbtrm_source_port_low {base + 4}\n"
                    f"context transport_lbtrm_source_port_high {base + 9}\n"
                    f"context transport_lbtrm_data_rate_limit {LBTRM_RATE_LIMIT}\n"
                    "context transport_lbtrm_rate_interval 10\n"
                    "context transport_lbtrm_receiver_socket_buffer 8388608\n")
    return path


def report(rates: dict, revision: str, cases, path: str, title: str, command: str, cpu: dict | None = None) -> None:
    """The comparison's table, into BENCHMARKS.md under `title` with its command, and printed."""
    body = comparison(rates, revision, cases, path, cpu)
    write_section(title, body, command)
    print(body)


def interleaved(trees: dict[str, Path], paths: dict[str, tuple[Path, Path]], cases, runs: int,
                tag: str = "ab", source_extra=(), routers: dict[str, subprocess.Popen | list] | None = None,
                cpu: dict | None = None) -> dict[tuple[str, int], list[float]]:
    """umsrc → umrcv from source domain to receiver domain of each tree's path (`paths[name]`),
    with that tree's tools: `runs` rounds, each every size of `cases` on every tree in turn, so
    drifting load hits both trees. Messages/s at the receiver by (tree, size); any loss ends it.
    With `routers` (each tree's router, or its chain's routers), `cpu` gets the µs of CPU they
    spent per message, likewise."""
    here, rates = rb.ROOT, {}
    try:
        for n in range(runs):
            for size, count in cases:
                for name, root in trees.items():
                    rb.ROOT = root                  # spawn() runs the tools from this tree
                    source_domain, receiver_domain = paths[name]

                    def run():
                        return rb.um_run(source_domain, receiver_domain, count, size, source_extra,
                                         receiver_extra=("--idle-timeout", 15), topic=f"{tag}.{size}.{n}")
                    got = run() if routers is None else rb.measured(run, routers[name], count)
                    if (got["unique"], got["gaps"]) != (count, 0):
                        raise SystemExit(f"{name}, {size} B: lost messages: {got}")
                    rates.setdefault((name, size), []).append(got["rate_msgs_per_s"])
                    if routers is not None and cpu is not None:
                        cpu.setdefault((name, size), []).append(got["router_cpu_us"])
    finally:
        rb.ROOT = here
    return rates


def comparison(rates: dict[tuple[str, int], list[float]], revision: str, cases, path: str,
               cpu: dict | None = None) -> str:
    """The table of an A/B run: per message size, each tree's median rate, their ratio and every
    run; with `cpu`, each router's median CPU per message and their ratio too."""
    rows = []
    for size, count in cases:
        old, new = (statistics.median(rates[(name, size)]) for name in (revision, "this tree"))
        row = [f"{size} B", count, f"{old:,.0f}", f"{new:,.0f}", f"{new / old:.0%}"]
        if cpu:
            old_cpu, new_cpu = (statistics.median(cpu[(name, size)]) for name in (revision, "this tree"))
            row += [f"{old_cpu:.2f}", f"{new_cpu:.2f}", f"{new_cpu / old_cpu:.0%}"]
        rows.append(row + [" · ".join(f"{r:,.0f}" for r in rates[(revision, size)]),
                           " · ".join(f"{r:,.0f}" for r in rates[("this tree", size)])])
    runs = len(rates[(revision, cases[0][0])])
    headers = ["size", "messages", revision, "this tree", "this tree / it"]
    if cpu:
        headers += [f"router CPU µs/msg, {revision}", "router CPU µs/msg, this tree", "CPU: this tree / it"]
    return (f"{path}, unpaced, messages/s at the receiver: the median of {runs} interleaved runs "
            f"of each tree (each run listed), every message received once"
            + (" (router CPU: all its processes, user + system)" if cpu else "") + ":\n\n"
            + table(headers + [f"runs at {revision}", "runs of this tree"], rows))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (1, 2) or argv[1:] not in ([], ["tcp"], ["lbtipc"], ["lbtrm"]):
        print(__doc__, file=sys.stderr)
        return 2
    revision, transport = argv[0], (argv[1:] or ["tcp"])[0]
    here = rb.ROOT
    cpu: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        trees, paths = trees_and_paths(revision, Path(tmp))
        if transport == "lbtrm":
            paths = {name: (lbtrm_source_domain(source, n), receiver)
                     for n, (name, (source, receiver)) in enumerate(paths.items(), start=1)}
        routers = {}
        try:
            for name, root in trees.items():
                rb.ROOT = root                      # spawn() runs the tools from this tree
                config_dir = Path(tempfile.mkdtemp(dir=tmp))
                routers[name] = rb.spawn("router.cli.tnwgd", rb.router_config(config_dir, *paths[name]))
                rb.wait_stderr(routers[name], "portals are up")
            rates = interleaved(trees, paths, CASES, RUNS, source_extra=("-T", transport), routers=routers, cpu=cpu)
        finally:
            rb.ROOT = here
            for proc in routers.values():
                rb.stop(proc, 30)
    tcp = transport == "tcp"
    path = "umsrc → router → umrcv" if tcp else f"umsrc on {transport} → router → umrcv"
    if transport == "lbtrm":
        path += f" (the source's data rate limit {LBTRM_RATE_LIMIT / 1e9:g} Gbit/s)"
    report(rates, revision, CASES, path,
           "Router before and after a change" + ("" if tcp else f", {transport} sources"),
           f".venv/bin/python -m bench.ab_router {revision}" + ("" if tcp else f" {transport}"), cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
