"""Worker scheduling (router.worker.scheduling), side by side in one run: why workers batch while
they carry a stream, and why only then.

1. Unpaced 64 B through two routers on the same host, one with `<worker-scheduling>adaptive` and
   one with `normal`, runs interleaved: throughput and the routers' CPU per message.
2. Paced 2000 msgs/s on an otherwise idle host, interleaved with the direct path (source and
   receiver in one domain): what each router adds to the receiver's latency. Workers on the normal
   policy ask for the kernel's shortest time slice; the bench puts the `normal` router's workers
   back on the default slice, so the two compare the slice.
3. Paced 2000 msgs/s while two busy loops keep both CPUs busy (bounded in time): adaptive workers,
   workers on the normal policy and the default slice, then those forced to SCHED_BATCH for the
   whole run (what adaptive scheduling would do if it batched paced traffic too): the receiver's
   latency.

    python -m bench.scheduling_bench
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.report import refuse_arguments, table, write_section
from bench.router_bench import (PYTHON, children, domain, endpoint_xml, gateway_config, measured, spawn, stop,
                                um_run, wait_stderr)
from router.worker.scheduling import DEFAULT_SLICE, set_attributes

COMMAND = ".venv/bin/python -m bench.scheduling_bench"
RUNS = 3
HOG_SECONDS = 60          # the busy loops end by themselves even if this process dies
IDLE_LABELS = {"direct": "direct path (no router)", "adaptive": "adaptive: normal policy, 100 µs slice",
               "normal": "normal, on the default slice (set by the bench)"}


def start_router(directory: Path, mode: str, lan1: Path, lan2: Path) -> subprocess.Popen:
    config = gateway_config(directory / f"{mode}.xml", f"sched{mode}{os.getpid()}",
                            endpoint_xml("LAN1", 1, lan1) + endpoint_xml("LAN2", 2, lan2),
                            f"<worker-scheduling>{mode}</worker-scheduling>")
    router = spawn("router.cli.tnwgd", config)
    wait_stderr(router, "portals are up")
    return router


def busy_loops() -> list[subprocess.Popen]:
    code = f"import time\nend = time.monotonic() + {HOG_SECONDS}\nwhile time.monotonic() < end: pass\n"
    return [subprocess.Popen([PYTHON, "-c", code]) for _ in range(os.cpu_count() or 2)]


def force_batch(router: subprocess.Popen) -> None:
    for pid in children(router.pid):
        os.sched_setscheduler(pid, os.SCHED_BATCH, os.sched_param(0))


def default_slice(router: subprocess.Popen) -> None:
    """The router's workers (their main threads) back on the kernel's default slice: what they
    would run with if they did not ask for the short one."""
    for pid in children(router.pid):
        set_attributes(pid, os.SCHED_OTHER, DEFAULT_SLICE)


def main() -> int:
    throughput, idle, latency = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        # Each router bridges its own pair of domains.
        domains = {"adaptive": (domain(directory, 1), domain(directory, 2)),
                   "normal": (domain(directory, 3), domain(directory, 4))}
        routers = {}
        try:
            for mode, (lan1, lan2) in domains.items():
                routers[mode] = start_router(directory, mode, lan1, lan2)
            count = 500_000
            runs = {mode: [] for mode in routers}
            for n in range(RUNS):
                for mode, (lan1, lan2) in domains.items():
                    runs[mode].append(measured(
                        lambda: um_run(lan1, lan2, count, 64, receiver_extra=("--idle-timeout", 15),
                                       topic=f"stream.{n}"), routers[mode], count))
            for mode, results in runs.items():
                rates = [r["rate_msgs_per_s"] for r in results]
                throughput.append([mode, count, f"{statistics.median(rates):,.0f} ({min(rates):,.0f}–{max(rates):,.0f})",
                                   f"{statistics.median(r['router_cpu_us'] for r in results):.2f}",
                                   " · ".join(str(r["gaps"] + r["duplicates"] + count - r["received"]) for r in results)])
            default_slice(routers["normal"])     # from here on: the slice compared
            rate, paced = 2000, 2000 * 5
            paced_args = ("-P", rate, "-F")
            idle_runs = {path: [] for path in ("direct", *domains)}
            for n in range(RUNS):
                direct_domain = domains["adaptive"][0]
                idle_runs["direct"].append(um_run(direct_domain, direct_domain, paced, 64, paced_args,
                                                  topic=f"idle.direct.{n}"))
                for mode, (lan1, lan2) in domains.items():
                    idle_runs[mode].append(um_run(lan1, lan2, paced, 64, paced_args,
                                                  receiver_extra=("--idle-timeout", 15), topic=f"idle.{n}"))
            medians = {path: {q: statistics.median(r["latency_us"][q] for r in results) for q in ("p50", "p99")}
                       for path, results in idle_runs.items()}
            for path, results in idle_runs.items():
                idle.append([IDLE_LABELS[path], f"{rate} msgs/s, 64 B", medians[path]["p50"], medians[path]["p99"],
                             "" if path == "direct" else round(medians[path]["p50"] - medians["direct"]["p50"], 1),
                             " · ".join(str(r["gaps"] + paced - r["received"]) for r in results)])
            for label in ("adaptive (short slice)", "normal policy, default slice", "SCHED_BATCH throughout"):
                mode = "adaptive" if label.startswith("adaptive") else "normal"
                lan1, lan2 = domains[mode]
                if label.startswith("SCHED_BATCH"):
                    force_batch(routers["normal"])
                hogs = busy_loops()
                try:
                    time.sleep(0.5)
                    result = um_run(lan1, lan2, paced, 64, paced_args, receiver_extra=("--idle-timeout", 15),
                                    topic=f"paced.{len(latency)}")
                finally:
                    for hog in hogs:
                        hog.kill()
                        hog.wait()
                latency.append([label, f"{rate} msgs/s, 64 B", result["latency_us"]["p50"],
                                result["latency_us"]["p99"], result["gaps"] + paced - result["received"]])
        finally:
            for router in routers.values():
                stop(router, 30)
    body = (f"Unpaced 64 B through two routers on this host, `<worker-scheduling>adaptive` (the default) and "
            f"`normal`, {RUNS} interleaved runs each (median and range; lost+dup per run):\n\n" +
            table(["policy", "messages", "msgs/s", "router CPU µs/msg", "lost+dup"], throughput) +
            f"\n\nPaced, on an otherwise idle host (receiver's latency, µs; medians of {RUNS} runs of each, "
            "interleaved; added = router − direct):\n\n" +
            table(["path", "rate", "p50", "p99", "added p50", "lost"], idle) +
            "\n\nA worker's wake-up preempts the task running on its CPU (often the source that woke it) "
            "only if the fair scheduler's deadline for it, its time slice after it became runnable, comes "
            "first: with the default slice it waits for that task to finish its turn and sleep. Asking "
            "for the shortest slice (100 µs, Linux 6.12 and later) moves that deadline forward; a "
            "worker's turn on a paced message is far shorter than that, so it loses nothing by it."
            f"\n\nPaced, with {os.cpu_count()} busy loops keeping every CPU busy (receiver's latency, µs):\n\n" +
            table(["workers", "rate", "p50", "p99", "lost"], latency) +
            "\n\nUnder a stream, a worker on the normal policy preempts the source or the receiver each time "
            "it is woken, runs on a few messages, and sleeps again; batching, it runs when a CPU is free "
            "or the running task yields, on more at a time, so the router spends less CPU per message and "
            "leaves it to the applications. Paced messages on a host whose CPUs are all busy would wait "
            "for a CPU instead, hence adaptive: workers batch only while they move 20,000 fragments a "
            "second or more (back below 5,000), so paced traffic keeps the normal policy's wake-ups.")
    print(body)
    write_section("Worker scheduling", body, COMMAND)
    return 0


if __name__ == "__main__":
    refuse_arguments(__doc__)
    sys.exit(main())
