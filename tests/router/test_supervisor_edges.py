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
        assert "portals are up" in router.log()
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
