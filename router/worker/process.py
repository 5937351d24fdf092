"""A portal's worker process: one event loop for its sockets, its inbound rings, the bus and timers.

The supervisor forks it with everything it needs already created (ring and counter segments,
eventfds); the worker attaches, says hello on the bus, receives the snapshot of interest, and
runs. Its main loop writes the heartbeat the supervisor watches: a hung loop stops beating and is
restarted. SIGTERM is a graceful stop: proxy sources send final advertisements first.
"""
from __future__ import annotations

import ctypes
import functools
import importlib
import logging
import os
import signal
import time
from dataclasses import dataclass

import zmq

from router.eventlog import configure_logging, event, portal_logger
from router.gc_tuning import tune_for_message_rates
from router.ipc.bus import BusClient
from router.ipc import bus_messages as bm
from router.monitor.counters import SEGMENT_BYTES, PortalCounters
from router.um.loop import EventLoop

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL = 0.1

EXIT_OK = 0
EXIT_BOOT_ERROR = 3          # reserved: the supervisor does not respawn a worker that cannot boot


@dataclass
class WorkerSpec:
    """What the supervisor hands a worker at fork."""
    portal: object                  # EndpointConfig / PeerConfig
    index: int
    portal_indexes: dict[str, int]
    generation: int
    bus_endpoints: tuple[str, str]
    counters_segment: object         # router.ipc.shm.SharedSegment, inherited at fork
    datapath: object                # router.worker.datapath.DataPathSpec
    log_type: str
    log_path: str | None
    utc: bool
    node_id: int = 1                # the router's node id (routing, peer handshakes)
    router_name: str = ""           # <daemon><name>, told to companions on peer links
    route_info: object = None       # router.config.model.RouteInfo: intervals for route-info in domains
    scheduling: str = "adaptive"    # <daemon><worker-scheduling>: router.worker.scheduling
    monitor: object = None          # router.config.model.MonitorConfig: <daemon><monitor>
    supervisor_pid: int = 0         # the process that forked this one (0: do not watch for its death)


# Blocked by the supervisor across the fork, unblocked once the worker's own handlers are set.
WORKER_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD})


def preload() -> None:
    """Import what workers run, in the supervisor before it forks them (gunicorn's preload_app):
    each worker starts with its modules loaded, shared copy-on-write, in milliseconds. Imported
    by each worker itself they took 0.4 s of CPU on an idle 2-core host and seconds on a loaded
    one (compiled from source where bytecode is not written), each restart of a portal included,
    while it forwarded nothing."""
    for module in ("router.portals.endpoint", "router.portals.peer", "router.um.monitoring",
                   "router.worker.datapath", "router.worker.scheduling"):
        importlib.import_module(module)


def worker_main(specs: list[WorkerSpec]) -> None:
    """Entry point in the forked child (one portal, or a group of portals sharing the process);
    never returns."""
    os._exit(_run(specs))


@dataclass
class _Hosted:
    """One portal running in this worker: everything it has of its own."""
    spec: WorkerSpec
    counters: PortalCounters
    datapath: object
    portal: object
    bus: BusClient | None = None
    statistics: object = None       # router.um.monitoring.StatisticsPublisher, with <monitor>


