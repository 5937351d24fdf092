"""The supervisor's lifecycle at its edges, as systemd and operators drive it over months: a
SIGTERM that arrives while the daemon is still starting, the leftovers of a supervisor that was
killed, and what systemd is told while a reload races with start-up."""
from __future__ import annotations

import glob
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.processes import wait_for
from tests.support.routers import endpoint_xml

pytestmark = pytest.mark.integration


def two_lans(lan1, lan2) -> str:
    return endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path)


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def kill_all(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start_with_pidfile(routers, make_domain, pidfile: Path):
    router = routers.start(two_lans(make_domain(), make_domain()),
                           daemon_extra=f"    <pidfile>{pidfile}</pidfile>\n")
    wait_for(lambda: pidfile.exists() or router.tool.proc.poll() is not None, 30, interval=0.001,
             message="the pidfile")
    return router


def test_sigterm_while_starting_stops_cleanly(runtime_dir, routers, make_domain, tmp_path):
    """systemd stops (or restarts) a unit that is still starting: SIGTERM the moment the pidfile
    is written (before the supervisor had its handlers, it died of it). The daemon stops as it
    does later on: exit 0, pidfile, bus sockets and shared memory gone, no worker left."""
    pidfile = tmp_path / "tnwgd.pid"
    router = start_with_pidfile(routers, make_domain, pidfile)
    router.signal(signal.SIGTERM)
    seen = set()
    try:
        deadline = time.monotonic() + 30
        while router.tool.proc.poll() is None and time.monotonic() < deadline:
            seen.update(children(router.pid))
            time.sleep(0.01)
        assert router.tool.proc.poll() is not None, "the router did not stop within 30 s of SIGTERM"
        assert router.tool.proc.returncode == 0, router.log()[-3000:]
        assert not pidfile.exists(), "the pidfile was left behind"
        assert glob.glob(f"{runtime_dir}/{router.name}.{router.pid}.bus*") == []
        assert glob.glob(f"/dev/shm/umr.{router.name}.{router.pid}.*") == []
        wait_for(lambda: not any(alive(pid) for pid in seen), 10, message="no worker left")
    finally:
        kill_all(seen)


def test_sighup_while_starting_does_not_kill_the_daemon(runtime_dir, routers, make_domain, tmp_path):
    """`kill -HUP` (a reload) the moment the pidfile is written: the daemon comes up (SIGHUP's
    default action used to end it there), then stops cleanly."""
    pidfile = tmp_path / "tnwgd.pid"
    router = start_with_pidfile(routers, make_domain, pidfile)
    router.signal(signal.SIGHUP)
    router.wait_ready()
    workers = children(router.pid)
    try:
        wait_for(lambda: "UMR-1002-1" in router.log(), 10, message="the reload applied")
        assert router.stop() == 0, router.log()[-3000:]
        assert not pidfile.exists()
        assert glob.glob(f"/dev/shm/umr.{router.name}.{router.pid}.*") == []
        wait_for(lambda: not any(alive(pid) for pid in workers), 10, message="no worker left")
    finally:
        kill_all(workers)


def test_a_hangup_sent_to_every_process_reloads_and_kills_no_worker(runtime_dir, routers, make_domain):
    """SIGHUP to the whole process group (a terminal's hangup; `systemctl kill -s HUP` signals
    every process of the unit): the supervisor reloads, the workers carry on (they ended, and were
    restarted as crashes)."""
    router = routers.start(two_lans(make_domain(), make_domain())).wait_ready()
    pids = router.worker_pids()
    for pid in (*pids.values(), router.pid):
        os.kill(pid, signal.SIGHUP)
    wait_for(lambda: "UMR-1002-1" in router.log(), 10, message="the supervisor's reload")
    assert router.worker_pids() == pids and all(alive(pid) for pid in pids.values())
    assert "UMR-1101-2" not in router.log(), "no portal went down"
    assert router.stop() == 0


class NotifyListener:
    """Stands in for systemd's $NOTIFY_SOCKET; `hold()` fills its queue, so the daemon's next
    sd_notify blocks until `release()` (a busy systemd, and a way to stop the daemon at a point)."""

    def __init__(self, path: Path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setblocking(False)
        self.messages: list[list[str]] = []
        self.held = 0

    def hold(self) -> None:
        filler = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        filler.setblocking(False)
        with filler:
            while True:
                try:
                    filler.sendto(b"HOLD", str(self.path))
                except BlockingIOError:
                    return
                self.held += 1

    def read(self) -> list[list[str]]:
        while True:
            try:
                data = self.sock.recv(4096)
            except BlockingIOError:
                return self.messages
            if data != b"HOLD":
                self.messages.append(data.decode().split("\n"))

    def states(self) -> list[str]:
        return [field for message in self.read() for field in message]

    def close(self) -> None:
        self.sock.close()


def test_a_reload_while_starting_does_not_tell_systemd_ready_early(runtime_dir, routers, make_domain, tmp_path,
                                                                   monkeypatch):
    """A reload (SIGHUP, routerctl reload) before every portal is up: READY=1 must wait for the
    portals, as it does without the reload (systemd would consider the unit started, with
    TimeoutStartSec and the units ordered after it satisfied, while no portal routes)."""
    notify = NotifyListener(tmp_path / "notify.sock")
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify.path))
    notify.hold()                    # the supervisor stops at its first sd_notify, after forking
    router = routers.start(two_lans(make_domain(), make_domain()))
    wait_for(lambda: len(children(router.pid)) == 2 or router.tool.proc.poll() is not None, 30,
             message="both workers forked")
    workers = children(router.pid)
    try:
        for pid in workers:          # they cannot have said hello: the supervisor has not read the bus
            os.kill(pid, signal.SIGSTOP)
        router.signal(signal.SIGHUP)
        notify.read()                # the supervisor goes on
        wait_for(lambda: "UMR-1002-1" in router.log(), 10, message="the reload applied")
        assert "READY=1" not in notify.states(), f"READY=1 with no portal up: {notify.messages}"
        for pid in workers:
            os.kill(pid, signal.SIGCONT)
        wait_for(lambda: "READY=1" in notify.states(), 30, message="READY=1 once the portals are up")
        router.tool.wait_for_stderr("portals are up", 10)      # logged just after READY=1 is sent
        assert router.stop() == 0, router.log()[-3000:]
    finally:
        kill_all(workers)
        notify.close()


