"""<daemon><uid>/<gid>: a router started as root runs as that user and group, from its supervisor
to its workers and everything they create; routerctl still finds it; what it cannot run with is a
clear error at start."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest

from tests.support.routerctl import cross_traffic, routerctl
from tests.support.processes import wait_for
from tests.support.routers import endpoint_xml, free_port, write_config

pytestmark = pytest.mark.integration

NOBODY = 65534
AS_NOBODY = f"    <uid>{NOBODY}</uid>\n    <gid>{NOBODY}</gid>\n"


def ids(pid: int) -> tuple[set[int], set[int]]:
    """(real, effective, saved and filesystem uids), the same for gids, of a process."""
    lines = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {int(v) for v in lines["Uid"].split()}, {int(v) for v in lines["Gid"].split()}


@pytest.fixture
def shared_dir():
    """A directory every user may write in (tmp_path is root's alone)."""
    directory = Path(tempfile.mkdtemp(prefix="umr-id-", dir="/tmp"))
    directory.chmod(0o777)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_a_router_started_as_root_runs_as_the_configured_user(runtime_dir, routers, tools, make_domain, shared_dir):
    lan1, lan2 = make_domain(), make_domain()
    port = free_port()
    stats = shared_dir / "stats"
    router = routers.start(
        endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path),
        daemon_extra=AS_NOBODY + f'    <monitor interval="1"><format-module module="parquet" options="dir={stats}"/>'
                                 f"</monitor>\n    <web-monitor>127.0.0.1:{port}</web-monitor>\n").wait_ready()
    if os.geteuid() != 0:           # not root: it keeps its identity, and says so
        router.wait_for_log("for a router started as root")
        assert ids(router.pid) == ({os.geteuid()}, {os.getegid()})
        cross_traffic(tools, lan1, lan2, "identity.topic", 1000, 64)
        return
    router.wait_for_log(f"running as uid {NOBODY} gid {NOBODY}")
    workers = router.worker_pids()
    assert len(workers) == 2
    for pid in (router.pid, *workers.values()):
        assert ids(pid) == ({NOBODY}, {NOBODY}), pid
    segments = router.segments()
    assert segments and {os.stat(s).st_uid for s in segments} == {NOBODY}
    assert os.stat(runtime_dir).st_uid == NOBODY            # its admin and bus sockets are there

    cross_traffic(tools, lan1, lan2, "identity.topic", 2000, 64)
    status = routerctl("--json", "status").json()          # root's routerctl finds the socket
    assert {p["name"] for p in status["portals"]} == {"LAN1", "LAN2"}

    # What runs later runs as that user too: the web monitor's pages, a worker's restart.
    for path in ("/", "/portal/LAN2", "/metrics"):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            assert response.status == 200, path
    os.kill(workers["1"], signal.SIGKILL)
    wait_for(lambda: router.log().count("portal LAN2: endpoint portal started") == 2, 30, message="LAN2 restarted")
    assert ids(router.worker_pids()["1"]) == ({NOBODY}, {NOBODY})
    cross_traffic(tools, lan1, lan2, "identity.again", 1000, 64)

    assert router.stop() == 0
    assert router.segments() == [], "the user unlinks what it created"
    files = sorted(stats.rglob("part-*.parquet"))                 # the statistics sink wrote as that user
    assert files and {f.stat().st_uid for f in files} == {NOBODY}, sorted(stats.rglob("*"))
    assert not [p for p in Path(runtime_dir).iterdir() if p.name.startswith(router.name)], \
        sorted(os.listdir(runtime_dir))


def test_a_log_directory_the_user_cannot_write_stops_a_rolling_log_at_start(runtime_dir, make_domain):
    """The log file rolls (renamed, a new one started): its directory must be the user's to write.
    Started as another user than root, the router switches nothing, so it starts."""
    lan1, lan2 = make_domain(), make_domain()
    top = Path(tempfile.mkdtemp(prefix="umr-id-", dir="/tmp"))      # reachable by every user, unlike tmp_path
    try:
        top.chmod(0o755)
        logs = top / "logs"
        logs.mkdir(mode=0o755)                                        # root's, not writable by nobody
        config = write_config(top, "idlog", endpoint_xml("LAN1", 1, lan1.config_path)
                              + endpoint_xml("LAN2", 2, lan2.config_path), daemon_extra=AS_NOBODY)
        # Its own <log>, in place of the console one write_config puts first.
        config.write_text(config.read_text().replace(
            '<log type="console"/>', f'<log type="file" frequency="daily">{logs / "tnwgd.log"}</log>'))
        if os.geteuid() != 0:
            router = subprocess.Popen([sys.executable, "-m", "router.cli.tnwgd", str(config)],
                                      env={**os.environ, "RUNTIME_DIRECTORY": runtime_dir})
            try:
                wait_for(lambda: "portals are up" in (logs / "tnwgd.log").read_text(), 30, message="it started")
                assert "for a router started as root" in (logs / "tnwgd.log").read_text()
            finally:
                router.terminate()
                router.wait(30)
            return
        done = subprocess.run([sys.executable, "-m", "router.cli.tnwgd", str(config)], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "RUNTIME_DIRECTORY": runtime_dir})
        assert done.returncode == 1, done.stderr
        assert f"its directory {logs} is not writable by uid {NOBODY} gid {NOBODY}" in done.stderr, done.stderr
    finally:
        shutil.rmtree(top, ignore_errors=True)
