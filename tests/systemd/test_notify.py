"""The Type=notify contract without systemd: a datagram socket stands in for $NOTIFY_SOCKET."""
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.support.routerctl import routerctl, two_lan_router
from tests.support.routers import write_config

pytestmark = pytest.mark.integration


class NotifySocket:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.messages: list[set[str]] = []

    def wait_for(self, state: str, timeout: float = 30.0) -> set[str]:
        """The next message carrying `state` (e.g. "READY=1"); earlier ones are kept in `messages`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                fields = set(self.sock.recv(4096).decode().split("\n"))
            except TimeoutError:
                break
            self.messages.append(fields)
            if state in fields:
                return fields
        raise AssertionError(f"no {state} within {timeout} s; got {self.messages}")


def test_ready_watchdog_reload_and_stopping(runtime_dir, routers, make_domain, tmp_path, monkeypatch):
    notify = NotifySocket(tmp_path / "notify.sock")
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify.sock"))
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")
    router = two_lan_router(routers, make_domain(), make_domain())
    ready = notify.wait_for("READY=1")
    assert any(field.startswith("STATUS=routing") for field in ready)
    notify.wait_for("WATCHDOG=1", timeout=5)
    notify.wait_for("WATCHDOG=1", timeout=5)

    assert routerctl("reload").code == 0
    reloading = notify.wait_for("RELOADING=1", timeout=10)
    assert any(field.startswith("MONOTONIC_USEC=") for field in reloading)
    notify.wait_for("READY=1", timeout=10)
    router.signal(signal.SIGHUP)                           # systemd's ExecReload: the same path
    notify.wait_for("RELOADING=1", timeout=10)
    notify.wait_for("READY=1", timeout=10)

    assert routerctl("stop").code == 0
    notify.wait_for("STOPPING=1", timeout=10)
    assert router.tool.proc.wait(30) == 0


def test_an_invalid_configuration_exits_2_so_systemd_does_not_restart(tmp_path):
    path = write_config(tmp_path, "broken", "    <endpoint><name>x</name></endpoint>\n")
    done = subprocess.run([sys.executable, "-m", "router.cli.tnwgd", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert "broken.xml" in done.stderr
