"""The supervisor (`tnwgd`): reconciles the configuration with the workers that run it.

After gunicorn's arbiter: signal handlers only enqueue; the main loop dispatches `handle_<sig>`,
then reaps dead workers, restarts them with backoff, kills hung ones (TERM, then KILL), and tells
systemd how things are. It owns everything that must outlive a worker: the ring and counter
segments, the wakeup eventfds, the control-bus hub. SIGHUP, `routerctl reload` and systemd's
ExecReload all call one diff-based `reload()`.
"""
from __future__ import annotations

import dataclasses
import logging
import mmap
import os
import signal
import socket
import stat
import time
from collections import deque
from dataclasses import dataclass, field

import multiprocess
import zmq

from router import extensions, systemd_notify
from router.config import ConfigError, diff_configs, load_gateway_config
from router.eventlog import claim_log_file, event, roll_log_if_due
from router.ipc import bus_messages as bm
from router.ipc.bus import BusHub
from router.ipc import layout
from router.ipc.shm import (PREFIX as SEGMENT_PREFIX, SHM_DIRECTORY, SharedMemoryFull, SharedSegment, free_bytes,
                            remove_stale)
from router.monitor.counters import SEGMENT_BYTES, PortalCounters
from router.monitor.views import version
from router.routing.service import RoutingService
from router.routing.topology import Adjacency, new_node_id
from router.um.lbmr_channel import domain_identity
from router.runtime import bus_endpoints, remove_stale_bus_sockets, runtime_dir
from router.um.loop import EventLoop
from router.worker.datapath import MAX_PORTALS, DataPathSpec, RingSet
from router.worker.process import EXIT_BOOT_ERROR, WORKER_SIGNALS, WorkerSpec, preload, worker_main
from router.worker.scheduling import policy_of, slice_of

log = logging.getLogger(__name__)

HEARTBEAT_TIMEOUT = 5.0          # a worker whose loop has not beaten for this long is hung
# A worker beats once its portals are up; starting them may wait on the network meanwhile (ACL
# host names are resolved then, each up to the resolver's timeout and attempts: 10 s by default
# for one name server, when DNS does not answer). Only past this has it hung while starting.
BOOT_TIMEOUT = 60.0
# The supervisor's own loop turns this late: it did not run (the router frozen whole: docker
# pause, systemctl freeze, Ctrl-Z), and its workers, frozen with it, could not beat either.
SUPERVISOR_PAUSED_AFTER = 1.0
KILL_GRACE = 2.0                 # between TERM and KILL
# The first restart comes soon (systemd's RestartSec default): a portal's traffic is lost while
# it is down, and a worker starts in some 20 ms (preloaded); the wait doubles while it keeps dying.
BACKOFF_FIRST, BACKOFF_MAX = 0.1, 30.0
STABLE_AFTER = 60.0              # a worker up this long has its backoff reset
CRASH_LOOP_RESTARTS = 5          # deaths in a row, each before STABLE_AFTER: say so, loudly, once
STOP_TIMEOUT = 10.0

EXIT_CONFIG_ERROR = 2
EXIT_BOOT_FAILED = 3


@dataclass
class Worker:
    config: object
    index: int
    counters: PortalCounters
    segment: SharedSegment
    process: object = None
    generation: int = 0
    restarts: int = 0
    quick_deaths: int = 0                 # deaths in a row within STABLE_AFTER of starting
    started: float = 0.0
    backoff: float = BACKOFF_FIRST
    restart_at: float | None = None
    term_sent: float | None = None
    spawned_ns: int = 0                   # the heartbeat the supervisor wrote at fork: not beaten yet
    ready: bool = False
    retired: bool = False                 # removed by reload: do not restart
    boot_failures: int = 0
    history: list = field(default_factory=list)
    link: dict = field(default_factory=dict)      # a peer portal's link: {"up", "peer", "peer_node_id"}
    group: tuple[str, ...] = ()           # the portals sharing this one's process (itself included)
    restart_requested: bool = False       # stopped to start again (a reload): not counted if it
                                          # exits by that TERM; counted if it had crashed anyway
    planned_start: bool = False           # its next start follows such a stop (logged as portal-up only)

    def back_off(self, now: float) -> float:
        """Start again after the current backoff, doubled for next time (up to BACKOFF_MAX);
        returns the wait."""
        wait = self.backoff
        self.restart_at = now + wait
        self.backoff = min(wait * 2, BACKOFF_MAX)
        return wait


