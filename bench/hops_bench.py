"""Throughput and added latency over 1, 2 and 3 router hops, side by side with the direct path, in
one run. Source in D1, receiver in D2 (direct: both in D1); every router a tnwgd process on loopback:

    direct   umsrc → umrcv in one domain
    1 hop    D1 ─ [R] ─ D2                          (one router, two endpoints)
    2 hops   D1 ─ [A] ══ [B] ─ D2                   (══ a peer link over loopback TCP)
    3 hops   D1 ─ [A] ══ [B] ══ [C] ─ D2
    2 hops, UDP peer link: as 2 hops, the peer link with a <udp> data path

The routers of a topology are started together with short routing timers; the bench waits until
every one of them knows them all and they agree on the topology signature (`routerctl topology`),
measures (a paced latency run, then unpaced throughput runs), then stops them (SIGTERM, then
kill) before the next topology. What the routers counted as dropped and what they logged about
routes while measuring is recorded with the table.

    python -m bench.hops_bench          (or: make bench)
"""
from __future__ import annotations

import collections
import datetime
import glob
import json
import os
import re
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.report import refuse_arguments, table, write_section
from bench.router_bench import (PYTHON, ROOT, added_latency, domain, endpoint_xml, gateway_config, router_cpu, spawn,
                                stop, um_run, wait_stderr)

COMMAND = ".venv/bin/python -m bench.hops_bench"
FAST_ROUTING = ('<route-info propagation-interval="200" check-interval="100" timeout="1200"/>'
                '<route-recalculation backoff-interval="300"/>')
HOPS = (0, 1, 2, 3)                   # 0: the direct path
UDP = "2u"                            # 2 hops, the peer link with a UDP data path
CASES = (0, 1, 2, UDP, 3)
LENGTH = 64
THROUGHPUT_COUNT = 200_000
THROUGHPUT_RUNS = 3                   # unpaced runs per path: the table gives their median rate and every run's loss
# Large messages too: a per-read cost of a peer link (a fresh buffer each read, copies on the way
# to the ring) halved its 8 KB rate while its 64 B rate looked fine.
LARGE_LENGTH, LARGE_COUNT = 8192, 50_000
LARGE = "unpaced 8 KB"
RATE, SECONDS = 5000, 3               # the paced latency run: RATE msgs/s for SECONDS, flushing each
RUN_TIMEOUT = 60                      # s, bound on each umsrc/umrcv run
IDLE_TIMEOUT = 3                      # s without a message after the first: the receiver reports what it got
CONVERGE_TIMEOUT = 30
LOGGED = re.compile(r"^\[(\S+ \S+)\] \[(\w+)\] (?:(UMR-\d+-\d+): )?(.*)")


def label(case) -> str:
    if case == UDP:
        return "2 hops, UDP peer link"
    return "direct" if case == 0 else f"{case} hop{'s' if case > 1 else ''}"


def hop_count(case) -> int:
    return 2 if case == UDP else case


def free_ports(count: int, kind: int = socket.SOCK_STREAM) -> list[int]:
    """`count` distinct ports of `kind` (TCP: for peer acceptors; UDP: for peer links' UDP paths)
    nobody uses now. TCP ones above the kernel's ephemeral range (61000 up, past Linux's default
    32768-60999): an initiator retrying a connection to an ephemeral port may be given that very
    port as its own and connect to itself, and the acceptor could never listen on it."""
    socks = [socket.socket(socket.AF_INET, kind) for _ in range(count)]
    candidates = iter(random.sample(range(61000, 65536), 4536)) if kind == socket.SOCK_STREAM else None
    try:
        for sock in socks:
            while True:
                try:
                    sock.bind(("127.0.0.1", next(candidates) if candidates is not None else 0))
                    break
                except OSError:
                    continue
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def peer_xml(name: str, *, connect: int | None = None, listen: int | None = None, udp: int | None = None) -> str:
    side = (f'<initiator reconnect-interval="200"><address>127.0.0.1</address><port>{connect}</port></initiator>'
            if connect is not None else f"<acceptor><listen-port>{listen}</listen-port></acceptor>")
    # A UDP path at loopback rates (UM's default peer rate limit, 10 Mbit/s, is a WAN's).
    udp_xml = ("" if udp is None else f'<udp><port>{udp}</port><peer-rate-limit data="2000000000" '
               'retransmit="200000000" interval="10"/></udp>')
    return f"<peer><name>{name}</name><single-tcp><nodelay/>{side}</single-tcp>{udp_xml}</peer>"


