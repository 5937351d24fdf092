from __future__ import annotations

from router.admin import tables
from router.admin.server import AdminServer
from router.admin.commands.base import Command
from router.monitor.rates import rates_of
from router.monitor.views import memory, statistics, version


class Status(Command):
    """Show the router and each portal's worker: state, pid, uptime, restarts, heartbeat, proxies, rates,
    scheduling policy.

    Usage: routerctl status

    Reply data (scripts rely on this shape; fields are only ever added):
      {"router": NAME, "node_id": INT, "pid": INT, "uptime_s": FLOAT, "config": PATH, "version": STR,
       "portals": [{"name", "kind", "domain_id", "cost", "pid", "uptime_s", "restarts", "generation",
                    "heartbeat_age_s", "proxy_receivers", "proxy_sources", "state",
                    "rx_fragments_per_s", "rx_bytes_per_s", "tx_fragments_per_s", "tx_bytes_per_s",
                    "scheduling", "scheduling_slice_us", "worker_portals", "rss_bytes", "private_bytes"}],
       "rss_bytes", "private_bytes", "statistics", "admin", "bus", "cpu_latency_limit_us",
       "cpu_latency_limit_asked_us"}
    `pid` is null and `uptime_s` 0 while a portal's worker is down; `state` is up, starting or down;
    `scheduling` is the worker's kernel policy now, "normal" or "batch" (router/worker/scheduling.py;
    "fifo", "rr" or "idle" if the router was started with one), `scheduling_slice_us` the time slice
    the kernel gives it (100 on the normal policy, asked for so that its wake-ups preempt; null where
    the kernel does not say),
    null while it is down; `worker_portals` names the portals that run in that worker process, the
    portal itself among them (more than one with `<daemon><worker-group>`). `rss_bytes` and
    `private_bytes` are the memory of the supervisor (top level) and of each portal's worker
    process (portals sharing one report the same), null while it is down (router/monitor/memory.py).
    `statistics` is the Parquet sink's state (router/monitor/parquet_sink.py, ParquetSink.status:
    its directory, current file, writes, errors and the last one, retain_days, date directories
    removed, and `held_by`: who writes the directory instead, when another router of the same name
    does, with `rows_not_written` meanwhile), null when `<monitor>` does not select it. `admin` is the admin socket's
    {"requests", "rejected", "cut_off"} (router/admin/server.py, AdminServer.counters): requests read,
    those answered with an error unparsed (several frames, too large), and connections that ended
    before a whole request came (ZeroMQ drops one that sends a frame over 1 MiB, with the frame).
    `bus` is the control bus hub's {"messages", "malformed", "resyncs", "outbox_delayed",
    "outbox_waiting", "outbox_dropped", "unreachable"} (router/ipc/bus.py): messages the workers sent
    the supervisor, those dropped because they did not decode, fresh snapshots workers asked for
    because they fell behind the bus and lost updates (each portal's bus_update_gaps says whose);
    messages to one worker that found its queue full (stopped, busy) and had to wait, those waiting
    now, those dropped because too many waited (the oldest), and those for a worker not connected
    (restarting or gone: it gets the current state when it says hello). A worker's own messages that
    its outbox dropped are its portal's bus_messages_dropped. `cpu_latency_limit_us` is the CPU
    wake-up latency limit the router holds (`<daemon><cpu-latency-limit>`, router/cpu_latency.py),
    null when it holds none; `cpu_latency_limit_asked_us` is the one its configuration asked for at
    start (null: none), so a limit asked for but refused (not root: the log says why) shows.
    """

    def execute(self, supervisor, props: dict) -> dict:
        status = supervisor.status()
        for portal in status["portals"]:
            portal.update(rates_of(supervisor, portal["name"]))
        status["version"] = version()
        status["statistics"] = statistics(supervisor)
        admin = next((e for e in supervisor.extensions if isinstance(e, AdminServer)), None)
        status["admin"] = admin.counters() if admin is not None else None
        status["bus"] = dict(supervisor.hub.counters)
        used = {p["pid"]: p for p in memory(supervisor, status)["processes"]}
        for entry in [status, *status["portals"]]:
            found = used.get(entry["pid"], {})
            entry["rss_bytes"], entry["private_bytes"] = found.get("rss_bytes"), found.get("private_bytes")
        return status

    def render(self, data: dict) -> str:
        head = tables.key_values([
            ("router", data["router"]), ("node id", f"{data['node_id']:#018x}"), ("pid", data["pid"]),
            ("uptime", tables.duration(data["uptime_s"])), ("config", data["config"]),
            ("memory", _memory(data)), ("statistics", _statistics(data.get("statistics"))),
            ("admin", _admin(data.get("admin"))),
            ("bus", _bus(data.get("bus"))),
            ("latency", _cpu_latency(data.get("cpu_latency_limit_us"), data.get("cpu_latency_limit_asked_us"))),
        ])
        rows = [[p["name"], p["kind"], p["domain_id"], p["cost"], p["state"], p["pid"],
                 tables.duration(p["uptime_s"]) if p["pid"] else "-",
                 f"{p['restarts']} (crash loop)" if p.get("crash_loop") else p["restarts"],
                 f"{p['heartbeat_age_s']:.1f}s", p["proxy_receivers"], p["proxy_sources"],
                 tables.rate(p.get("rx_fragments_per_s")), tables.rate(p.get("tx_fragments_per_s")),
                 _scheduling(p), _mib(p.get("rss_bytes"))]
                for p in data["portals"]]
        headers = ["PORTAL", "KIND", "DOMAIN", "COST", "STATE", "PID", "UPTIME", "RESTARTS", "HEARTBEAT",
                   "PROXY-RCV", "PROXY-SRC", "RX-FRAG/S", "TX-FRAG/S", "SCHED", "RSS"]
        return head + "\n\n" + tables.table(headers, rows, right={2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 14})


