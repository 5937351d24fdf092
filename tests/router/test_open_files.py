"""A router started with a soft open-files limit of 1024 (what systemd gives a service, with a high
hard limit for the daemon to raise the soft one itself) raises it to the hard limit, for the
supervisor and for every worker: a portal's TCP sessions are not capped at 1024 descriptors."""
from __future__ import annotations

import re
import resource
from pathlib import Path

import pytest

from tests.router.test_supervisor_edges import two_lans

pytestmark = pytest.mark.integration


def open_files_limits(pid: int) -> tuple[int, int]:
    line = re.search(r"^Max open files\s+(\d+)\s+(\d+)", Path(f"/proc/{pid}/limits").read_text(), re.M)
    return int(line.group(1)), int(line.group(2))


def test_the_router_and_its_workers_may_open_as_many_files_as_the_hard_limit_allows(runtime_dir, routers,
                                                                                    make_domain):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard > 1024, f"the hard open-files limit here is {hard}: nothing to raise the soft one to"
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))       # what the router inherits
    try:
        router = routers.start(two_lans(make_domain(), make_domain()))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    router.wait_ready()
    workers = router.worker_pids()
    assert len(workers) == 2
    for pid in [router.pid, *workers.values()]:
        assert open_files_limits(pid) == (hard, hard), f"pid {pid}: {open_files_limits(pid)}"
    router.wait_for_log("open files limit raised from 1024")
    assert router.stop() == 0
