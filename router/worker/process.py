"""A portal's worker process: one event loop for its sockets, its inbound rings, the bus and timers.

The supervisor forks it with everything it needs already created (ring and counter segments,
eventfds); the worker attaches, says hello on the bus, receives the snapshot of interest, and
runs. Its main loop writes the heartbeat the supervisor watches: a hung loop stops beating and is
restarted. SIGTERM is a graceful stop: proxy sources send final advertisements first.
"""
from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass

import zmq

from router.eventlog import configure_logging, event, portal_logger
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


def worker_main(spec: WorkerSpec) -> None:
    """Entry point in the forked child; never returns."""
    os._exit(_run(spec))


def _run(spec: WorkerSpec) -> int:
    for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    configure_logging(spec.log_type, spec.log_path, spec.utc)
    name = spec.portal.name
    loop = EventLoop(f"portal-{name}")
    stopping = {"signal": None}

    def on_term(signum, frame) -> None:      # only records it: the loop does the work
        stopping["signal"] = signum
        loop.call_soon_threadsafe(loop.stop)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C goes to the supervisor, which stops us

    from router.worker.datapath import DataPath
    from router.worker.scheduling import WorkerScheduling
    # Segments were mapped by the supervisor before the fork: the child has them already.
    counters = PortalCounters(spec.counters_segment.memory[:SEGMENT_BYTES])
    counters.set("worker_pid", os.getpid())
    counters.set("worker_started_ns", time.time_ns())
    zmq_context = zmq.Context()
    try:
        datapath = DataPath(spec.datapath, spec.index, loop, counters)
        portal = _make_portal(spec, loop, datapath, counters)
    except Exception as err:
        log.exception("portal %s cannot start: %s", name, err)
        return EXIT_BOOT_ERROR
    bus = BusClient(zmq_context, *spec.bus_endpoints, name, loop, lambda m: _on_bus(m, portal, loop))
    portal.bus = bus
    datapath.handler = portal.on_record
    datapath.after_batch = portal.flush
    scheduling = WorkerScheduling(spec.scheduling, counters)
    heartbeat = loop.call_every(HEARTBEAT_INTERVAL, lambda: _beat(counters, datapath, scheduling))
    _beat(counters, datapath, scheduling)
    bus.hello(spec.generation, os.getpid())
    event("portal-up", f"{spec.portal.kind} portal started (pid {os.getpid()}, generation {spec.generation})", name)
    try:
        loop.run_forever()
    finally:
        heartbeat.cancel()
        portal.close()
        # Let final advertisements and queued frames go out before the sockets close.
        loop.run_until(lambda: False, 0.5)
        datapath.close()
        bus.close()
        zmq_context.term()
    event("portal-stopped", "stopped", name)
    return EXIT_OK


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


def _on_bus(message, portal, loop) -> None:
    if isinstance(message, bm.Shutdown):
        loop.stop()
        return
    if isinstance(message, bm.Query):
        portal.bus.send(bm.Answer(message.request_id, portal.name, portal.query(message.what)))
        return
    portal.on_bus(message)


def _beat(counters: PortalCounters, datapath, scheduling) -> None:
    counters.set("heartbeat_ns", time.monotonic_ns())
    datapath.heartbeat()
    scheduling.tick()