def _run(specs: list[WorkerSpec]) -> int:
    for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    # A terminal's hangup, or `systemctl kill -s HUP` (every process of the unit), is the
    # supervisor's to act on (a reload); it would otherwise end every worker, as crashes.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    first = specs[0]
    configure_logging(first.log_type, first.log_path, first.utc)
    names = "+".join(spec.portal.name for spec in specs)
    loop = EventLoop(f"portal-{names}")
    stopping = {"signal": None}

    def on_term(signum, frame) -> None:      # only records it: the loop does the work
        stopping["signal"] = signum
        loop.call_soon_threadsafe(loop.stop)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C goes to the supervisor, which stops us
    if first.supervisor_pid and not _stop_with_the_supervisor(first.supervisor_pid):
        log.warning("portal %s: the supervisor (pid %d) is gone already; not starting", names, first.supervisor_pid)
        return EXIT_OK
    signal.pthread_sigmask(signal.SIG_UNBLOCK, WORKER_SIGNALS)     # blocked since the fork

    from router.worker.datapath import DataPath
    from router.worker.scheduling import WorkerScheduling
    zmq_context = zmq.Context()
    hosted: list[_Hosted] = []
    for spec in specs:
        # Segments were mapped by the supervisor before the fork: the child has them already.
        counters = PortalCounters(spec.counters_segment.memory[:SEGMENT_BYTES])
        # The segment is the portal's: a start time in it says an earlier worker of this portal
        # took its place in the rings (it died, or a reload restarted it), and left its heads there.
        restarted = counters.get("worker_started_ns") != 0
        counters.set("worker_pid", os.getpid())
        try:
            datapath = DataPath(spec.datapath, spec.index, loop, counters, restarted=restarted)
            counters.set("worker_started_ns", time.time_ns())     # set once the rings are attached
            portal = _make_portal(spec, loop, datapath, counters)
        except OSError as err:
            # What the host refuses (a port taken, an interface missing) is the operator's to fix:
            # the reason says all, a traceback would call it a bug.
            log.error("portal %s cannot start: %s", spec.portal.name, err)
            return EXIT_BOOT_ERROR
        except Exception as err:
            log.exception("portal %s cannot start: %s", spec.portal.name, err)
            return EXIT_BOOT_ERROR
        hosted.append(_Hosted(spec, counters, datapath, portal))
    for one in hosted:
        one.bus = BusClient(zmq_context, *one.spec.bus_endpoints, one.spec.portal.name, loop,
                            lambda m, portal=one.portal: _on_bus(m, portal, loop),
                            lambda counters=one.counters: counters.add("bus_messages_malformed"),
                            lambda counters=one.counters: counters.add("bus_update_gaps"),
                            on_dropped=lambda counters=one.counters: counters.add("bus_messages_dropped"))
        one.portal.bus = one.bus
        one.datapath.handler = one.portal.on_record
        one.datapath.handler_frames = functools.partial(one.portal.on_frames, now=True)
        one.datapath.after_batch = one.portal.flush
    _join_local(hosted)
    for one in hosted:
        one.statistics = _publish_statistics(one.spec, one.portal)
    scheduling = WorkerScheduling(first.scheduling, [one.counters for one in hosted], loop=loop)
    for one in hosted:
        one.datapath.on_burst = scheduling.nudge
    loop.on_ready = _early_wakeups([one.datapath for one in hosted])
    errors_counted = [0]            # of loop.callback_errors, in the portals' internal_errors
    heartbeat = loop.call_every(HEARTBEAT_INTERVAL, lambda: _beat(hosted, scheduling, loop, errors_counted))
    _beat(hosted, scheduling, loop, errors_counted)
    for one in hosted:
        one.bus.hello(one.spec.generation, os.getpid())
        event("portal-up", f"{one.spec.portal.kind} portal started (pid {os.getpid()}, "
              f"generation {one.spec.generation})", one.spec.portal.name)
    tune_for_message_rates()
    try:
        loop.run_forever()
    finally:
        heartbeat.cancel()
        for one in hosted:
            if one.statistics is not None:
                one.statistics.close()
            one.portal.close()
        # Let final advertisements and queued frames go out before the sockets close.
        loop.run_until(lambda: False, 0.5)
        for one in hosted:
            one.datapath.close()
            one.bus.close()
        zmq_context.term()
    for one in hosted:
        event("portal-stopped", "stopped", one.spec.portal.name)
    return EXIT_OK


_PR_SET_PDEATHSIG = 1               # prctl(2)


