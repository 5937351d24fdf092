"""The router against the direct path and against a ZeroMQ XSUB/XPUB proxy, side by side in one
run: throughput at 64 B and 8 KB, and latency at a paced rate (added latency = router − direct).
Two routers run throughout: one with a worker per portal (the default) and one whose two portals
share a worker (`<daemon><worker-group>`), each joining a pair of domains of its own.

    python -m bench.router_bench          (or: make bench)
"""
from __future__ import annotations

import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import relay_floor
from bench.report import refuse_arguments, table, write_section
from router.ipc.shm import pid_alive, remove_stale

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ".venv/bin/python -m bench.router_bench"
RUNS = 3
# An unpaced direct run is fast when the kernel puts umsrc and umrcv on different CPUs and up to a
# quarter slower when it does not (150-190k msgs/s at 8 KB; a ZeroMQ proxy, 580-890k at 64 B): more
# runs, a median that says which is usual.
THROUGHPUT_RUNS = 7
LATENCY_RUNS = 5          # a paced run's p50 moves with the host's wake-up times: more runs, a steadier median
ADDED_P50_GOAL_US = 50              # issue 4: the added p50 latency a hop may cost
PYTHON = sys.executable


def domain(directory: Path, n: int) -> Path:
    path = directory / f"lan{n}.cfg"
    base = 17000 + (os.getpid() % 200) * 40 + n * 10
    path.write_text(f"context resolver_multicast_address 239.198.{os.getpid() % 200}.{n}\n"
                    f"context resolver_multicast_port {base}\ncontext resolver_multicast_interface 127.0.0.1\n"
                    f"context transport_tcp_port_low {base + 1}\ncontext transport_tcp_port_high {base + 9}\n"
                    # Request ports of its own too (UM's default range is 5 ports, 14391-14395, for
                    # every context on the host: the router's portals, umresp and umreq fill it).
                    f"context request_tcp_port_low {base - 10000}\ncontext request_tcp_port_high {base - 9991}\n")
    return path


# ZeroMQ writes up to 8 KB per send() by default (libzmq's out_batch_size, ZMQ_OUT_BATCH_SIZE); a
# UM source sends once 2 KB are batched (implicit_batching_minimum_length 2048). One throughput row
# has umsrc batch as ZeroMQ does, so the two applications make the same number of system calls.
ZEROMQ_BATCH = 8192


def batching_like_zeromq(cfg: Path) -> Path:
    """The same domain, for a umsrc whose source batches up to ZeroMQ's default send size."""
    path = cfg.with_name(cfg.stem + "-batch.cfg")
    path.write_text(cfg.read_text() + f"source implicit_batching_minimum_length {ZEROMQ_BATCH}\n")
    return path


def endpoint_xml(name: str, domain_id: int, cfg: Path) -> str:
    return f"<endpoint><name>{name}</name><domain-id>{domain_id}</domain-id><lbm-config>{cfg}</lbm-config></endpoint>"


def gateway_config(path: Path, name: str, portals_xml: str, daemon_xml: str = "") -> Path:
    """A tnwgd configuration: <daemon> with `name` then `daemon_xml` (after <name>, in DTD order)."""
    path.write_text(f'<tnw-gateway version="1.0"><daemon><name>{name}</name>{daemon_xml}</daemon>'
                    f"<portals>{portals_xml}</portals></tnw-gateway>")
    return path


def router_config(directory: Path, lan1: Path, lan2: Path, grouped: bool = False,
                  cpu_latency_limit: int | None = None) -> Path:
    """LAN1 and LAN2 joined; `grouped`: both portals in one worker process; `cpu_latency_limit`:
    the router holds that <cpu-latency-limit> (µs) while it runs."""
    daemon = "" if cpu_latency_limit is None else f"<cpu-latency-limit>{cpu_latency_limit}</cpu-latency-limit>"
    if grouped:
        daemon += "<worker-group><portal-name>LAN1</portal-name><portal-name>LAN2</portal-name></worker-group>"
    name = f"bench{os.getpid()}{'g' if grouped else ''}{'' if cpu_latency_limit is None else 'q'}"
    return gateway_config(directory / f"{name}.xml", name,
                          endpoint_xml("LAN1", 1, lan1) + endpoint_xml("LAN2", 2, lan2), daemon)


