"""<daemon><cpu-latency-limit>: the router holds a PM QoS request on /dev/cpu_dma_latency while it
runs (opened before it gives root up), reports it, and the kernel's limit is back when it stops;
a device it cannot open is said, and the router runs without it."""
from __future__ import annotations

import logging

import pytest

from router.cpu_latency import CpuLatencyLimit, effective_limit
from tests.support.routerctl import routerctl, two_lan_router

pytestmark = pytest.mark.integration

NOBODY = 65534


def test_a_router_holds_its_limit_while_it_runs_even_after_giving_root_up(runtime_dir, routers, make_domain):
    before = effective_limit()
    assert before is not None and before > 0, "this test needs /dev/cpu_dma_latency with no limit held"
    router = two_lan_router(routers, make_domain(), make_domain(),
                            daemon_extra=f"    <uid>{NOBODY}</uid>\n    <gid>{NOBODY}</gid>\n"
                                         "    <cpu-latency-limit>0</cpu-latency-limit>\n")
    assert effective_limit() == 0
    status = routerctl("--json", "status").json()
    assert (status["cpu_latency_limit_us"], status["cpu_latency_limit_asked_us"]) == (0, 0)
    assert "CPU wake-ups limited to 0 µs while the router runs" in routerctl("status").stdout
    assert "holding a CPU wake-up latency limit of 0 µs" in router.log()
    assert router.stop() == 0, router.log()
    assert effective_limit() == before


def test_without_the_element_no_limit_is_held(runtime_dir, routers, make_domain):
    two_lan_router(routers, make_domain(), make_domain())
    status = routerctl("--json", "status").json()
    assert (status["cpu_latency_limit_us"], status["cpu_latency_limit_asked_us"]) == (None, None)


def test_a_device_that_cannot_be_opened_is_said_and_nothing_is_held(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="router.cpu_latency"):
        assert CpuLatencyLimit.hold(0, tmp_path / "no-such-device") is None
    assert "<cpu-latency-limit> 0 µs not applied: cannot open" in caplog.text
    assert "No such file or directory" in caplog.text

