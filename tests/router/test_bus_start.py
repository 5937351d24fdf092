"""A router that starts loses nothing on its control bus: the supervisor sends its workers nothing
before they are on the bus to get it, so `routerctl status` counts no message as unreachable."""
import pytest

from tests.support.routerctl import routerctl, two_lan_router

pytestmark = pytest.mark.integration


def test_a_router_that_starts_sends_its_workers_nothing_they_cannot_get(runtime_dir, routers, make_domain):
    # Each endpoint portal added announces this router's routes at once, before its worker runs.
    two_lan_router(routers, make_domain(), make_domain())
    bus = routerctl("--json", "status").json()["bus"]
    assert (bus["unreachable"], bus["outbox_dropped"]) == (0, 0)