def test_a_killed_supervisors_bus_sockets_are_removed_at_the_next_start(runtime_dir, routers, make_domain):
    """SIGKILL, the OOM killer or systemd's watchdog (SIGABRT) end a supervisor without its clean-up:
    its control-bus sockets stay in the runtime directory, which systemd preserves and every
    instance shares. The next start removes them, as it removes the run's shared memory, so
    months of such restarts do not pile them up."""
    portals = two_lans(make_domain(), make_domain())
    first = routers.start(portals).wait_ready()
    workers = children(first.pid)
    try:
        os.kill(first.pid, signal.SIGKILL)
        first.tool.proc.wait(10)
        wait_for(lambda: not any(alive(pid) for pid in workers), 20, message="the workers stopped with it")
    finally:
        kill_all(workers)
    left = glob.glob(f"{runtime_dir}/{first.name}.{first.pid}.bus*")
    assert left, "the killed run left no bus socket: nothing to test"
    second = routers.start(portals, name=first.name).wait_ready()
    assert glob.glob(f"{runtime_dir}/{first.name}.{first.pid}.bus*") == []
    assert glob.glob(f"/dev/shm/umr.{first.name}.{first.pid}.*") == []
    assert glob.glob(f"{runtime_dir}/{second.name}.{second.pid}.bus*"), "the new run's own sockets stay"
    assert second.stop() == 0
    assert glob.glob(f"{runtime_dir}/{second.name}.*.bus*") == []


def pipes_of(pid: int) -> int:
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            count += os.readlink(fd).startswith("pipe:")
        except OSError:             # closed meanwhile
            pass
    return count


NOBODY = 65534


