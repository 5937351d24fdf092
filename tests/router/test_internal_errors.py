"""A callback of a portal's worker that raises is logged and counted: routerctl stats shows it as
the portal's internal_errors (and so do /metrics and the portal page), and the worker goes on,
its timers too.

The fault is injected into the real router at start (a sitecustomize module on its PYTHONPATH):
one run of a periodic piece of work raises."""
from __future__ import annotations

import signal

import pytest

from tests.support.peer_links import routerctl
from tests.router.test_supervisor_edges import two_lans
from tests.support.processes import wait_for
from tests.support.routers import RouterRunner

pytestmark = pytest.mark.integration

_FAIL_ONCE = '''
import router.portals.endpoint as endpoint

_refresh = endpoint.EndpointPortal.refresh_queue_counters
_failed = set()


def refresh_queue_counters(self):
    if self.name not in _failed:
        _failed.add(self.name)
        raise RuntimeError("one refresh of the queue counters fails")
    return _refresh(self)


endpoint.EndpointPortal.refresh_queue_counters = refresh_queue_counters
'''


def test_a_failing_callback_in_a_worker_shows_as_the_portals_internal_errors(runtime_dir, make_domain, tmp_path):
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(_FAIL_ONCE)
    # Not the `routers` fixture: it fails a test whose router printed a traceback, as this one must.
    runner = RouterRunner(tmp_path)
    try:
        router = runner.start(two_lans(make_domain(), make_domain()), env={"PYTHONPATH": str(hooks)}).wait_ready()

        def internal_errors() -> dict[str, int]:
            portals = routerctl(router, "stats")["portals"]
            return {name: portals[name]["counters"]["internal_errors"] for name in ("LAN1", "LAN2")}
        wait_for(lambda: internal_errors() == {"LAN1": 1, "LAN2": 1}, 10, interval=0.2,
                 message="each portal's failing callback counted")
        router.wait_for_log("one refresh of the queue counters fails")
        status = {p["name"]: p for p in routerctl(router, "status")["portals"]}
        assert status["LAN1"]["state"] == status["LAN2"]["state"] == "up"
        assert status["LAN1"]["restarts"] == status["LAN2"]["restarts"] == 0
        assert router.stop() == 0
    finally:
        runner.cleanup()


_FAIL_FIRST_INTEREST_CHECK = '''
import router.portals.interest as interest

_tick = interest.DomainInterest.tick
_failed = []


def tick(self, now, allow=None):
    if not _failed and self.symbols(0):         # the first check once a topic is wanted
        _failed.append(now)
        raise RuntimeError("one interest check fails")
    return _tick(self, now, allow)


interest.DomainInterest.tick = tick
'''


def test_interest_of_a_receiver_gone_silently_is_purged_after_a_failing_check(runtime_dir, tools, make_domain,
                                                                              tmp_path):
    """The endpoint's interest check (use queries, then the purge of interest nobody confirms)
    fails once while a receiver wants a topic; the receiver then dies without a word. Its
    interest is still purged: the checks go on at their interval after the one that failed."""
    from tests.router.test_endpoints import start_router
    from tests.support.routers import FAST_PURGE
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(_FAIL_FIRST_INTEREST_CHECK)
    lan1, lan2 = make_domain(), make_domain()
    runner = RouterRunner(tmp_path)
    runner.start = _with_env(runner.start, {"PYTHONPATH": str(hooks)})
    try:
        router = start_router(runner, [lan1, lan2], after_config=FAST_PURGE)
        receiver = tools.umrcv("-c", lan2.config_path, "--json", "--timeout", 60, "silent.departure")
        wait_for(lambda: router.counters()[1]["internal_errors"] >= 1, 20, message="the failing interest check")
        assert router.counters()[1]["local_interest_topics"] == 1
        receiver.stop(signal.SIGKILL)           # no leave-topic record: only use queries can tell
        wait_for(lambda: router.counters()[1]["local_interest_topics"] == 0, 15, message="interest purged")
        assert router.counters()[1]["internal_errors"] == 1
        assert router.stop() == 0
    finally:
        runner.cleanup()


def _with_env(start, env: dict):
    return lambda *args, **kwargs: start(*args, **{**kwargs, "env": env})
