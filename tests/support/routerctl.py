"""routerctl for tests: run the real command line, and give each test a private runtime directory.

A private `$RUNTIME_DIRECTORY` (short: ipc paths are limited to 107 bytes) keeps a test's router
and its routerctl calls away from any other router on the machine, and lets `routerctl` without
-n find "the one running router" as an operator would.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import pytest

from tests.support.processes import ROOT


@dataclass
class Result:
    argv: list[str]
    code: int
    stdout: str
    stderr: str
    seconds: float

    def json(self):
        assert self.code == 0, self.explain()
        return json.loads(self.stdout)

    def explain(self) -> str:
        return f"{' '.join(self.argv)} -> exit {self.code}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


def routerctl(*args, timeout: float = 30.0) -> Result:
    argv = [sys.executable, "-m", "router.cli.routerctl", *map(str, args)]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    return Result(argv, done.returncode, done.stdout, done.stderr, time.monotonic() - started)


@pytest.fixture
def runtime_dir(monkeypatch):
    """A private runtime directory for the routers and routerctl calls of one test."""
    directory = tempfile.mkdtemp(prefix="umr-", dir="/tmp")
    monkeypatch.setenv("RUNTIME_DIRECTORY", directory)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def two_lan_router(routers, lan1, lan2, costs=(1, 1), daemon_extra: str = ""):
    """A router with endpoint portals LAN1 (domain 1) and LAN2 (domain 2), ready to route."""
    from tests.support.routers import endpoint_xml
    portals = endpoint_xml("LAN1", 1, lan1.config_path, costs[0]) + endpoint_xml("LAN2", 2, lan2.config_path, costs[1])
    return routers.start(portals, daemon_extra=daemon_extra).wait_ready()


def cross_traffic(tools, source_lan, receiver_lan, topic: str, count: int, length: int) -> dict:
    """`count` messages from a source in one LAN to a receiver in the other; the receiver's summary."""
    receiver = tools.umrcv("-c", receiver_lan.config_path, "--json", "-C", count, "--timeout", 120, topic)
    source = tools.umsrc("-c", source_lan.config_path, "--json", "-M", count, "-l", length, "--start-on-stdin", topic)
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    assert source.result(120)["sent"] == count
    got = receiver.result(120)
    assert (got["received"], got["gaps"], got["duplicates"]) == (count, 0, 0), got
    return got