class ForkLimit:
    """Makes fork() fail in one process with EAGAIN, as under systemd's TasksMax= or a full pid
    table: its RLIMIT_NPROC soft limit set below what its user runs (threads count). Root is exempt
    from that limit, so a router started as root runs as nobody (<uid>/<gid>); and the limit is set
    as the router's own user, which needs no capability (a container's root may lack
    CAP_SYS_RESOURCE, which setting another user's limits takes)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.uid = os.stat(f"/proc/{pid}").st_uid

    def close(self) -> None:
        self._set_soft("1")

    def open(self) -> None:
        hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]        # the router's too: it inherited ours
        self._set_soft("unlimited" if hard == resource.RLIM_INFINITY else str(hard))

    def _set_soft(self, soft: str) -> None:
        """util-linux's prlimit, run as the router's user (only the soft limit: the hard one stays)."""
        user = (lambda: (os.setgid(self.uid), os.setuid(self.uid))) if self.uid != os.geteuid() else None
        done = subprocess.run(["prlimit", f"--pid={self.pid}", f"--nproc={soft}:"], preexec_fn=user,
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0 or not os.path.exists(f"/proc/{self.pid}"), done.stderr


def test_a_worker_that_cannot_be_forked_is_retried_without_stopping_the_router(runtime_dir, routers, make_domain):
    """fork() fails for a while (EAGAIN: TasksMax= reached, the pid table full; or ENOMEM): the
    router keeps its other portals routing and starts the worker once it can, instead of dying
    of the exception with every portal."""
    as_nobody = f"    <uid>{NOBODY}</uid>\n    <gid>{NOBODY}</gid>\n" if os.geteuid() == 0 else ""
    router = routers.start(two_lans(make_domain(), make_domain()), daemon_extra=as_nobody).wait_ready()
    workers = children(router.pid)
    limit = ForkLimit(router.pid)
    try:
        pids = router.worker_pids()
        limit.close()
        os.kill(pids["1"], signal.SIGKILL)           # LAN2's worker (ring index 1) must be forked again
        wait_for(lambda: "cannot start" in router.log() or router.tool.proc.poll() is not None, 20,
                 message="a failed fork")
        assert router.tool.proc.poll() is None, f"the router died of a failed fork:\n{router.log()[-3000:]}"
        assert router.worker_pids()["0"] == pids["0"], "LAN1 was left alone"
        # Each attempt opens the worker's pipes before fork() fails: none may stay open.
        after_first = pipes_of(router.pid)
        wait_for(lambda: router.log().count("cannot start") >= 3, 20, message="two more failed forks")
        assert pipes_of(router.pid) <= after_first
        limit.open()
        wait_for(lambda: router.worker_pids()["1"] not in (0, pids["1"]), 30, message="LAN2's worker started")
        router.tool.wait_for_stderr("generation 2", 30)
        workers += children(router.pid)
        assert router.stop() == 0, router.log()[-3000:]
        assert glob.glob(f"/dev/shm/umr.{router.name}.{router.pid}.*") == []
    finally:
        limit.open()
        router.stop()
        kill_all(workers + children(router.pid))


def stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


def test_a_router_frozen_whole_and_thawed_kills_no_worker_as_hung(runtime_dir, routers, make_domain):
    """`docker pause`, `systemctl freeze`, Ctrl-Z in a terminal: every process of the router stops,
    then all continue, in no particular order. No worker was hung: the supervisor did not run
    either. Killing them all as hung restarted every portal (losing what was in flight) and
    counted a restart for each."""
    from router.supervisor import HEARTBEAT_TIMEOUT
    from tests.support.routerctl import routerctl
    router = routers.start(two_lans(make_domain(), make_domain())).wait_ready()
    workers = router.worker_pids()
    everyone = [router.pid, *workers.values()]
    try:
        for pid in everyone:
            os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: all(stopped(pid) for pid in everyone), 10, message="every process stopped")
        last_beat = max(counters["heartbeat_ns"] for counters in router.counters().values())
        wait_for(lambda: time.monotonic_ns() - last_beat > (HEARTBEAT_TIMEOUT + 1) * 1e9, HEARTBEAT_TIMEOUT + 10,
                 interval=0.1, message="longer than the heartbeat timeout to pass")
        # The supervisor continues first and runs (it answers) before the workers continue.
        os.kill(router.pid, signal.SIGCONT)
        answered = routerctl("status", "--json", "--timeout", 20)
        assert answered.code == 0, answered.explain()
    finally:
        for pid in everyone:
            os.kill(pid, signal.SIGCONT)
    wait_for(lambda: all(time.monotonic_ns() - c["heartbeat_ns"] < 1e9 for c in router.counters().values()), 20,
             message="the workers beating again")
    status = routerctl("status", "--json").json()
    assert "missed heartbeats" not in router.log(), router.log()[-3000:]
    assert [(p["state"], p["restarts"]) for p in status["portals"]] == [("up", 0), ("up", 0)], status
    assert router.worker_pids() == workers


def test_a_portal_that_cannot_start_stops_the_router_with_its_reason_only(runtime_dir, routers, make_domain):
    """A peer portal's listen port is held by another program: the router stops with exit 3
    (systemd does not restart it) and says why in one line, the port and the system's reason.
    Not a Python traceback, as for a bug, and not a line saying the portal restarts."""
    from tests.support.routers import free_port, peer_xml
    port = free_port()
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", port))
        holder.listen()
        router = routers.start(endpoint_xml("LAN1", 1, make_domain().config_path) + peer_xml("P1", listen=port))
        code = router.tool.proc.wait(60)
    log = router.log()
    assert code == 3, log[-3000:]
    assert "portal P1 cannot start" in log and f"cannot listen on port {port}: Address already in use" in log, log
    assert "Traceback" not in log, log[-3000:]
    assert "restarting in" not in log, log[-3000:]
    assert glob.glob(f"/dev/shm/umr.{router.name}.{router.pid}.*") == []
    assert glob.glob(f"{runtime_dir}/{router.name}*") == []


def test_a_portal_on_an_interface_this_host_lacks_stops_the_router_with_its_reason_only(
        runtime_dir, routers, make_domain):
    """An endpoint's resolver interface named as on another host (eth9 here, a network card
    renamed, a VLAN not brought up): exit 3 at start with the reason in one line, as for a port
    taken; not a Python traceback, as for a bug."""
    lan2 = make_domain("context resolver_multicast_interface nosuchif0")
    router = routers.start(endpoint_xml("LAN1", 1, make_domain().config_path) + endpoint_xml("LAN2", 2, lan2.config_path))
    code = router.tool.proc.wait(60)
    log = router.log()
    assert code == 3, log[-3000:]
    assert "portal LAN2 cannot start: no interface named 'nosuchif0'" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert "restarting in" not in log, log[-3000:]


def test_a_portal_a_reload_adds_on_an_interface_this_host_lacks_is_down_with_its_reason(
        runtime_dir, routers, make_domain):
    """The router routes on with its other portals; the new one is down, the log says why in one
    line at each attempt (the interface may yet come up: it is tried again with backoff), and
    routerctl status shows it down."""
    from tests.support.routerctl import routerctl
    lan1, lan2 = make_domain(), make_domain()
    lan3 = make_domain("context resolver_multicast_interface nosuchif0")
    router = routers.start(two_lans(lan1, lan2)).wait_ready()
    pids = router.worker_pids()
    router.config.write_text(router.config.read_text().replace(
        "  </portals>", endpoint_xml("LAN3", 3, lan3.config_path) + "  </portals>"))
    router.signal(signal.SIGHUP)
    wait_for(lambda: router.log().count("portal LAN3 cannot start: no interface named 'nosuchif0'") >= 2, 30,
             message="LAN3 tried twice, refused each time")
    assert router.tool.proc.poll() is None, router.log()[-3000:]
    assert "Traceback" not in router.log(), router.log()[-3000:]
    status = {p["name"]: p for p in routerctl("status", "--json").json()["portals"]}
    assert status["LAN3"]["state"] in ("down", "starting") and status["LAN1"]["state"] == "up", status
    assert {k: v for k, v in router.worker_pids().items() if k in ("0", "1")} == pids


def test_a_portal_slow_to_start_is_waited_for_not_killed_as_hung(runtime_dir, make_domain, tmp_path):
    """An inbound ACL names hosts; at start the worker resolves them, and with a DNS server that
    does not answer that takes the resolver's timeout (8 s here: 4 s, 2 attempts), longer than a
    running worker may miss heartbeats. The portal starts late, once: it was killed as hung every
    time, restarting for ever, and the router never came up."""
    from tests.support.processes import ROOT
    from tests.support.routers import write_config
    server = f"127.53.{os.getpid() // 250 % 250 + 1}.{os.getpid() % 250 + 1}"    # this test's own
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)      # a name server that never answers
    silent.bind((server, 53))
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(f"nameserver {server}\noptions timeout:4 attempts:2\n")
    acl = ('      <acl><inbound><ace match="accept"><source-ip value="source-host-a" comparison="eq"/></ace>'
           '<ace match="accept"><pcre-pattern>.</pcre-pattern></ace></inbound></acl>\n')
    name = f"slow{os.getpid() % 10000}"
    config = write_config(tmp_path, name, endpoint_xml("LAN1", 1, make_domain().config_path, after_config=acl)
                          + endpoint_xml("LAN2", 2, make_domain().config_path))
    # The router alone sees that resolver: its own mount namespace, /etc/resolv.conf bound over.
    argv = ["unshare", "--mount", "--", "sh", "-c",
            'mount --bind "$0" /etc/resolv.conf && exec "$1" -m router.cli.tnwgd "$2"',
            str(resolv), sys.executable, str(config)]
    router = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(router.stderr), daemon=True)
    reader.start()
    log = lambda: "".join(list(lines))     # noqa: E731
    workers = set()
    try:
        wait_for(lambda: "portals are up" in log() or router.poll() is not None, 60, message="both portals up")
        workers.update(children(router.pid))
        assert "portals are up" in log(), log()[-3000:]
        assert "UMR-1101-4" not in log() and "UMR-1101-2" not in log(), log()[-3000:]   # not hung, not restarted
        assert "source-host-a" in log()                 # it did wait on the resolver
        router.send_signal(signal.SIGTERM)
        assert router.wait(30) == 0, log()[-3000:]
    finally:
        silent.close()
        if router.poll() is None:
            router.kill()
            router.wait()
        kill_all(workers)
        for segment in glob.glob(f"/dev/shm/umr.{name}.{router.pid}.*"):
            os.unlink(segment)
    assert "Traceback" not in log(), log()


def test_a_router_killed_in_a_container_starts_again_with_the_same_pid(runtime_dir, make_domain, tmp_path):
    """A container's router is pid 1 of its pid namespace at every start, and LBT-IPC users share
    the host's /dev/shm with it. Killed (docker kill, the OOM killer), it leaves /umr.NAME.1.*;
    the next start, pid 1 again, took them for a live router's (their pid is alive: its own) and
    failed to create its own, with a traceback, at every restart."""
    from tests.support.processes import ROOT
    from tests.support.routers import write_config
    name = f"pidns{os.getpid() % 10000}"
    config = write_config(tmp_path, name, two_lans(make_domain(), make_domain()))
    started: list[tuple[subprocess.Popen, list[str]]] = []

    def start_in_a_pid_namespace():
        argv = ["unshare", "--pid", "--fork", "--kill-child", "--", sys.executable, "-m", "router.cli.tnwgd",
                str(config)]
        process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True).start()
        started.append((process, lines))
        wait_for(lambda: "portals are up" in "".join(lines) or process.poll() is not None, 60,
                 message="the router in its pid namespace up")
        return process, lines

    try:
        first, lines = start_in_a_pid_namespace()
        assert "portals are up" in "".join(lines), "".join(lines)[-3000:]
        assert glob.glob(f"/dev/shm/umr.{name}.1.*"), "the router is pid 1 of its namespace"
        first.kill()            # unshare --kill-child: the namespace's processes are KILLed with it
        first.wait(30)
        assert glob.glob(f"/dev/shm/umr.{name}.1.*"), "a killed router leaves its segments"

        again, lines = start_in_a_pid_namespace()
        log = "".join(lines)
        assert again.poll() is None and "portals are up" in log, log[-3000:]
        assert "Traceback" not in log and f"earlier run of router {name} left with this pid (1)" in log, log[-3000:]
        [router] = children(again.pid)       # unshare ignores TERM while it waits: signal the router
        os.kill(router, signal.SIGTERM)
        assert again.wait(30) == 0, "".join(lines)[-3000:]
        assert glob.glob(f"/dev/shm/umr.{name}.1.*") == []
    finally:
        for process, _ in started:
            if process.poll() is None:
                process.kill()
                process.wait()
        for segment in glob.glob(f"/dev/shm/umr.{name}.1.*"):
            os.unlink(segment)


def test_a_domain_whose_portal_is_down_is_withdrawn_from_the_other_routers_until_it_is_back(
        runtime_dir, routers, make_domain):
    """LAN1 - router A - peer link - router B - LAN2. B's LAN2 worker dies and cannot be started
    again for a while (crash-looping, backing off up to 30 s; here its fork fails): A must stop
    routing toward domain 2 through B, which cannot reach it now, and route to it again once B's
    portal is back. B announced the domain all along: A kept forwarding into a router that
    dropped everything for it."""
    from tests.support.routerctl import routerctl
    from tests.support.routers import FAST_ROUTING, free_port, peer_xml
    as_nobody = f"    <uid>{NOBODY}</uid>\n    <gid>{NOBODY}</gid>\n" if os.geteuid() == 0 else ""
    port = free_port()
    a = routers.start(endpoint_xml("LAN1", 1, make_domain().config_path) + peer_xml("TO_B", connect=port),
                      daemon_extra=FAST_ROUTING)
    b = routers.start(peer_xml("TO_A", listen=port) + endpoint_xml("LAN2", 2, make_domain().config_path),
                      daemon_extra=as_nobody + FAST_ROUTING)
    a.wait_ready(), b.wait_ready()

    def domains_a_routes_to() -> list:
        return routerctl("-n", a.name, "--json", "topology").json()["domains"]
    wait_for(lambda: domains_a_routes_to() == [1, 2], 30, message="A routes to B's domain")
    workers = children(b.pid)
    limit = ForkLimit(b.pid)
    try:
        lan2 = b.worker_pids()["1"]
        limit.close()
        os.kill(lan2, signal.SIGKILL)
        wait_for(lambda: "cannot start a worker" in b.log(), 20, message="LAN2's worker not started again")
        wait_for(lambda: domains_a_routes_to() == [1], 20, message="A stops routing to domain 2")
        limit.open()
        wait_for(lambda: b.worker_pids()["1"] not in (0, lan2), 30, message="LAN2's worker started again")
        wait_for(lambda: domains_a_routes_to() == [1, 2], 20, message="A routes to domain 2 again")
        workers += children(b.pid)
    finally:
        limit.open()
        b.stop()
        kill_all(workers + children(b.pid))


def test_a_worker_killed_by_a_real_time_signal_is_restarted_not_fatal_to_the_router(runtime_dir, routers, make_domain):
    """A real-time signal's default action ends a process, as SIGKILL does (`kill -RTMIN+6`, a
    library's timer signal nothing handles); Python names none of SIGRTMIN+1..SIGRTMAX-1. The
    supervisor, describing that worker's end, died of the ValueError with every portal."""
    router = routers.start(two_lans(make_domain(), make_domain())).wait_ready()
    pids = router.worker_pids()
    os.kill(pids["1"], signal.SIGRTMIN + 6)
    wait_for(lambda: router.worker_pids()["1"] not in (0, pids["1"]) or router.tool.proc.poll() is not None, 30,
             message="LAN2's worker restarted")
    assert router.tool.proc.poll() is None, router.log()[-3000:]
    router.wait_for_log(f"exited with signal SIGRTMIN+6 ({signal.SIGRTMIN + 6})")
    assert router.worker_pids()["0"] == pids["0"]