def spawn(*args, stdin=None) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "-m", *map(str, args)], stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)


def wait_stderr(proc: subprocess.Popen, text: str, timeout: float = 30, keep: list[str] | None = None) -> None:
    """Wait for a line on the process's stderr, with a deadline even if it prints nothing.
    Goes on draining stderr afterwards; every line is appended to `keep` when given (a log)."""
    found = threading.Event()

    def read() -> None:
        try:
            for line in proc.stderr:
                if keep is not None:
                    keep.append(line)
                if text in line:
                    found.set()
        except ValueError:          # stderr closed under us by communicate(): the process is done
            pass
        found.set()
    threading.Thread(target=read, daemon=True).start()
    if not found.wait(timeout) or proc.poll() is not None:
        raise RuntimeError(f"no {text!r} from {' '.join(map(str, proc.args[2:4]))} within {timeout} s")


def stop(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL after `timeout` s, to the process and to its children (a router's
    workers outlive a killed supervisor), which are listed before the kill. A killed router
    cannot unlink its shared memory, and a bench's router names are never started again to sweep
    it: whatever segments dead processes left are removed then."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pids = children(proc.pid)
        proc.kill()
        proc.wait()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            else:
                _reap(pid)
        remove_stale()


def _reap(pid: int, timeout: float = 5.0) -> None:
    """Wait until a killed grandchild (not ours to wait for) is gone."""
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)


def children(pid: int) -> list[int]:
    """The process's children now (e.g. a router's workers), from /proc."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def router_cpu(routers: dict[str, subprocess.Popen]) -> dict[int, int]:
    """CPU jiffies (user + system) used so far by each router process: supervisors and workers."""
    found = {}
    for proc in routers.values():
        for pid in [proc.pid, *children(proc.pid)]:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            found[pid] = int(fields[11]) + int(fields[12])
    return found



def tools_cpu_s() -> float:
    """CPU seconds (user + system) of this process's finished children: the umsrc and umrcv of
    the runs so far (each run waits for both)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measured(run, router: subprocess.Popen | list[subprocess.Popen], count: int) -> dict:
    """`run()`'s result with the CPU it took per message: the router's processes (every router's
    of a chain, given a list), umsrc + umrcv."""
    routers = dict(enumerate(router if isinstance(router, list) else [router]))
    router_before, tools_before = sum(router_cpu(routers).values()), tools_cpu_s()
    result = run()
    ticks = sum(router_cpu(routers).values()) - router_before
    result["router_cpu_us"] = ticks / os.sysconf("SC_CLK_TCK") / count * 1e6
    result["tools_cpu_us"] = (tools_cpu_s() - tools_before) / count * 1e6
    return result


def um_run(source_cfg: Path, receiver_cfg: Path, count: int, length: int, extra=(), timeout: float = 300,
           receiver_extra=(), topic: str = "bench.topic") -> dict:
    """umsrc → umrcv, started once the receiver has joined (bounded in count and time).
    `extra`: more umsrc options; `receiver_extra`: more umrcv options (e.g. --idle-timeout).
    Behind a router, a topic new to it ensures the receiver's BOS is from this run's source, not
    from the previous run's proxy source still waiting out its source-deletion-delay."""
    receiver = spawn("router.cli.umrcv", "-c", receiver_cfg, "--json", "-C", count, "--timeout", timeout,
                     *receiver_extra, topic)
    source = spawn("router.cli.umsrc", "-c", source_cfg, "--json", "-M", count, "-l", length, "--start-on-stdin",
                   *extra, topic, stdin=subprocess.PIPE)
    try:
        wait_stderr(receiver, "Beginning of Transport Session")
        source.stdin.write("go\n")
        source.stdin.flush()
        source.communicate(timeout=timeout)
        return json.loads(receiver.communicate(timeout=timeout)[0].splitlines()[-1])
    finally:
        for proc in (source, receiver):
            if proc.poll() is None:
                proc.kill()