def chain(directory: Path, hops: int, lan1: Path, lan2: Path, udp: bool = False,
          prefix: str = "hops") -> list[tuple[str, Path]]:
    """The routers of a `hops`-router chain from D1 to D2: (name, configuration file) each.
    Router i reaches D1 (the first) or the previous router (acceptor side), and D2 (the last) or
    the next router (initiator side). `prefix` starts their names (two chains at once need two)."""
    letters = "ABC"[:hops]
    names = [f"{prefix}{os.getpid()}n{hops}{letter}" for letter in letters]
    ports = free_ports(hops - 1)
    udp_ports = free_ports(2 * (hops - 1), socket.SOCK_DGRAM) if udp else [None] * (2 * (hops - 1))
    routers = []
    for i, name in enumerate(names):
        west = (endpoint_xml("LAN1", 1, lan1) if i == 0
                else peer_xml(f"TO_{letters[i - 1]}", listen=ports[i - 1], udp=udp_ports[2 * (i - 1) + 1]))
        east = (endpoint_xml("LAN2", 2, lan2) if i == hops - 1
                else peer_xml(f"TO_{letters[i + 1]}", connect=ports[i], udp=udp_ports[2 * i]))
        routers.append((name, gateway_config(directory / f"{name}.xml", name, west + east, FAST_ROUTING)))
    return routers