class Supervisor:
    SIGNALS = (signal.SIGHUP, signal.SIGTERM, signal.SIGINT, signal.SIGCHLD)

    def __init__(self, config_path: str, utc: bool = False, config=None, cpu_latency=None):
        """`config`: the file's configuration, loaded already (tnwgd loads it before it drops root);
        `cpu_latency`: the <cpu-latency-limit> request tnwgd holds (router.cpu_latency), if any."""
        self.cpu_latency = cpu_latency
        self.config_path = config_path
        self.config = config if config is not None else load_gateway_config(config_path)
        self.cpu_latency_asked = self.config.daemon.cpu_latency_limit     # at start; a reload's waits for a restart
        self.name = self.config.daemon.name
        self.utc = utc
        self.pid = os.getpid()
        # The DRO's 64-bit "UM Router ID": unique per run, shown by routerctl and the web monitor.
        self.node_id = new_node_id()
        self.loop = EventLoop("supervisor")
        self.signals: deque[int] = deque()
        self.stopping = False
        self.ready_sent = False
        self.started = time.time()
        self.workers: dict[str, Worker] = {}
        self.free_indexes = list(range(MAX_PORTALS))      # the lowest free one is taken (ring slots)
        self.retiring: list[tuple[Worker, float]] = []     # removed portals' processes not yet exited
        # What the portals a reload removed had counted, summed: router-wide totals (the web
        # monitor's unknown fragments) go on from there instead of going back.
        self.removed_portals_counters = PortalCounters()
        self.runtime = runtime_dir()
        self.zmq = zmq.Context()
        self.hub = BusHub(self.zmq, *bus_endpoints(self.name, self.pid, self.runtime), self.loop)
        self.hub.on_message = self._on_bus
        self.rings = RingSet(self.name)
        self.routing = RoutingService(self.node_id, self.name, self.config.daemon, self._send_route_info,
                                      self._publish_routes)
        info = self.config.daemon.route_info
        self.loop.call_every(info.propagation_interval / 1000, self.routing.propagate)
        self.loop.call_every(info.check_interval / 1000, self.routing.check)
        self.extensions: list = []        # admin socket, web monitor, statistics sink (router/extensions.py)
        self.last_watchdog = 0.0
        self._heartbeats_checked_ns: int | None = None
        self._silence_counted_from_ns = 0      # silence before this (the supervisor paused) is no one's
        self._queries: dict[int, dict] = {}
        self._request_ids = 0

    # -- start ---------------------------------------------------------------------------------
    def run(self) -> int:
        removed = remove_stale(f"{SEGMENT_PREFIX}.{self.name}", ours_too=True)
        reused = [entry for entry in removed if entry.startswith(f"/{SEGMENT_PREFIX}.{self.name}.{self.pid}.")]
        if len(removed) > len(reused):
            log.info("removed %d shared-memory segments of a crashed run", len(removed) - len(reused))
        if reused:
            log.warning("removed %d shared-memory segments an earlier run of router %s left with this pid (%d): "
                        "it was killed, and this run got its pid (a container's router has the same pid at "
                        "every start); a router of this name in another container sharing /dev/shm would "
                        "lose them: give each router its own <name>", len(reused), self.name, self.pid)
        remove_stale_bus_sockets(self.name, self.runtime)
        self._install_signals()
        claim_log_file()
        self.loop.call_every(1.0, roll_log_if_due)
        # As the DRO's first lines (Gwd-7136-1, Gwd-7122-1): the version, the name and the node id.
        event("router-started", f"router {self.name} (umrouter {version()}, node id {self.node_id:#018x}, "
                                f"pid {self.pid}) starting {len(self.config.portals)} portals")
        self._say_what_monitoring_does()
        groups = {name: group.portals for group in self.config.daemon.worker_groups for name in group.portals}
        preload()
        try:
            for portal in self.config.portals:
                self._add_worker(portal, groups.get(portal.name))
        except SharedMemoryFull as err:
            log.critical("router %s cannot start: %s", self.name,
                         self._shared_memory_shortage(len(self.config.portals), err))
            self._shutdown()
            return EXIT_BOOT_FAILED
        for group in dict.fromkeys(worker.group for worker in self.workers.values()):
            self._spawn(self.workers[group[0]])
        self.extensions = extensions.start_all(self)
        systemd_notify.notify(f"STATUS=starting {len(self.workers)} portals")
        try:
            while not self.stopping:
                self.loop.run_once(0.1)
                self._dispatch_signals()
                self._reap()
                if self.retiring:
                    self._finish_retiring()
                self._check_heartbeats()
                self._manage()
                self._notify()
                if self._boot_failed():
                    log.critical("a portal cannot start; stopping (see the errors above)")
                    self.stop()
                    return EXIT_BOOT_FAILED
        finally:
            self._shutdown()
        return 0

    def _install_signals(self) -> None:
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        self._signal_pipe = (reader, writer)
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self.loop.add_reader(reader.fileno(), lambda: _drain_socket(reader))
        for sig in self.SIGNALS:
            signal.signal(sig, self._enqueue_signal)
        # tnwgd blocks them while it starts (router/cli/tnwgd.py): one sent meanwhile is handled now.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, self.SIGNALS)

    def _enqueue_signal(self, signum, frame) -> None:
        self.signals.append(signum)          # nothing else here: no logging in a handler

    def _dispatch_signals(self) -> None:
        pending = []
        while self.signals:
            pending.append(self.signals.popleft())
        # A stop goes first: Python runs the handlers of signals that came together in number
        # order (SIGHUP before SIGTERM), and a reload behind a stop would start what the stop
        # ends at once (reload ignores itself once stopping).
        pending.sort(key=lambda signum: signum not in (signal.SIGTERM, signal.SIGINT))
        for signum in pending:
            handler = getattr(self, f"handle_{signal.Signals(signum).name[3:].lower()}", None)
            if handler is not None:
                handler()

    def handle_hup(self) -> None:
        self.reload()

    def handle_term(self) -> None:
        self.stop()

    def handle_int(self) -> None:
        self.stop()

    def handle_chld(self) -> None:
        self._reap()

    # -- workers -------------------------------------------------------------------------------
    def _add_worker(self, portal, group: tuple[str, ...] | None = None) -> Worker:
        """A portal's segments and ring; `_spawn` starts it (with its `<worker-group>`, if any)."""
        index = min(self.free_indexes)
        segment = SharedSegment.create(self.name, f"counters{index}", SEGMENT_BYTES)
        try:
            self.rings.create(index)
        except BaseException:
            segment.close()
            raise
        self.free_indexes.remove(index)
        worker = Worker(portal, index, PortalCounters(segment.memory[:SEGMENT_BYTES]), segment,
                        group=group or (portal.name,))
        self.workers[portal.name] = worker
        # An endpoint's domain is announced at its worker's hello (_endpoint_reachable), not here:
        # a router starting listens for the routers already there for a while before its first
        # calculation, and that while must not pass before its portals can hear them (a loaded
        # host takes seconds to start a worker; the router then forwarded as if alone, twice
        # what another router still carried).
        return worker

    def _members(self, worker: Worker) -> list[Worker]:
        """The portals that run in `worker`'s process (`worker` among them)."""
        return [self.workers[name] for name in worker.group
                if name in self.workers and not self.workers[name].retired]

    def _spawn(self, worker: Worker) -> None:
        """Start the process of `worker`'s portal, with every portal of its group."""
        members = self._members(worker)
        indexes = self.portal_indexes()
        specs = []
        for member in members:
            member.generation += 1
            member.ready = False
            member.term_sent = None
            member.restart_at = None
            member.spawned_ns = time.monotonic_ns()
            member.counters.set("heartbeat_ns", member.spawned_ns)
            specs.append(WorkerSpec(portal=member.config, index=member.index, portal_indexes=indexes,
                                    generation=member.generation, bus_endpoints=self.hub.endpoints,
                                    counters_segment=member.segment, datapath=DataPathSpec(self.rings, indexes),
                                    log_type=self.config.daemon.log.type, log_path=self.config.daemon.log.path,
                                    utc=self.utc, node_id=self.node_id, router_name=self.name,
                                    route_info=self.config.daemon.route_info,
                                    scheduling=self.config.daemon.worker_scheduling,
                                    monitor=self.config.daemon.monitor, supervisor_pid=self.pid))
        name = "+".join(member.config.name for member in members)
        process = multiprocess.get_context("fork").Process(target=worker_main, args=(specs,),
                                                           name=f"tnwgd-{name}", daemon=False)
        # Forked with these signals blocked: until the worker has its own handlers, one sent to
        # it waits (a TERM in its first milliseconds went to the supervisor's handler copied
        # into it, and was lost); the supervisor's own wait the moment of the fork.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, WORKER_SIGNALS)
        pipes = _open_pipes()
        try:
            process.start()
        except OSError as err:
            # multiprocess opened the worker's two pipes before fork() failed, and keeps them
            # nowhere: closed here, or a fork failing for hours would run out of descriptors.
            for fd in _open_pipes() - pipes:
                os.close(fd)
            self._fork_failed(members, err)
            return
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        for member in members:
            member.process = process
            member.started = time.monotonic()

    def _fork_failed(self, members: list[Worker], err: OSError) -> None:
        """No process for these portals (EAGAIN: TasksMax= or the pid table is full; ENOMEM). That
        may pass, as what kills a worker may: try again after the backoff, as for a worker that
        died, while the other portals route on."""
        now = time.monotonic()
        for member in members:
            self._endpoint_reachable(member, False)
            member.generation -= 1            # not started: the next one is that generation
            wait = member.back_off(now)
        event("portal-down", f"cannot start a worker: {err}; trying again in {wait:.1f} s",
              "+".join(member.config.name for member in members))

    def _restart_requested(self, worker: Worker) -> None:
        """Stop `worker`'s process to start it again at once: not a failure, for any portal in it.
        One that is down, backing off after failures, starts at once: the new configuration may be
        what it lacked, and the wait could have been up to BACKOFF_MAX."""
        if worker.process is None:
            if worker.restart_at is not None:
                for member in self._members(worker):
                    member.restart_at, member.backoff = time.monotonic(), BACKOFF_FIRST
            return
        if worker.restart_at is not None:
            return                     # asked already (another portal of its group)
        for member in self._members(worker):
            member.restart_at = time.monotonic()
            member.backoff = BACKOFF_FIRST
            member.restart_requested = True   # not a failure, if it ends by this TERM (_reap)
        _kill(worker.process.pid, signal.SIGTERM)

    def portal_indexes(self) -> dict[str, int]:
        return {name: w.index for name, w in self.workers.items() if not w.retired}

    def query_workers(self, what: str, portals: list[str], on_done, timeout: float = 2.0) -> None:
        """Ask workers over the bus; `on_done({portal: data or None})` once all answered or at the
        timeout (a hung or restarting worker answers None). Never blocks the loop."""
        self._request_ids += 1
        request_id = self._request_ids
        pending = {"answers": {p: None for p in portals}, "left": set(portals), "done": on_done}
        self._queries[request_id] = pending
        for portal in portals:
            self.hub.send_to(portal, bm.Query(request_id, what))

        def expire() -> None:
            finished = self._queries.pop(request_id, None)
            if finished is not None:
                finished["done"](finished["answers"])
        self.loop.call_later(timeout, expire)
        if not portals:
            expire()

    def _on_bus(self, identity: str, message) -> None:
        if isinstance(message, bm.Answer):
            pending = self._queries.get(message.request_id)
            if pending is not None and message.portal in pending["left"]:
                pending["answers"][message.portal] = message.data
                pending["left"].discard(message.portal)
                if not pending["left"]:
                    del self._queries[message.request_id]
                    pending["done"](pending["answers"])
            return
        if isinstance(message, bm.Hello):
            worker = self.workers.get(message.portal)
            if worker is not None and worker.process is not None and message.pid == worker.process.pid:
                worker.ready = True
                self.hub.send_to(message.portal, self._route_table())
                self.hub.portal_up(message.portal, worker.index, worker.generation)
                self._endpoint_reachable(worker, True)
        elif isinstance(message, bm.RouteInfoMessage):
            self.routing.on_route_info(message.portal, message.data)
        elif isinstance(message, bm.PeerState):
            self._peer_state(message)
        elif isinstance(message, bm.DomainConflict):
            self.routing.note_domain_id_conflict(message.portal, message.domain_id, message.heard_domain_id,
                                                 message.heard_from)

    # -- routing -------------------------------------------------------------------------------
    def _peer_state(self, message: bm.PeerState) -> None:
        worker = self.workers.get(message.portal)
        if worker is None:
            return
        worker.link = {"up": bool(message.up), "peer": message.peer_name, "peer_node_id": message.peer_node_id}
        if message.up:
            self.routing.set_route_portal(message.portal, True)
            self.routing.set_adjacency(message.portal, Adjacency.router(message.peer_node_id, worker.config.cost,
                                                                        message.portal))
        else:
            self._peer_gone(message.portal)

    def _endpoint_reachable(self, worker: Worker, up: bool) -> None:
        """An endpoint portal's domain is this router's to route to only while a worker runs the
        portal: withdrawn when it dies (a crash loop may keep it down for many backoffs), so the
        other routers stop sending toward it through this router; announced again at its hello."""
        config = worker.config
        if config.kind != "endpoint" or worker.retired:
            return
        self.routing.set_route_portal(config.name, up)
        self.routing.set_adjacency(config.name, _domain_adjacency(config) if up else None)

    def _peer_gone(self, portal: str) -> None:
        self.routing.set_route_portal(portal, False)
        self.routing.set_adjacency(portal, None)

    def _send_route_info(self, portal: str, data: bytes) -> None:
        worker = self.workers.get(portal)
        if worker is None or not worker.ready:
            # Starting or restarting, it is not on the bus yet (the hub would count the message as
            # unreachable), and has no link or domain to send it on: the routes reach it at its
            # hello, and its domain this router's next announcement.
            return
        self.hub.send_to(portal, bm.RouteInfoMessage(portal, data))

    def _route_table(self) -> bm.RouteTable:
        version, local_id, records = self.routing.table()
        return bm.RouteTable(version, local_id, tuple(records))

    def _publish_routes(self, table: list) -> None:
        self.hub.publish(bm.RouteTable(table[0], table[1], tuple(table[2])))

    def _reap(self) -> None:
        for name, worker in list(self.workers.items()):
            process = worker.process
            if process is None or process.is_alive():
                continue
            code = process.exitcode
            process.join(0)
            worker.process = None
            self.hub.portal_down(name, worker.index)
            self._endpoint_reachable(worker, False)
            if worker.config.kind == "peer" and worker.link.get("up"):
                worker.link = {**worker.link, "up": False}
                self._peer_gone(name)
            if worker.retired or self.stopping:
                continue
            uptime = time.monotonic() - worker.started
            if code == EXIT_BOOT_ERROR:
                worker.boot_failures += 1
                if self._boot_failed():
                    # Not restarted: the router stops (run()); its log line says so, not "restarting".
                    event("portal-down", f"worker pid {process.pid} could not start the portal (the error "
                          "above says why); the router stops", name)
                    continue
            if uptime >= STABLE_AFTER:
                worker.backoff, worker.quick_deaths = BACKOFF_FIRST, 0
            requested, worker.restart_requested = worker.restart_requested, False
            if requested and code in (0, -signal.SIGTERM):
                # Stopped by a reload to start with its new configuration: no failure, no backoff;
                # its portal-up line follows.
                worker.restart_at, worker.planned_start = time.monotonic(), True
                event("portal-reconfigured", f"worker pid {process.pid} stopped after {uptime:.1f} s for the "
                      f"new configuration; starting it again", name)
                continue
            worker.restarts += 1
            if uptime < STABLE_AFTER:
                worker.quick_deaths += 1
            wait = worker.back_off(time.monotonic())
            event("portal-down", f"worker pid {process.pid} exited with {_describe_exit(code)} after "
                  f"{uptime:.1f} s; restarting in {wait:.1f} s (restart {worker.restarts})", name)
            if worker.quick_deaths == CRASH_LOOP_RESTARTS:
                # Restarting goes on (backing off to BACKOFF_MAX): what kills it may pass (a port
                # held by another process, a full disk), but an operator must look now.
                event("portal-crash-loop", f"the worker died {CRASH_LOOP_RESTARTS} times in a row, each within "
                      f"{STABLE_AFTER:.0f} s of starting (last: {_describe_exit(code)}); still restarting, at "
                      f"most every {BACKOFF_MAX:.0f} s; the lines above say why", name)

    def _check_heartbeats(self) -> None:
        now_ns = time.monotonic_ns()
        last, self._heartbeats_checked_ns = self._heartbeats_checked_ns, now_ns
        if last is not None and now_ns - last > SUPERVISOR_PAUSED_AFTER * 1e9:
            # Frozen with the supervisor, the workers may continue after it, in any order: the
            # silence that counts starts now, or every worker would be killed as hung.
            self._silence_counted_from_ns = now_ns
        for name, worker in self.workers.items():
            process = worker.process
            if process is None or not process.is_alive():
                continue
            beat = worker.counters.get("heartbeat_ns")
            silent = (now_ns - max(beat, self._silence_counted_from_ns)) / 1e9
            starting = beat == worker.spawned_ns       # its portals are not up yet: it has not beaten
            if worker.term_sent is None and silent > (BOOT_TIMEOUT if starting else HEARTBEAT_TIMEOUT):
                event("portal-hung", f"worker pid {process.pid} " + (
                      f"has not started its portal in {silent:.1f} s" if starting
                      else f"missed heartbeats for {silent:.1f} s") + "; sending TERM", name)
                worker.term_sent = time.monotonic()
                _kill(process.pid, signal.SIGTERM)
            elif worker.term_sent is not None and time.monotonic() - worker.term_sent > KILL_GRACE:
                _kill(process.pid, signal.SIGKILL)

    def _manage(self) -> None:
        now = time.monotonic()
        for worker in self.workers.values():
            if worker.process is None and not worker.retired and worker.restart_at is not None \
                    and now >= worker.restart_at and not self.stopping \
                    and not self._retiring_named(worker.config.name):
                if not worker.planned_start:
                    event("portal-restarting", f"starting generation {worker.generation + 1}", worker.config.name)
                worker.planned_start = False
                self._spawn(worker)

    def _boot_failed(self) -> bool:
        """A worker that cannot even boot before the router is ready is a configuration problem."""
        return not self.ready_sent and any(w.boot_failures for w in self.workers.values())

    def _notify(self) -> None:
        if not self.ready_sent and self.workers and all(w.ready for w in self.workers.values()):
            self.ready_sent = True
            systemd_notify.notify("READY=1", f"STATUS=routing: {len(self.workers)} portals up")
            log.info("all %d portals are up", len(self.workers))
        interval = systemd_notify.watchdog_interval()
        if interval and time.monotonic() - self.last_watchdog >= interval:
            self.last_watchdog = time.monotonic()
            systemd_notify.notify("WATCHDOG=1")

    # -- reload --------------------------------------------------------------------------------
    def reload(self) -> dict:
        """Apply the configuration file as it is now; only portals whose configuration changed
        restart. An invalid file changes nothing. `<daemon>` settings (admin socket, web monitor,
        statistics, logging, routing timers, worker scheduling) are the router's own and were
        set up at start: edited ones are reported and take effect at the next start; until then
        the running ones stay in force, also for workers started later."""
        if self.stopping:
            # A SIGHUP (logrotate, an admin's reload) right behind the SIGTERM that stops the
            # router: portals started now would be stopped at once, and systemd told RELOADING
            # after STOPPING.
            log.info("reload ignored: the router is stopping")
            return {"ok": False, "error": "the router is stopping"}
        if self.ready_sent:          # while starting, READY=1 is _notify's, once every portal is up
            systemd_notify.reloading()
        try:
            new = load_gateway_config(self.config_path)
        except (ConfigError, OSError) as err:
            event("config-rejected", f"configuration not reloaded, the old one keeps running: {err}")
            self._reload_finished("reload rejected: configuration invalid")
            return {"ok": False, "error": str(err)}
        diff = diff_configs(self.config, new)
        freed = sum(1 for name in diff.removed if self.workers[name].process is None)
        if len(diff.added) > len(self.free_indexes) + freed:
            # Removed portals' processes still stopping hold their ring slots for a moment.
            error = (f"{len(diff.added)} portals to add, {len(self.free_indexes) + freed} ring slots free "
                     f"({len(self.retiring)} removed portals still stopping); reload again in a moment")
            event("config-rejected", f"configuration not reloaded, the old one keeps running: {error}")
            self._reload_finished("reload rejected: no free ring slot")
            return {"ok": False, "error": error}
        free = free_bytes()
        if len(diff.added) * self._portal_shared_memory() > free:
            # Refused before anything changes: a portal whose ring the host cannot back would die
            # of SIGBUS at its first records, and its neighbours writing to it with it.
            error = (self._shared_memory_shortage(len(diff.added), None, free) + "; portals this reload "
                     "removes free theirs only once their processes have exited: remove them first")
            event("config-rejected", f"configuration not reloaded, the old one keeps running: {error}")
            self._reload_finished("reload rejected: not enough shared memory")
            return {"ok": False, "error": error}
        cost_only = []
        for name in diff.removed:
            self._retire(name)
        for name in diff.changed:
            old_portal, new_portal = self.workers[name].config, new.portal(name)
            worker = self.workers[name]
            worker.config = new_portal
            if dataclasses.replace(old_portal, cost=new_portal.cost) == new_portal:
                cost_only.append(name)
                self.hub.send_to(name, bm.SetCost(name, new_portal.cost))
                self._cost_changed(worker)
                continue
            if new_portal.kind == "endpoint":
                # Its domain (id, cost) may be another now: the routes follow the new file, from
                # now if its worker runs, else from its hello.
                self._endpoint_reachable(worker, worker.process is not None)
            elif old_portal.kind == "endpoint":
                self.routing.set_route_portal(name, False)
                self.routing.set_adjacency(name, None)
            self._restart_requested(worker)
        self.config = dataclasses.replace(new, daemon=self.config.daemon)
        not_added = []
        for name in diff.added:         # in a worker of its own: <worker-group> applies at start
            try:
                worker = self._add_worker(new.portal(name))
            except SharedMemoryFull as err:
                # /dev/shm filled up since the check above (another program): the portal is left
                # out of the running configuration, so that the next reload adds it.
                not_added.append(name)
                event("portal-down", f"portal not added: {self._shared_memory_shortage(1, err)}", name)
                continue
            if self._retiring_named(name):
                worker.restart_at = time.monotonic()    # _manage starts it once the old one has exited
            else:
                self._spawn(worker)
        if not_added:
            self.config = dataclasses.replace(self.config, portals=[
                portal for portal in self.config.portals if portal.name not in not_added])
        added = [name for name in diff.added if name not in not_added]
        summary = {"ok": True, "added": added, "removed": diff.removed, "changed": diff.changed,
                   "kept": diff.kept, "cost_only": cost_only, "daemon_pending": diff.daemon_changes,
                   **({"not_added": not_added} if not_added else {})}
        pending = (f"; <daemon> changes take effect when the router restarts: {', '.join(diff.daemon_changes)}"
                   if diff.daemon_changes else "")
        event("config-reloaded", f"added {added}, removed {diff.removed}, changed {diff.changed}, "
              f"kept {diff.kept}{pending}")
        self._reload_finished(f"routing: {len(self.workers)} portals up" if self.ready_sent
                              else f"starting {len(self.workers)} portals")
        return summary

    def _portal_shared_memory(self) -> int:
        """Bytes of /dev/shm one portal takes: its counters and its ring, in whole pages."""
        return _pages(SEGMENT_BYTES) + _pages(layout.segment_size(self.rings.capacity))

    def _shared_memory_shortage(self, portals: int, err: SharedMemoryFull | None, free: int = 0) -> str:
        """What is missing and what to do: an operator sizes /dev/shm (docker --shm-size) by it."""
        each = self._portal_shared_memory()
        need = (f"{portals} portals need {portals * each} bytes of shared memory ({each} each: its "
                f"{self.rings.capacity}-byte ring and its counters)")
        if err is not None:
            return f"{need}; {err}"
        return (f"{need}, {SHM_DIRECTORY} has {free} bytes free; give the host or container more shared "
                f"memory (docker run --shm-size, or the size= of the tmpfs mounted on {SHM_DIRECTORY})")

    def _reload_finished(self, status: str) -> None:
        """READY=1 ends the RELOADING=1 systemd was told; before start-up is over it would say
        the router is up while its portals are not."""
        if self.ready_sent:
            systemd_notify.notify("READY=1", f"STATUS={status}")
        else:
            systemd_notify.notify(f"STATUS={status}")

    def _cost_changed(self, worker: Worker) -> None:
        """A cost-only reload: the adjacency's cost changes, the others hear it in route-info."""
        config = worker.config
        if config.kind == "endpoint":
            self._endpoint_reachable(worker, worker.process is not None)     # down: at its hello
        elif worker.link.get("up"):
            self.routing.set_adjacency(config.name, Adjacency.router(worker.link["peer_node_id"], config.cost,
                                                                     config.name))

    def _retire(self, name: str) -> None:
        worker = self.workers[name]
        for member in self._members(worker):
            if member is not worker and member.process is not None:
                # The group's process goes with this portal: its other portals start again without it.
                member.restart_at, member.backoff = time.monotonic(), BACKOFF_FIRST
                member.restart_requested = True
        for member in self._members(worker):
            if member is not worker:    # it no longer shares their process (a portal of its name
                member.group = tuple(n for n in member.group if n != name)    # added later has its own)
        del self.workers[name]
        self.routing.set_route_portal(name, False)
        self.routing.set_adjacency(name, None)
        worker.retired = True
        self.hub.forget_portal(name)
        self.hub.publish(bm.PortalRemoved(name, worker.index))
        self.rings.remove(worker.index)        # unlinked; a process still mapping them keeps them
        # Its counters were a view of the segment: a copy outlives it, so a late reader (a page
        # or an extension still holding the worker) reads the last values, not unmapped memory.
        last = PortalCounters()
        last.values[:] = worker.counters.values
        worker.counters = last
        self.removed_portals_counters.values[:] += last.values
        worker.segment.close()
        if worker.process is None:
            self.free_indexes.append(worker.index)
            return
        # Never waited for here: a hung worker would hold the supervisor (the admin socket, the
        # others' heartbeats and restarts) for the whole stop timeout. _finish_retiring escalates
        # to KILL at the deadline and frees its index once it has exited.
        _kill(worker.process.pid, signal.SIGTERM)
        self.retiring.append((worker, time.monotonic() + STOP_TIMEOUT))

    def _retiring_named(self, name: str) -> bool:
        """A removed portal of this name is still stopping: a new one waits for it (one bus
        identity per portal name)."""
        return any(worker.config.name == name for worker, _ in self.retiring)

    def _finish_retiring(self) -> None:
        """Removed portals' processes: joined once they exit (their index free again), KILLed
        at their deadline."""
        now, still = time.monotonic(), []
        for worker, deadline in self.retiring:
            process = worker.process
            if not process.is_alive():
                process.join(0)
                worker.process = None
                self.free_indexes.append(worker.index)
                continue
            if now >= deadline:
                _kill(process.pid, signal.SIGKILL)
                deadline = float("inf")        # KILL cannot be ignored: it exits
            still.append((worker, deadline))
        self.retiring = still

    # -- stop ----------------------------------------------------------------------------------
    def stop(self) -> None:
        self.stopping = True

    def _shutdown(self) -> None:
        event("router-stopping", f"router {self.name} stopping")
        systemd_notify.notify("STOPPING=1")
        stopping = [*self.workers.values(), *(worker for worker, _ in self.retiring)]
        for worker in stopping:
            if worker.process is not None and worker.process.is_alive():
                _kill(worker.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for worker in stopping:
            if worker.process is not None:
                worker.process.join(max(0.0, deadline - time.monotonic()))
                if worker.process.is_alive():
                    _kill(worker.process.pid, signal.SIGKILL)
                    worker.process.join(2)
        for extension in self.extensions:
            extension.close()
        self.hub.close()
        self.zmq.term()
        for worker in self.workers.values():
            worker.counters = None
            worker.segment.close()
        self.rings.close()
        for path in self.runtime.glob(f"{self.name}.{self.pid}.bus*"):
            path.unlink(missing_ok=True)
        event("router-stopped", f"router {self.name} stopped")

    def _say_what_monitoring_does(self) -> None:
        """<monitor>: what is published, and what a DRO configuration asks for that is not here."""
        monitor = self.config.daemon.monitor
        if monitor.interval <= 0:
            return
        chosen = (monitor.transport_module, monitor.format_module)
        if chosen == ("lbm", "csv"):
            log.info("UM statistics of the endpoint portals' contexts every %d s on the lbm transport (csv)",
                     monitor.interval)
        elif monitor.format_module != "parquet":
            log.warning("<monitor> asks for the %s transport and %s format, which are not available here: no UM "
                        "statistics are published (lbm with csv publishes them; the parquet format writes the "
                        "router's counters)", *chosen)

    # -- what the admin socket and monitors read -----------------------------------------------
    def status(self) -> dict:
        now_ns = time.monotonic_ns()
        portals = []
        for name, worker in self.workers.items():
            counters = worker.counters.snapshot()
            alive = worker.process is not None and worker.process.is_alive()
            portals.append({
                "name": name, "kind": worker.config.kind, "domain_id": getattr(worker.config, "domain_id", None),
                "cost": worker.config.cost, "pid": worker.process.pid if alive else None,
                "uptime_s": round(time.monotonic() - worker.started, 3) if alive else 0.0,
                "restarts": worker.restarts, "generation": worker.generation,
                # Until it has stayed up STABLE_AFTER again (portal-crash-loop was logged).
                "crash_loop": worker.quick_deaths >= CRASH_LOOP_RESTARTS
                and not (alive and time.monotonic() - worker.started >= STABLE_AFTER),
                "heartbeat_age_s": round((now_ns - counters["heartbeat_ns"]) / 1e9, 3),
                "proxy_receivers": counters["proxy_receivers"], "proxy_sources": counters["proxy_sources"],
                "state": "up" if alive and worker.ready else ("starting" if alive else "down"),
                "scheduling": policy_of(worker.process.pid) if alive else None,
                "scheduling_slice_us": _microseconds(slice_of(worker.process.pid)) if alive else None,
                "worker_portals": [member.config.name for member in self._members(worker)],
            })
            if worker.config.kind == "peer":
                portals[-1]["link"] = "up" if worker.link.get("up") else "down"
                portals[-1]["peer"] = worker.link.get("peer") or None
                portals[-1]["peer_node_id"] = worker.link.get("peer_node_id") or None
        return {"router": self.name, "node_id": self.node_id, "pid": self.pid,
                "uptime_s": round(time.time() - self.started, 3), "config": str(self.config_path),
                "portals": portals, "topology_signature": f"{self.routing.signature:#018x}",
                "routers_known": len(self.routing.topology.routers()),
                "cpu_latency_limit_us": self.cpu_latency.limit_us if self.cpu_latency is not None else None,
                "cpu_latency_limit_asked_us": self.cpu_latency_asked}

    def portal_counters(self) -> dict[str, dict[str, int]]:
        return {name: worker.counters.snapshot() for name, worker in self.workers.items()}


def _domain_adjacency(portal) -> Adjacency:
    return Adjacency.domain(portal.domain_id, portal.cost, portal.name, domain_identity(portal.receiver_um),
                            portal.hotlink_index)


def _pages(size: int) -> int:
    """``size`` bytes as a tmpfs holds them: in whole pages."""
    return -(-size // mmap.PAGESIZE) * mmap.PAGESIZE


def _drain_socket(sock: socket.socket) -> None:
    try:
        while sock.recv(4096):
            pass
    except (BlockingIOError, InterruptedError):
        pass


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "an unknown status"
    if code < 0:
        return f"signal {_signal_name(-code)}"
    return f"code {code}"


def _signal_name(number: int) -> str:
    """SIGKILL; a real-time signal, which Python does not name between SIGRTMIN and SIGRTMAX (any
    of them ends a process that does not handle it), as SIGRTMIN+6 (40); else the number."""
    try:
        return signal.Signals(number).name
    except ValueError:
        pass
    if signal.SIGRTMIN < number < signal.SIGRTMAX:
        return f"SIGRTMIN+{number - signal.SIGRTMIN} ({number})"
    return str(number)


def _microseconds(nanoseconds: int | None) -> float | None:
    return None if nanoseconds is None else nanoseconds / 1000


def _open_pipes() -> set[int]:
    """The pipe descriptors this process has open (no other thread of the supervisor makes pipes)."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if stat.S_ISFIFO(os.fstat(int(name)).st_mode):
                found.add(int(name))
        except OSError:             # the directory's own descriptor, closed by now
            pass
    return found