def test_reloads_while_a_portal_is_down_do_not_announce_its_domain_and_a_fix_starts_it_at_once(
        runtime_dir, routers, make_domain):
    """A reload moves B's LAN2 onto an interface the host lacks: its worker cannot start, again and
    again, backing off. A reload meanwhile (its cost) must not announce domain 2 while no worker
    runs the portal (A would route into B for nothing); the reload that fixes it starts the portal
    at once, not after the rest of a backoff of up to 30 s."""
    from tests.support.routerctl import routerctl
    from tests.support.routers import FAST_ROUTING, free_port, peer_xml
    good, broken = make_domain(), make_domain("context resolver_multicast_interface nosuchif0")
    port = free_port()
    a = routers.start(endpoint_xml("LAN1", 1, make_domain().config_path) + peer_xml("TO_B", connect=port),
                      daemon_extra=FAST_ROUTING)
    b = routers.start(peer_xml("TO_A", listen=port) + endpoint_xml("LAN2", 2, good.config_path),
                      daemon_extra=FAST_ROUTING)
    a.wait_ready(), b.wait_ready()

    def domains_a_routes_to() -> list:
        return routerctl("-n", a.name, "--json", "topology").json()["domains"]

    def reload_b(old: str, new: str) -> None:
        reloads = b.log().count("UMR-1002-1")
        b.config.write_text(b.config.read_text().replace(old, new))
        b.signal(signal.SIGHUP)
        wait_for(lambda: b.log().count("UMR-1002-1") > reloads, 10, message="B's reload applied")
    wait_for(lambda: domains_a_routes_to() == [1, 2], 30, message="A routes to B's domain")
    reload_b(str(good.config_path), str(broken.config_path))
    # Backing off 12.8 s by its eighth failure: the reloads below come well within that wait.
    wait_for(lambda: "portal LAN2: worker pid" in b.log() and "restarting in 12.8 s" in b.log(), 60,
             message="LAN2 failing to start, backing off")
    wait_for(lambda: domains_a_routes_to() == [1], 20, message="A stops routing to domain 2")
    withdrawn = routerctl("-n", b.name, "--json", "topology").json()["signature"]
    reload_b("<cost>1</cost>\n      <lbm-config>", "<cost>2</cost>\n      <lbm-config>")
    assert routerctl("-n", b.name, "--json", "topology").json()["signature"] == withdrawn, "a cost edit announced it"
    failures = b.log().count("portal LAN2 cannot start")
    reload_b(str(broken.config_path), str(good.config_path))
    status = {p["name"]: p for p in routerctl("-n", b.name, "--json", "status").json()["portals"]}
    assert status["LAN2"]["state"] in ("starting", "up"), status       # not down for the rest of the 12.8 s
    wait_for(lambda: domains_a_routes_to() == [1, 2], 30, message="A routes to domain 2 again")
    assert b.log().count("portal LAN2 cannot start") == failures, "a start after the fix failed"


def test_a_reload_right_behind_the_stop_is_not_done(runtime_dir, routers, make_domain):
    """SIGTERM and then SIGHUP (logrotate's, an operator's) before the supervisor's next turn:
    it stops. It went on to reload first, starting the portals the edited file adds only to stop
    them at once, and telling systemd RELOADING after STOPPING."""
    router = routers.start(two_lans(make_domain(), make_domain())).wait_ready()
    router.config.write_text(router.config.read_text().replace(
        "  </portals>", endpoint_xml("LAN3", 3, make_domain().config_path) + "  </portals>"))
    router.signal(signal.SIGTERM)
    router.signal(signal.SIGHUP)
    assert router.tool.proc.wait(30) == 0, router.log()[-3000:]
    log = router.log()
    assert "router-stopping" in log or "UMR-1001-2" in log, log[-3000:]
    assert "UMR-1002-1" not in log and "LAN3" not in log, log[-3000:]