def _statistics(sink: dict | None) -> str:
    """"DIR, 120 writes, kept 90 days": where the counters go and whether the disk keeps up."""
    if sink is None:
        return "-"
    if sink.get("held_by"):
        return (f"{sink['dir']}: NOT written, another router of this name writes there ({sink['held_by']}); "
                f"{sink['rows_not_written']} rows not written")
    kept = f"kept {sink['retain_days']} days" if sink["retain_days"] else "kept without limit"
    errors = sink["write_errors"] + sink["tick_errors"]
    failing = f", {errors} errors, last: {sink['last_error']}" if errors else ""
    return f"{sink['dir']}, {sink['writes']} writes, {kept}{failing}"


def _admin(admin: dict | None) -> str:
    """"12 requests, 1 rejected, 0 cut off": what the admin socket refused or lost."""
    if admin is None:
        return "-"
    return f"{admin['requests']} requests, {admin['rejected']} rejected, {admin['cut_off']} cut off"


def _bus(bus: dict | None) -> str:
    """"840 messages, 0 malformed, 0 resyncs; to workers: 0 waiting, 0 dropped, 2 unreachable": what
    the workers told the supervisor, what it dropped, how often a worker fell behind its updates, and
    what the supervisor's messages to stalled or absent workers came to."""
    if bus is None:
        return "-"
    told = f"{bus['messages']} messages, {bus['malformed']} malformed, {bus['resyncs']} resyncs"
    if "outbox_waiting" not in bus:
        return told                 # a supervisor started before its bus kept outboxes
    return (f"{told}; to workers: {bus['outbox_waiting']} waiting, {bus['outbox_dropped']} dropped, "
            f"{bus['unreachable']} unreachable")


def _mib(size: int | None) -> str:
    return "-" if size is None else f"{size / 1048576:.1f}M"


def _memory(data: dict) -> str:
    if data.get("rss_bytes") is None:
        return "-"
    return f"supervisor RSS {_mib(data['rss_bytes'])}, private {_mib(data['private_bytes'])}"


def _scheduling(portal: dict) -> str:
    """"normal 100µs": the policy, and the slice where the kernel says."""
    policy, slice_us = portal.get("scheduling"), portal.get("scheduling_slice_us")
    if not policy:
        return "-"
    return policy if slice_us is None else f"{policy} {slice_us:g}µs"


def _cpu_latency(held: int | None, asked: int | None) -> str:
    if held is not None:
        return f"CPU wake-ups limited to {held} µs while the router runs (<cpu-latency-limit>)"
    if asked is not None:
        return f"<cpu-latency-limit> {asked} µs asked for but not held (refused at start: see the log)"
    return "-"
