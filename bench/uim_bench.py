"""Unicast immediate requests: round trip in one domain against across a router.

umreq --unicast asks umresp --unicast, one request at a time, each waiting for its answer: in one
domain (TCP:ip:port, straight to the responder) and from LAN1 to a responder in LAN2
(TCP:2:ip:port: to the router's LAN1 portal, over its ring to the LAN2 portal, to the responder, and
the answer back the same way). Interleaved runs, bounded in count and time.
"""
from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.report import refuse_arguments, table, write_section
from bench.router_bench import domain, router_config, spawn, stop, wait_stderr

COMMAND = ".venv/bin/python -m bench.uim_bench"
RUNS = 3
REQUESTS = 1000
TOPIC = "bench.uim"


def _said_address(responder, timeout: float = 30) -> str:
    """The ip:port umresp --unicast says it takes requests at."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = responder.stderr.readline()
        if not line:
            break
        if "unicast immediate requests to TCP:" in line:
            return line.split("TCP:", 1)[1].split(" ", 1)[0]
    raise RuntimeError("umresp did not say its address")


def round_trips(asker_cfg: Path, answerer_cfg: Path, domain_id: int | None, length: int) -> dict:
    """One run: REQUESTS requests of `length` bytes; umreq's summary (rtt_us percentiles)."""
    responder = spawn("router.cli.umresp", "-c", answerer_cfg, "--json", "-C", REQUESTS, "--timeout", 120,
                      "--unicast", TOPIC)
    try:
        address = _said_address(responder)
        target = f"TCP:{address}" if domain_id is None else f"TCP:{domain_id}:{address}"
        requester = spawn("router.cli.umreq", "-c", asker_cfg, "--json", "-R", REQUESTS, "-l", length,
                          "--unicast", target, "--wait-timeout", 30, "--response-timeout", 5, TOPIC)
        out, _ = requester.communicate(timeout=180)
        return json.loads(out.strip().splitlines()[-1])
    finally:
        if responder.poll() is None:
            responder.kill()
            responder.wait()


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        lans = {n: domain(directory, n) for n in (1, 2)}
        router = spawn("router.cli.tnwgd", router_config(directory, lans[1], lans[2]))
        try:
            wait_stderr(router, "portals are up")
            for length in (64, 8192):
                runs = {"direct": [], "routed": []}
                for _ in range(RUNS):               # interleaved, so drifting machine load hits both
                    runs["direct"].append(round_trips(lans[1], lans[1], None, length))
                    runs["routed"].append(round_trips(lans[1], lans[2], 2, length))
                median = {path: {q: statistics.median(r["rtt_us"][q] for r in found) for q in ("p50", "p99")}
                          for path, found in runs.items()}
                unanswered = {path: sum(r["unanswered"] for r in found) for path, found in runs.items()}
                rows.append([f"{length} B", median["direct"]["p50"], median["direct"]["p99"],
                             median["routed"]["p50"], median["routed"]["p99"],
                             round(median["routed"]["p50"] - median["direct"]["p50"], 1),
                             f"{unanswered['direct']} / {unanswered['routed']}"])
        finally:
            stop(router, 30)
    body = (f"Round trip of a unicast immediate request and its response, µs (medians of {RUNS} interleaved "
            f"runs of {REQUESTS} requests, one at a time, each waiting for its answer): `umreq --unicast` asking "
            "`umresp --unicast` in the same domain (TCP:ip:port) and across a router with a worker per portal "
            "(TCP:2:ip:port; request and response each cross both workers and two TCP hops more):\n\n" +
            table(["request", "one domain p50", "one domain p99", "across the router p50",
                   "across the router p99", "added p50", "unanswered (one domain / router)"], rows) +
            "\n\nEach way, the router adds what a paced data message meets (\"Router (1 hop)\" above) "
            "and more: the portal's context reads the message at its request port and checks it whole, "
            "and a TCP connection to the target carries it on (the egress portal's worker is woken early, "
            "as for a stream's frames: the next request, or answer, most likely goes where the last one "
            "went). Across the router a round trip wakes a sleeping process six times in turn (the "
            "two workers, umresp, the two workers, umreq; in one domain twice), and each waits for the "
            "process, and often its CPU, to wake. Both ends here are Python tools whose "
            "requests wait on a thread of their own (umreq's round trip in one domain is itself over 100 µs).")
    print(body)
    write_section("Unicast immediate requests: one domain vs across a router", body, COMMAND)
    return 0


if __name__ == "__main__":
    refuse_arguments(__doc__)
    sys.exit(main())