def _stop_with_the_supervisor(supervisor_pid: int) -> bool:
    """Have the kernel send this worker SIGTERM when the supervisor dies (killed with -9, say, or
    by the OOM killer), so it stops as it does when told to: proxies send final advertisements,
    and it does not route on alone, holding its domain's ports and advertising proxies no one
    supervises while a new router starts beside it. False if the supervisor is gone already."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        log.warning("cannot ask to stop with the supervisor: %s", os.strerror(ctypes.get_errno()))
    return os.getppid() == supervisor_pid


def _early_wakeups(datapaths: list):
    """The event loop's on_ready hook: each portal's data path wakes where its data goes."""
    if len(datapaths) == 1:
        return datapaths[0].on_ready

    def on_ready(fds: list) -> None:
        for datapath in datapaths:
            datapath.on_ready(fds)
    return on_ready


def _join_local(hosted: list[_Hosted]) -> None:
    """Portals sharing this process hand each other records directly (router.worker.datapath)."""
    for one in hosted:
        one.datapath.join_local({other.spec.index: other.datapath for other in hosted if other is not one})


def _make_portal(spec: WorkerSpec, loop, datapath, counters):
    log_event = portal_logger(spec.portal.name)
    if spec.portal.kind == "endpoint":
        from router.portals.endpoint import EndpointPortal
        return EndpointPortal(spec.portal, spec.index, spec.portal_indexes, loop, spec.portal.receiver_um,
                              None, datapath, counters, log_event, spec.node_id, spec.route_info)
    if spec.portal.kind == "peer":
        from router.portals.peer import PeerPortal
        return PeerPortal(spec.portal, spec.index, spec.portal_indexes, loop, spec.node_id, spec.router_name,
                          datapath, counters, log_event)
    raise ValueError(f"portal kind {spec.portal.kind!r} is not supported")


def _publish_statistics(spec: WorkerSpec, portal):
    """<monitor> with the lbm transport and csv format: the portal context's UM statistics, as the
    DRO publishes them (receive side as Gateway_Portal_<name>_rcv_ctx, send side as _src_ctx;
    router.um.monitoring). Peer portals have no UM context; other modules are not published here
    (the supervisor said so when it started)."""
    monitor = spec.monitor
    if monitor is None or monitor.interval <= 0 or spec.portal.kind != "endpoint" \
            or (monitor.transport_module, monitor.format_module) != ("lbm", "csv"):
        return None
    from router.um import monitoring
    name = spec.portal.name
    try:
        settings = monitoring.settings(monitor.interval, f"Gateway_Portal_{name}_rcv_ctx", monitor.transport_module,
                                       monitor.transport_options, monitor.format_module, monitor.format_options)
        return monitoring.StatisticsPublisher(portal.context, settings, {
            f"Gateway_Portal_{name}_rcv_ctx": ("context", "receiver"),
            f"Gateway_Portal_{name}_src_ctx": ("source",)})
    except (monitoring.MonitoringError, OSError, ValueError) as err:
        event("malformed-input", f"UM statistics are not published: {err}", name)
        return None


def _on_bus(message, portal, loop) -> None:
    if isinstance(message, bm.Shutdown):
        loop.stop()
        return
    if isinstance(message, bm.Query):
        portal.bus.send(bm.Answer(message.request_id, portal.name, portal.query(message.what)))
        return
    portal.on_bus(message)


def _beat(hosted: list[_Hosted], scheduling, loop, errors_counted: list[int]) -> None:
    now = time.monotonic_ns()
    # Failing callbacks are logged (rate-limited) by the loop; counted here they show in routerctl
    # stats, /metrics and the portal page. Added, not set: the counters outlive this worker.
    errors = loop.callback_errors - errors_counted[0]
    errors_counted[0] = loop.callback_errors
    for one in hosted:
        one.counters.set("heartbeat_ns", now)
        if errors:
            one.counters.add("internal_errors", errors)
        one.datapath.heartbeat()
    scheduling.tick()