def added_latency(routed: dict, direct: dict, percentile: str) -> float:
    """What the path adds over the direct path at one percentile of the receivers' latency, µs."""
    return round(routed["latency_us"][percentile] - direct["latency_us"][percentile], 1)


def zmq_run(directory: Path, count: int, length: int, rate: float = 0) -> dict:
    frontend, backend = f"ipc://{directory}/front", f"ipc://{directory}/back"
    proxy = spawn("bench.zmq_relay", "proxy", frontend, backend)
    subscriber = spawn("bench.zmq_relay", "sub", backend, count, 300)
    publisher = spawn("bench.zmq_relay", "pub", frontend, count, length, rate)
    try:
        publisher.communicate(timeout=300)
        return json.loads(subscriber.communicate(timeout=300)[0].splitlines()[-1])
    finally:
        for proc in (publisher, subscriber, proxy):
            if proc.poll() is None:
                proc.kill()


def floor_table(rate: int, suffix: str = "") -> list[list]:
    """bench.relay_floor's shapes at `rate`, in Python and in C, RUNS interleaved runs each:
    medians, added vs the direct path in the same language (`suffix` ends each row's label)."""
    shapes = {"direct (sender → receiver)": "direct", "one process relaying": "one process",
              "two processes, ring + eventfd (the router's shape)": "two processes"}
    rows = []
    for language, measure in (("Python", relay_floor.run), ("C", relay_floor.run_native)):
        runs = {label: [] for label in shapes}
        for _ in range(RUNS):
            for label, shape in shapes.items():
                result = measure(shape, rate * 2, rate)
                if result is None:
                    break
                if result["received"] != rate * 2:
                    raise RuntimeError(f"the {shape} floor run in {language} delivered {result['received']} "
                                       f"of {rate * 2} messages")
                runs[label].append(result)
        if not all(runs.values()):
            rows.append([f"{language}: not measured (no C compiler)", "", "", ""])
            continue
        medians = {label: {q: statistics.median(r[q] for r in results) for q in ("p50", "p99")}
                   for label, results in runs.items()}
        direct = medians["direct (sender → receiver)"]["p50"]
        rows += [[f"{language}: {label}, {rate} msgs/s{suffix}", m["p50"], m["p99"], round(m["p50"] - direct, 1)]
                 for label, m in medians.items()]
    return rows


def native_floor_text(floor_rows: list[list], limited: bool = False) -> str:
    """What the C floor of each router shape leaves of the issue's 50 µs for the routing work
    (`limited`: of the rows measured while the CPU latency limit was held)."""
    parts = []
    for shape, label in (("C: two processes", "a worker per portal"), ("C: one process", "portals in one worker")):
        added = [row[3] for row in floor_rows
                 if row[0].startswith(shape) and row[0].endswith(LIMITED_FLOOR) == limited]
        if not added:
            return "not measured here (no C compiler)."
        if added[0] >= ADDED_P50_GOAL_US:
            parts.append(f"with {label} the shape alone adds {added[0]} µs at p50 in C, so the added p50 ≤ "
                         f"{ADDED_P50_GOAL_US} µs goal is out of its reach on this machine in any language")
        else:
            parts.append(f"with {label} the shape alone adds {added[0]} µs at p50 in C, which leaves "
                         f"{ADDED_P50_GOAL_US - added[0]:.1f} µs of the {ADDED_P50_GOAL_US} µs goal for all the "
                         f"routing work")
    return "; ".join(parts) + "."


PATHS = ("direct", "routed", "grouped", "relayed")
LABELS = {"routed": "router, a worker per portal", "grouped": "router, portals in one worker"}


