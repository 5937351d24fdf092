"""A router whose /dev/shm is too small for its rings (a container's is 64 MiB unless given
--shm-size): each test runs the router in a mount namespace of its own with a small tmpfs on
/dev/shm. A segment's pages were allocated only when first written, so such a router started and
reported its portals up; its workers then died of SIGBUS under traffic, over and over, losing
messages each time. It must say so up front, and a reload that would overfill it must be refused."""
from __future__ import annotations

import mmap
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from router.ipc import layout
from router.monitor.counters import SEGMENT_BYTES
from router.worker.datapath import RING_CAPACITY
from tests.support.processes import ROOT, wait_for
from tests.support.routers import endpoint_xml, write_config

pytestmark = pytest.mark.integration


def _pages(size: int) -> int:
    return -(-size // mmap.PAGESIZE) * mmap.PAGESIZE


PORTAL_BYTES = _pages(layout.segment_size(RING_CAPACITY)) + _pages(SEGMENT_BYTES)


class ConfinedRouter:
    """tnwgd with a /dev/shm of `shm_bytes` of its own; the namespace (and its tmpfs) goes with it."""

    def __init__(self, config: Path, shm_bytes: int):
        argv = ["unshare", "--mount", "--", "sh", "-c",
                'mount -t tmpfs -o size="$0" tmpfs /dev/shm && exec "$1" -m router.cli.tnwgd "$2"',
                str(shm_bytes), sys.executable, str(config)]
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        self._lines: list[str] = []
        threading.Thread(target=lambda: self._lines.extend(self.proc.stderr), daemon=True).start()

    def log(self) -> str:
        return "".join(list(self._lines))

    def segments(self) -> list[str]:
        """The segments in the router's own /dev/shm, seen through its root."""
        try:
            return sorted(os.listdir(f"/proc/{self.proc.pid}/root/dev/shm"))
        except OSError:
            return []

    def workers(self) -> list[int]:
        try:
            return [int(p) for p in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()]
        except OSError:
            return []

    def close(self) -> None:
        workers = self.workers()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in workers:          # the namespace's tmpfs is freed once the last of them is gone
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def confined(tmp_path):
    started: list[ConfinedRouter] = []

    def start(portals_xml: str, shm_bytes: int) -> ConfinedRouter:
        name = f"shm{os.getpid() % 10000}x{len(started)}"
        router = ConfinedRouter(write_config(tmp_path, name, portals_xml), shm_bytes)
        started.append(router)
        return router
    yield start
    for router in started:
        router.close()


def test_a_router_whose_dev_shm_cannot_hold_its_rings_refuses_to_start_and_says_how_much_it_needs(
        runtime_dir, make_domain, confined):
    """Room for one portal's ring, not two: exit 3 with one line naming the segment, what it needs,
    what is free and what to do; not 'portals are up' and a SIGBUS at the first burst."""
    router = confined(endpoint_xml("LAN1", 1, make_domain().config_path)
                      + endpoint_xml("LAN2", 2, make_domain().config_path), PORTAL_BYTES + (1 << 20))
    wait_for(lambda: "portals are up" in router.log() or router.proc.poll() is not None, 60,
             message="the router up or gone")
    log = router.log()
    assert router.proc.poll() is not None, "the router came up without shared memory for its rings:\n" + log[-3000:]
    assert router.proc.returncode == 3, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert f"2 portals need {2 * PORTAL_BYTES} bytes of shared memory" in log, log[-3000:]
    assert "cannot reserve" in log and ".ring1" in log and "bytes free" in log, log[-3000:]
    assert "--shm-size" in log, log[-3000:]


def test_a_reload_adding_a_portal_dev_shm_cannot_hold_is_refused_and_the_router_routes_on(
        runtime_dir, make_domain, confined, tools):
    """Room for two portals and a half: a third one added by a reload is refused with the reason,
    nothing changes, and the two running portals go on routing."""
    from tests.support.routerctl import cross_traffic, routerctl
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    two = endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path)
    router = confined(two, 2 * PORTAL_BYTES + PORTAL_BYTES // 2)
    wait_for(lambda: "portals are up" in router.log() or router.proc.poll() is not None, 60,
             message="the router up")
    assert "portals are up" in router.log(), router.log()[-3000:]
    pids = router.workers()
    segments = router.segments()
    config = next(Path(arg) for arg in router.proc.args if arg.endswith(".xml"))
    config.write_text(config.read_text().replace(
        "  </portals>", endpoint_xml("LAN3", 3, lan3.config_path) + "  </portals>"))
    reload = routerctl("reload")
    assert reload.code != 0, reload.explain()
    assert "1 portals need" in reload.stdout + reload.stderr, reload.explain()
    wait_for(lambda: "configuration not reloaded" in router.log(), 30, message="the reload refused")
    log = router.log()
    assert "bytes free" in log and "--shm-size" in log, log[-3000:]
    assert router.proc.poll() is None, log[-3000:]
    assert router.segments() == segments and sorted(router.workers()) == sorted(pids), log[-3000:]
    status = {p["name"]: p["state"] for p in routerctl("--json", "status").json()["portals"]}
    assert status == {"LAN1": "up", "LAN2": "up"}, status
    cross_traffic(tools, lan1, lan2, "shm.reload.refused", 3000, 3000)   # more than a ring: every page in use
    assert "SIGBUS" not in router.log() and "Traceback" not in router.log(), router.log()[-3000:]
    router.proc.send_signal(signal.SIGTERM)
    assert router.proc.wait(30) == 0, router.log()[-3000:]


def test_a_portal_whose_segments_cannot_be_made_after_the_reload_checked_is_left_out_for_the_next_reload(
        runtime_dir, make_domain, tmp_path, monkeypatch):
    """Another program may take /dev/shm's room between the reload's check and the new portal's
    segments: the reload goes on without that portal (said, no traceback, nothing of it left in
    /dev/shm, its ring slot free again), and the next reload adds it."""
    from router.config import diff_configs, load_gateway_config
    from router.ipc.shm import SharedMemoryFull
    from router.supervisor import Supervisor
    lan1, lan2 = endpoint_xml("LAN1", 1, make_domain().config_path), endpoint_xml("LAN2", 2, make_domain().config_path)
    config = write_config(tmp_path, f"race{os.getpid() % 10000}", lan1)
    supervisor = Supervisor(str(config))
    try:
        supervisor._add_worker(supervisor.config.portal("LAN1"))      # its segments; no process needed
        free_indexes = list(supervisor.free_indexes)
        config.write_text(config.read_text().replace("  </portals>", lan2 + "  </portals>"))

        def full(index: int) -> None:
            raise SharedMemoryFull(f"/umr.x.1.ring{index}", 8 << 20, 4096)
        monkeypatch.setattr(supervisor.rings, "create", full)
        summary = supervisor.reload()
        assert summary["ok"] and summary["added"] == [] and summary["not_added"] == ["LAN2"], summary
        assert list(supervisor.workers) == ["LAN1"] and supervisor.free_indexes == free_indexes
        assert [portal.name for portal in supervisor.config.portals] == ["LAN1"]
        prefix = f"umr.{supervisor.name}.{os.getpid()}."
        assert sorted(name for name in os.listdir("/dev/shm") if name.startswith(prefix)) == \
            [prefix + "counters0", prefix + "ring0"]
        assert diff_configs(supervisor.config, load_gateway_config(str(config))).added == ["LAN2"]
    finally:
        supervisor._shutdown()
