"""Adaptive worker scheduling on a running router: workers batch while they carry a stream and
wake at once again when it stops; `routerctl status` says which (router.worker.scheduling)."""
import os

import pytest

from router.worker.scheduling import LATENCY_SLICE_NS, slice_of
from tests.support.processes import wait_for
from tests.support.routerctl import routerctl
from tests.support.routers import endpoint_xml

pytestmark = pytest.mark.integration


def policies(router) -> dict[str, str]:
    status = routerctl("-n", router.name, "--json", "status").json()
    return {portal["name"]: portal["scheduling"] for portal in status["portals"]}


def slices(router) -> dict[str, float | None]:
    status = routerctl("-n", router.name, "--json", "status").json()
    return {portal["name"]: portal["scheduling_slice_us"] for portal in status["portals"]}


@pytest.mark.parametrize("mode", ["adaptive", "normal"])
def test_workers_batch_only_while_they_carry_a_stream(routers, tools, make_domain, mode):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path),
                           daemon_extra=f"    <worker-scheduling>{mode}</worker-scheduling>\n").wait_ready()
    assert policies(router) == {"LAN1": "normal", "LAN2": "normal"}
    # Workers on the normal policy ask for the shortest slice, so that their wake-ups preempt
    # (Linux 6.12 and later say so; an older kernel reports no slice).
    idle_slice = None if slice_of(os.getpid()) is None else LATENCY_SLICE_NS / 1000
    assert slices(router) == {"LAN1": idle_slice, "LAN2": idle_slice}
    # 50,000 messages a second, well above the switch-over, for at most 8 s.
    count = 400_000
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "-C", count, "--timeout", 60, "stream")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-P", 50_000, "--start-on-stdin", "stream")
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    seen = set()

    def stream_over() -> bool:
        seen.update(policies(router).items())
        return source.proc.poll() is not None
    wait_for(stream_over, 30, interval=0.2, message="the source to finish")
    batching = {name for name, policy in seen if policy == "batch"}
    # The ingress worker (LAN1) reads the stream, the egress worker (LAN2) sends it.
    assert batching == ({"LAN1", "LAN2"} if mode == "adaptive" else set()), seen
    got = receiver.result(60)
    assert source.result(60)["sent"] == count
    assert (got["received"], got["gaps"], got["duplicates"]) == (count, 0, 0), got
    # Stream over: both wake at once again (normal never left it).
    wait_for(lambda: policies(router) == {"LAN1": "normal", "LAN2": "normal"}, 5, interval=0.2,
             message="both workers back to the normal policy once the stream stopped")
    assert slices(router) == {"LAN1": idle_slice, "LAN2": idle_slice}