def throughput_row(label: str, count: int, runs: dict, ceilings: list[str]) -> list:
    rate = {k: statistics.median(x["rate_msgs_per_s"] for x in runs[k]) for k in PATHS}
    spread = {k: f"{min(x['rate_msgs_per_s'] for x in v):,.0f}–{max(x['rate_msgs_per_s'] for x in v):,.0f}"
              for k, v in runs.items()}
    d, z = rate["direct"], rate["relayed"]
    ceilings.append(f"for {label}, twice the proxy is {2 * z:,.0f} msgs/s, {2 * z / d:.0%} of the direct "
                    f"path's own rate")
    cpu = {k: {what: statistics.median(x[what] for x in runs[k]) for what in ("router_cpu_us", "tools_cpu_us")}
           for k in ("direct", "routed", "grouped")}

    def lost(results):
        return " · ".join(str(x["gaps"] + x["duplicates"] + count - x["received"]) for x in results)
    return [label, count, f"{d:,.0f} ({spread['direct']})",
            f"{rate['routed']:,.0f} ({spread['routed']})", f"{rate['grouped']:,.0f} ({spread['grouped']})",
            f"{z:,.0f} ({spread['relayed']})",
            f"{rate['routed'] / d:.0%} · {rate['grouped'] / d:.0%}",
            f"{rate['routed'] / z:.2f}× · {rate['grouped'] / z:.2f}×",
            f"{cpu['routed']['router_cpu_us']:.2f} · {cpu['grouped']['router_cpu_us']:.2f}",
            f"{cpu['direct']['tools_cpu_us']:.2f} · {cpu['routed']['tools_cpu_us']:.2f} · "
            f"{cpu['grouped']['tools_cpu_us']:.2f}",
            f"{lost(runs['routed'])} / {lost(runs['grouped'])}", lost(runs["relayed"])]


LIMITED = "router, a worker per portal, holding `<cpu-latency-limit>0`"
LIMITED_FLOOR = ", CPU latency limit 0 held"


def latency_rows(rate: int, lans: dict, routed: dict[str, tuple[Path, Path]], directory: Path | None = None,
                 tag: str = "paced") -> list[list]:
    """LATENCY_RUNS interleaved paced runs of the direct path, of each routed path (row label ->
    its source's and receiver's domains) and, given `directory`, of the ZeroMQ proxy: a row of
    medians of their p50s and p99s for each routed path. `tag` keeps the runs' topics new to
    the routers (a proxy source of an earlier run may still wait out its deletion delay)."""
    count = rate * 5
    paced = ("-P", rate, "-F")
    runs = {"direct": [], **{label: [] for label in routed}, "relayed": []}
    for n in range(LATENCY_RUNS):
        runs["direct"].append(um_run(lans[1], lans[1], count, 64, paced, topic=f"direct.{tag}.{n}"))
        for index, (label, (source, receiver)) in enumerate(routed.items()):
            runs[label].append(um_run(source, receiver, count, 64, paced, receiver_extra=("--idle-timeout", 15),
                                      topic=f"{tag}.{index}.{n}"))
        if directory is not None:
            runs["relayed"].append(zmq_run(directory, count, 64, rate))
    median = {k: {q: statistics.median(r["latency_us"][q] for r in v) for q in ("p50", "p99")}
              for k, v in runs.items() if v}
    direct, relayed = median["direct"], median.get("relayed", {"p50": "", "p99": ""})
    return [[f"{rate} msgs/s, 64 B", label, direct["p50"], direct["p99"], median[label]["p50"], median[label]["p99"],
             round(median[label]["p50"] - direct["p50"], 1), round(median[label]["p99"] - direct["p99"], 1),
             relayed["p50"], relayed["p99"]] for label in routed]


