"""Peer-linked routers at an earlier revision against this tree's, side by side in one run: did a
change to the peer link or the workers move a multi-hop path's speed, or did the machine?
(bench.ab_router does the same for one router between two endpoints.)

    python -m bench.ab_hops REVISION [HOPS [udp]]     (HOPS 2 or 3 routers in a chain; default 2)

Each tree runs a chain of HOPS routers of its own (bench.hops_bench's shape: D1 ─ [A] ══ [B] ─ D2,
single-TCP peer links with <nodelay/>, short routing timers) between two domains of its own, waits
until its routers agree on the topology, then umsrc → routers → umrcv from the same tree, unpaced,
at 64 B and 8 KB, runs interleaved with the other tree's. With `udp` the links carry their data on
a <udp> path at hops_bench's 2 Gbit/s rate limit, and only 64 B is measured (at 8 KB that limit is
the figure). Not part of `make bench`: it needs a
revision to compare with.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from bench import hops_bench as hb
from bench import router_bench as rb
from bench.ab_router import interleaved, report, trees_and_paths

RUNS = 4
CASES = ((64, 200_000), (8192, 50_000))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not 1 <= len(argv) <= 3 or argv[1:2] not in ([], ["2"], ["3"]) or argv[2:] not in ([], ["udp"]):
        print(__doc__, file=sys.stderr)
        return 2
    revision, hops, udp = argv[0], int(argv[1]) if len(argv) > 1 else 2, argv[2:] == ["udp"]
    here = rb.ROOT
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        trees, paths = trees_and_paths(revision, directory)
        chains: dict[str, dict] = {}
        try:
            for (name, root), prefix in zip(trees.items(), ("abold", "abnew")):
                rb.ROOT = root                      # spawn() runs the routers from this tree
                routers = chains[name] = {}
                for router, config in hb.chain(directory, hops, *paths[name], udp=udp, prefix=prefix):
                    routers[router] = rb.spawn("router.cli.tnwgd", config)
                for proc in routers.values():
                    rb.wait_stderr(proc, "portals are up")
                hb.wait_converged(routers)
            cases = CASES[:1] if udp else CASES
            cpu: dict = {}
            rates = interleaved(trees, paths, cases, RUNS, tag=f"abhops{hops}{'u' if udp else ''}",
                                routers={name: list(routers.values()) for name, routers in chains.items()}, cpu=cpu)
        finally:
            rb.ROOT = here
            for routers in chains.values():
                hb.stop_all(routers)
    links = "peer links with a UDP data path" if udp else "peer links"
    report(rates, revision, cases, f"umsrc → {hops} routers joined by {links} → umrcv",
           f"{hops} router hops{', UDP peer links,' if udp else ''} before and after a change",
           f".venv/bin/python -m bench.ab_hops {revision} {hops}{' udp' if udp else ''}", cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