def routerctl(name: str, command: str) -> dict:
    for _ in range(2):              # once more only if something outside killed routerctl itself
        out = subprocess.run([PYTHON, "-m", "router.cli.routerctl", "-n", name, "--json", command],
                             capture_output=True, text=True, timeout=30, cwd=ROOT)
        if out.returncode >= 0:
            break
        print(f"    routerctl -n {name} {command} was killed by signal {-out.returncode}; asking again", flush=True)
    if out.returncode != 0:
        raise RuntimeError(f"routerctl -n {name} {command}: exit {out.returncode}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def wait_converged(routers: dict[str, subprocess.Popen], timeout: float = CONVERGE_TIMEOUT) -> float:
    """Poll every router until each knows all of them, none has a recalculation pending, and all
    report the same topology signature; returns the seconds it took."""
    began = time.monotonic()
    deadline = began + timeout
    while True:
        for name, proc in routers.items():
            if proc.poll() is not None:
                raise RuntimeError(f"router {name} exited with {proc.returncode} while converging")
        replies = {name: routerctl(name, "topology") for name in routers}
        if (all(r["router_count"] == len(routers) and not r["pending_changes"] for r in replies.values())
                and len({r["signature"] for r in replies.values()}) == 1):
            return time.monotonic() - began
        if time.monotonic() > deadline:
            state = "; ".join(f"{name}: {r['router_count']} router(s), signature {r['signature']}, "
                              f"pending {r['pending_changes']}" for name, r in replies.items())
            raise RuntimeError(f"not converged within {timeout} s: {state}")
        time.sleep(0.2)


def drop_counters(routers) -> dict[tuple[str, str, str], int]:
    """Every portal's drop counters (fragments and bytes), by (router, portal, counter)."""
    found = {}
    for name in routers:
        for portal, data in routerctl(name, "stats")["portals"].items():
            for counter, value in data["counters"].items():
                if "dropped" in counter:
                    found[name, portal, counter] = value
    return found


def cpu_times() -> tuple[int, int]:
    """(all, idle) jiffies of the whole machine since boot, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    return sum(values), values[3] + values[4]


class Run:
    """One umsrc → umrcv run: its receiver's summary, when it ran, how busy the machine's CPUs were
    meanwhile (the whole run, start-up included), the CPU seconds the routers used in it, and what
    the routers counted as dropped."""

    def __init__(self, kind: str, sent: int, result: dict, began: datetime.datetime, ended: datetime.datetime,
                 busy: float, router_cpu: tuple[float, float], drops: dict[tuple[str, str, str], int] | None):
        self.kind, self.sent, self.result, self.began, self.ended = kind, sent, result, began, ended
        self.busy, self.drops = busy, drops
        self.router_cpu_s, self.worker_cpu_s = router_cpu       # all router processes; their workers alone

    @property
    def lost(self) -> int:
        return self.sent - self.result["unique"]

    def notes(self) -> list[str]:
        if self.drops is None:          # no router on the path
            return [f"{self.kind} run: {self.lost:,} lost"] if self.lost else []
        if self.drops:
            # A fragment counter with its byte counter: "fragments_dropped_X" / "fragment_bytes_dropped_X".
            def nbytes(router: str, portal: str, counter: str) -> int:
                return self.drops.get((router, portal, counter.replace("fragments_", "fragment_bytes_")), 0)
            return [f"{self.kind} run: routers counted " + ", ".join(
                f"{value:,} {counter} ({nbytes(router, portal, counter):,} bytes) at {router[-1]}:{portal}"
                for (router, portal, counter), value in self.drops.items() if "bytes" not in counter)]
        if self.lost:
            return [f"{self.kind} run: {self.lost:,} messages lost while no router drop counter moved"]
        return []


def measure(lan1: Path, receiver_cfg: Path, tag: str, routers: dict[str, subprocess.Popen] | None = None
            ) -> list[Run]:
    """The paced latency run, then THROUGHPUT_RUNS unpaced runs of LENGTH and as many of
    LARGE_LENGTH (after it, so their overload cannot disturb the latency run), each on a topic of
    its own, bounded in count and time. The routers' drop counters are read before the first run
    and after each."""
    routers = routers or {}
    plan = ([("paced", RATE * SECONDS, ("-P", RATE, "-F"), LENGTH)]
            + [("unpaced", THROUGHPUT_COUNT, (), LENGTH)] * THROUGHPUT_RUNS
            + [(LARGE, LARGE_COUNT, (), LARGE_LENGTH)] * THROUGHPUT_RUNS)
    runs = []
    before = drop_counters(routers)
    for i, (kind, count, extra, length) in enumerate(plan):
        began, (total, idle), jiffies = datetime.datetime.now(), cpu_times(), router_cpu(routers)
        result = um_run(lan1, receiver_cfg, count, length, extra, timeout=RUN_TIMEOUT,
                        receiver_extra=("--idle-timeout", IDLE_TIMEOUT), topic=f"bench.hops.{tag}.{i}")
        ended, (total_after, idle_after) = datetime.datetime.now(), cpu_times()
        busy = 1 - (idle_after - idle) / max(1, total_after - total)
        spent = {pid: (ticks - jiffies.get(pid, 0)) / os.sysconf("SC_CLK_TCK")
                 for pid, ticks in router_cpu(routers).items()}
        supervisors = {proc.pid for proc in routers.values()}
        used = (sum(spent.values()), sum(v for pid, v in spent.items() if pid not in supervisors))
        after = drop_counters(routers)
        moved = {key: after[key] - before.get(key, 0) for key in sorted(after) if after[key] != before.get(key, 0)}
        name = kind if kind == "paced" else f"{kind} #{i}"
        runs.append(Run(name, count, result, began, ended, busy, used, moved if routers else None))
        before = after
    return runs


def logged_notes(logs: dict[str, list[str]], marks: dict[str, int], runs: list[Run]) -> list[str]:
    """Warnings and route changes the routers logged while measuring, by router, with the run they
    fell in (every line is also printed)."""
    notes = []
    for name, lines in logs.items():
        counts: collections.Counter = collections.Counter()
        for line in lines[marks[name]:]:
            match = LOGGED.match(line)
            if match is None or (match[2] not in ("WARNING", "ERROR", "CRITICAL")
                                 and not (match[3] or "").startswith("UMR-4001")):
                continue
            print(f"    {name}: {line.rstrip()}", flush=True)
            when = datetime.datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S.%f")
            during = next((f"during the {run.kind} run" for run in runs if run.began <= when <= run.ended),
                          "between runs")
            text = re.sub(r"\(hops\d+n\d(\w) \(node \S+\)\)", r"(\1)", match[4])    # router name → letter
            if text.startswith("routes recalculated"):
                text = "routes recalculated"
            counts[f"{match[3] or match[2]} {text} ({during})"] += 1
        if counts:
            notes.append(f"router {name[-1]} logged " + "; ".join(f"{n}× {what}" for what, n in counts.items()))
    return notes


def run_hops(directory: Path, case, lan1: Path, lan2: Path) -> tuple[list[Run], list[str], float]:
    """Start the chain, wait for convergence, measure, stop every router whatever happened."""
    routers: dict[str, subprocess.Popen] = {}
    logs: dict[str, list[str]] = {}
    hops = hop_count(case)
    try:
        for name, config in chain(directory, hops, lan1, lan2, udp=case == UDP):
            routers[name] = spawn("router.cli.tnwgd", config)
        for name, proc in routers.items():
            wait_stderr(proc, "portals are up", keep=logs.setdefault(name, []))
        converged = wait_converged(routers)
        marks = {name: len(lines) for name, lines in logs.items()}
        runs = measure(lan1, lan2, f"{os.getpid()}.{case}", routers)
        notes = [note for run in runs for note in run.notes()] + logged_notes(logs, marks, runs)
        return runs, notes, converged
    finally:
        stop_all(routers)


def stop_all(routers: dict[str, subprocess.Popen]) -> None:
    """Stop every router of a chain, and remove the shared memory a killed one left."""
    for name, proc in routers.items():
        stop(proc, 20)
        for segment in glob.glob(f"/dev/shm/umr.{name}.{proc.pid}.*"):
            os.unlink(segment)


def lost(run: Run) -> str:
    """What did not arrive: missing inside the received range (gaps), before the first received
    (head) and after the last (tail); and duplicates, if any arrived."""
    sources = run.result["per_source"].values()
    parts = {"in gaps": run.result["gaps"], "head": sum(s["first_seq"] for s in sources),
             "tail": sum(run.sent - 1 - s["last_seq"] for s in sources)}
    text = "0"
    if run.lost:
        detail = ", ".join(f"{n:,} {where}" for where, n in parts.items() if n)
        text = f"{run.lost:,} ({detail})" if sources else f"{run.lost:,} (nothing arrived)"
    return text + (f", {run.result['duplicates']:,} dup" if run.result["duplicates"] else "")


def split(runs: list[Run]) -> tuple[Run, list[Run], list[Run]]:
    """A path's runs: the paced one, the unpaced LENGTH ones, the unpaced LARGE_LENGTH ones."""
    return (runs[0], [run for run in runs[1:] if not run.kind.startswith(LARGE)],
            [run for run in runs[1:] if run.kind.startswith(LARGE)])


def rate(runs: list[Run]) -> float:
    return statistics.median(run.result["rate_msgs_per_s"] for run in runs)


def cpu_per_message(run: Run, routers: int) -> float:
    """Router CPU time per message per router, µs."""
    return run.router_cpu_s / run.sent / routers * 1e6


def interpretation(results: dict) -> str:
    """Where the time goes per hop, from this run's paced p50s and router CPU time (only what the
    numbers of this run bear out is said)."""
    paced = {hops: results[hops][0][0] for hops in results if hops in HOPS}
    if not set(HOPS) <= set(paced) or any(run.result["latency_us"]["p50"] is None for run in paced.values()):
        return ""
    p50 = {hops: run.result["latency_us"]["p50"] for hops, run in paced.items()}
    step = {h: p50[h] - p50[h - 1] for h in HOPS[1:]}
    cpu = {h: cpu_per_message(paced[h], h) for h in HOPS[1:]}
    in_workers = sum(paced[h].worker_cpu_s for h in HOPS[1:]) / max(1e-9, sum(paced[h].router_cpu_s for h in HOPS[1:]))
    text = ("Each added router moves the paced p50 by "
            + ", ".join(f"{step[h]:+.0f} µs ({label(h - 1)} → {label(h)})" for h in HOPS[1:]) + ". "
            "On this path a router is two worker processes: the ingress worker reads a message (LBT-TCP from "
            "the source, or the peer link), writes it into its shared-memory ring and wakes the egress worker, "
            "which sends it on (the proxy source's LBT-TCP, or the next peer link). So each router adds a ring "
            "hand-off with an eventfd wake-up, one more loopback TCP crossing with its reader's wake-up, and "
            "two processes' Python work per message; every message is flushed, so each is handled on its own. "
            "The egress worker's wake-up starts as the message becomes readable at the ingress (an early "
            "wake-up), so it overlaps the ingress worker's read. "
            f"The routers used {' / '.join(f'{cpu[h]:.0f}' for h in HOPS[1:])} µs of CPU per message each "
            f"(1, 2, 3 hops; {in_workers:.0%} of it in the workers), not all of it on a message's way: "
            "the two workers of a router run at once, and an egress worker woken early spends part of its "
            "time watching its ring for the record.")
    if all(step[h] > 1.5 * max(step[1], cpu[h]) for h in HOPS[2:]):
        text += (" The second and third routers add more than their own CPU time per message; the likely rest is "
                 "waiting for a core, as the busy processes (umsrc, umrcv and two workers per router) share "
                 f"{os.cpu_count()} cores (CPU busy column, which also counts any other work on the machine).")
    return text + "\n"


def udp_comparison(results: dict) -> str:
    """The UDP peer link against the TCP one, 2 hops each, from this run."""
    if 2 not in results or UDP not in results:
        return ""
    (tcp, tcp_small, _), (udp, udp_small, _) = split(results[2][0]), split(results[UDP][0])
    return (f"\nWith the peer link's data on UDP (LBT-RU between the routers, TCP keeping the handshake and "
            f"keepalives) 2 hops carry {rate(udp_small):,.0f} msgs/s against {rate(tcp_small):,.0f} on TCP, "
            f"at a paced p50 of {udp.result['latency_us']['p50']} µs against "
            f"{tcp.result['latency_us']['p50']} µs. At {LARGE_LENGTH} B the UDP path's rate limit "
            "(`<peer-rate-limit data>` 2 Gbit/s here) is below what the source offers unpaced: its queue "
            "fills and drops beyond `<max-queue>`, counted (below), as a rate-limited path does.\n")


def main() -> int:
    began = time.monotonic()
    load = os.getloadavg()[0]
    results, problems, notes = {}, [], []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        lan1, lan2 = domain(directory, 1), domain(directory, 2)
        for hops in CASES:
            print(f"  {label(hops)} ...", flush=True)
            try:
                if hops == 0:
                    runs, converged = measure(lan1, lan1, f"{os.getpid()}.0"), None
                    found = [note for run in runs for note in run.notes()]
                else:
                    runs, found, converged = run_hops(directory, hops, lan1, lan2)
            except (RuntimeError, subprocess.TimeoutExpired, ValueError, IndexError) as err:
                problems.append(f"{label(hops)}: {err}")
                print(f"  {label(hops)} failed: {err}", flush=True)
                continue
            results[hops] = (runs, converged)
            notes += [f"{label(hops)}, {note}" for note in found]
    load_after = os.getloadavg()[0]
    rows = []
    _, base_small, base_large = split(results[0][0]) if 0 in results else (None, [], [])
    for hops in CASES:
        if hops not in results:
            rows.append([label(hops), "failed (below)"] + [""] * 12)
            continue
        runs, converged = results[hops]
        latency, small, large = split(runs)
        throughput = []
        for unpaced, base in ((small, base_small), (large, base_large)):
            rates = [run.result["rate_msgs_per_s"] for run in unpaced]
            throughput += [f"{rate(unpaced):,.0f} ({min(rates):,.0f}–{max(rates):,.0f})",
                           f"{rate(unpaced) / rate(base):.0%}" if base else "",
                           " · ".join(lost(run) for run in unpaced)]
        rows.append([label(hops), *throughput,
                     latency.result["latency_us"]["p50"], latency.result["latency_us"]["p99"],
                     added_latency(latency.result, results[0][0][0].result, "p50") if 0 in results and hops else "",
                     lost(latency), f"{cpu_per_message(latency, hop_count(hops)):.0f}" if hops else "",
                     f"{latency.busy:.0%}",
                     "" if converged is None else f"{converged:.1f} s"])
    elapsed = time.monotonic() - began
    body = (f"Source in D1, receiver in D2 (direct: both in D1), {LENGTH} B and {LARGE_LENGTH} B messages, LBT-TCP, "
            "all on loopback; "
            "each hop a `tnwgd` process (a supervisor and one worker per portal), routers joined by single-TCP "
            "peer links with `<nodelay/>`, default `<max-queue>`. Routing timers shortened (`route-info` "
            "propagation 200 ms, check 100 ms, timeout 1200 ms; recalculation backoff 300 ms). Each "
            "topology's routers are started fresh, measured once every router knows all of them, has no "
            "recalculation pending and reports the same topology signature (`routerctl topology`; *converged "
            "after* counts from all portals up), and "
            "stopped (SIGTERM, then kill) before the next.\n\n"
            f"Latency: a paced run first, `umsrc -P {RATE} -F` for {SECONDS} s ({RATE * SECONDS:,} messages): the "
            "receiver's p50/p99 of send-to-delivery time; added = hops p50 − direct p50; router CPU = user + "
            "system time of all router processes during that run, per message and per router; CPU busy = "
            "share of the machine's CPU time not idle during that run (start-up included; any other work "
            f"on the machine counts too). Throughput: then {THROUGHPUT_RUNS} unpaced runs of "
            f"`umsrc -M {THROUGHPUT_COUNT} -l {LENGTH}` and {THROUGHPUT_RUNS} of "
            f"`umsrc -M {LARGE_COUNT} -l {LARGE_LENGTH}`, messages/s at the receiver (first to last message "
            "received; median and range of the runs). *Lost* = sent − distinct received, each run, split "
            "into *in gaps* (missing between the first and the last received), *head* (before the first "
            "received) and *tail* (after the last); *dup* = duplicates, shown only when some arrived. Each "
            "run has a topic of its own and "
            f"is bounded in count and time ({RUN_TIMEOUT} s; the receiver also stops after {IDLE_TIMEOUT} s "
            "without a message).\n\n" +
            table(["path", f"{LENGTH} B msgs/s (range)", "ratio to direct", "lost (each run)",
                   f"{LARGE_LENGTH} B msgs/s (range)", "ratio to direct", "lost (each run)", "p50 µs", "p99 µs",
                   "added p50 µs", "lost (paced)", "router CPU µs/msg", "CPU busy (paced)", "converged after"],
                  rows) +
            "\n\n" + interpretation(results) + udp_comparison(results))
    if notes:
        body += "\nWhat the routers reported while measuring:\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    if problems:
        body += "\nFailed in this run:\n\n" + "\n".join(f"- {problem}" for problem in problems) + "\n"
    body += (f"\nTotal benchmark time {elapsed:.0f} s; 1-minute load average {load:.2f} before it, "
             f"{load_after:.2f} after (other work on the machine lowers every number; compare within one run).\n")
    print(body)
    write_section("Router hops: 1, 2 and 3 routers vs direct path", body, COMMAND)
    return 1 if problems else 0


if __name__ == "__main__":
    refuse_arguments(__doc__)
    sys.exit(main())