def main() -> int:
    rows, paced_rows, floor_rows, ceilings = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        lans = {n: domain(directory, n) for n in (1, 2, 3, 4, 5, 6)}
        routers = {"routed": spawn("router.cli.tnwgd", router_config(directory, lans[1], lans[2])),
                   "grouped": spawn("router.cli.tnwgd", router_config(directory, lans[3], lans[4], grouped=True))}
        pairs = {"direct": (lans[1], lans[1]), "routed": (lans[1], lans[2]), "grouped": (lans[3], lans[4])}
        batched = {n: batching_like_zeromq(lans[n]) for n in (1, 3)}
        batched_pairs = {"direct": (batched[1], lans[1]), "routed": (batched[1], lans[2]),
                         "grouped": (batched[3], lans[4])}
        cases = (("64 B", 64, 500_000, pairs),
                 (f"64 B, umsrc batching as ZeroMQ ({ZEROMQ_BATCH} B)", 64, 500_000, batched_pairs),
                 ("8192 B", 8192, 200_000, pairs))
        try:
            for router in routers.values():
                wait_stderr(router, "portals are up")
            for case, (label, length, count, case_pairs) in enumerate(cases):
                runs = {k: [] for k in PATHS}
                for n in range(THROUGHPUT_RUNS):   # interleaved, so drifting machine load hits every path
                    for path in ("direct", "routed", "grouped"):
                        source, receiver = case_pairs[path]
                        extra = () if path == "direct" else ("--idle-timeout", 15)
                        runs[path].append(measured(
                            lambda: um_run(source, receiver, count, length, receiver_extra=extra,
                                           topic=f"{path}.{case}.{n}"),
                            routers["grouped" if path == "grouped" else "routed"], count))
                    runs["relayed"].append(zmq_run(directory, count, length))
                rows.append(throughput_row(label, count, runs, ceilings))
            paced_rows = latency_rows(2000, lans, {LABELS["routed"]: (lans[1], lans[2]),
                                                   LABELS["grouped"]: (lans[3], lans[4])}, directory)
            floor_rows = floor_table(2000)
            # Last, as the limit it holds speeds every wake-up on the host while it runs.
            routers["limited"] = spawn("router.cli.tnwgd", router_config(directory, lans[5], lans[6],
                                                                         cpu_latency_limit=0))
            limited_log: list[str] = []
            wait_stderr(routers["limited"], "portals are up", keep=limited_log)
            if not any("holding a CPU wake-up latency limit of 0" in line for line in limited_log):
                raise RuntimeError("the router did not hold <cpu-latency-limit>0 (not root?)")
            paced_rows += latency_rows(2000, lans, {LIMITED: (lans[5], lans[6])}, tag="limited")
            floor_rows += floor_table(2000, LIMITED_FLOOR)
        finally:
            for router in routers.values():
                stop(router, 30)
    body = (f"Throughput (messages/s at the receiver: the median of {THROUGHPUT_RUNS} unpaced runs of each, "
            "interleaved, "
            "and their range; lost+dup for each run; every run is bounded in count and time). Two routers, "
            "each joining two domains of its own: *own workers* has a worker process per portal (the "
            "default), *one worker* runs both portals in one worker process (`<daemon><worker-group>`); "
            "where a cell holds two figures they are own workers · one worker. ZeroMQ's sockets write up "
            f"to {ZEROMQ_BATCH} bytes per system call by default (libzmq's out_batch_size), a UM source sends "
            "once 2048 are batched (`implicit_batching_minimum_length`): in the middle row umsrc's source "
            f"batches {ZEROMQ_BATCH} bytes, as ZeroMQ does (the router's proxy sources send what each ring "
            "read brings, as in every row):\n\n" +
            table(["size", "messages", "direct", "router, own workers", "router, one worker", "ZeroMQ proxy",
                   "router / direct", "router / ZeroMQ", "router CPU µs/msg",
                   "umsrc+umrcv CPU µs/msg (direct · own · one)", "router lost+dup (own / one)",
                   "ZeroMQ lost+dup"], rows) +
            f"\n\nLatency at a paced rate, flushing each message (µs; medians of {LATENCY_RUNS} interleaved runs of "
            "each path; added = router − direct):\n\n" +
            table(["rate", "router", "direct p50", "direct p99", "router p50", "router p99", "added p50",
                   "added p99", "ZeroMQ p50", "ZeroMQ p99"], paced_rows) +
            "\n\nThe issue's goals are router ≥ 80% of the direct path, ≥ 2× the ZeroMQ proxy, zero loss, "
            "added p50 ≤ 50 µs. A router sits on the direct path (the same source and receiver, one more "
            "TCP crossing), so the source's own rate bounds it; at 64 B it can pass the direct path by a "
            "little: a busy router's proxy source sends what each ring read brings, "
            "writes larger than umsrc's 2 KB batches, so umrcv makes fewer reads of more messages (see "
            "its CPU per message). The ranges show how far a path's rate moves between runs on this "
            "machine. The 2× goal is above what the source can send when twice the proxy is above the "
            "direct path's rate: " + "; ".join(ceilings) + ". The CPU columns (medians; start-up included) show "
            "why the router's share of the direct rate is what it is: unpaced, umsrc and umrcv alone keep "
            "both cores busy, so every µs of CPU the router spends per message is taken from them. Unpaced, "
            "the router holds records in its rings while the receiver's socket is full and so slows the "
            "source instead of dropping (README, \"When a receiver falls behind\"), and a worker "
            "carrying a stream coalesces its reads (README, \"How workers are scheduled\").\n\n"
            "What a paced message crosses in a router with a worker per portal: the ingress worker's "
            "wake-up on the source's TCP data, its read, the ring write and the eventfd that wakes the "
            "egress worker, that worker's wake-up, its read of the ring and its send, then one more TCP "
            "crossing to the receiver. Between paced messages both workers sleep, so each message meets two "
            "extra wake-ups of idle processes (vCPUs, here); the egress worker's starts as the source's "
            "data becomes readable, before the ingress worker reads it (an early wake-up, "
            "router/worker/datapath.py), so it overlaps the read, the parse and the ring write. With "
            "both portals in one worker the ring, the eventfd and the second wake-up are gone: the "
            "worker reads the frames and hands them straight "
            "to the egress portal, which sends them before the worker sleeps again. The price is "
            "throughput at 8 KB, where one process now does both the read and the send that two processes "
            "did on two cores, and a crash or restart taking both portals.\n\n"
            f"The last latency row is measured while a third router, with a worker per portal, holds "
            "`<daemon><cpu-latency-limit>0</cpu-latency-limit>` (README, \"How workers are scheduled\"): "
            "no CPU of the host may then take longer than 0 µs to wake, so idle CPUs poll instead of "
            "halting and every wake-up on a paced message's way (the workers', the receiver's) is shorter; "
            "its direct path is measured meanwhile, with the same faster wake-ups. The limit is an option, "
            "off by default: it costs the idle CPUs' power (on a virtual machine, its host's CPU time).\n\n"
            f"The floor of those shapes on this machine: the same hand-offs carrying 64-byte messages with "
            f"nothing else done, in bare Python (bench/relay_floor.py) and in C (bench/relay_floor.c), median "
            f"of {RUNS} interleaved runs, µs:\n\n" +
            table(["path", "p50", "p99", "added p50"], floor_rows) +
            "\n\nA router with a worker per portal pays the two-process row's added time before it parses "
            "a frame; one with its portals in one worker pays the one-process row's. The C rows are the "
            f"machine's own cost of those wake-ups and loopback TCP crossings: {native_floor_text(floor_rows)} "
            f"With the CPU latency limit held: {native_floor_text(floor_rows, limited=True)}")
    print(body)
    write_section("Router (1 hop) vs direct path vs ZeroMQ proxy", body, COMMAND)
    return 0


if __name__ == "__main__":
    refuse_arguments(__doc__)
    sys.exit(main())
