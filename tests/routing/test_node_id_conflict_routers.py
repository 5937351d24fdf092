"""Two real routers with one node id, a third between them: each says so, names the other
router and the portal it heard it on, counts it, and `routerctl topology` lists it."""
import json
import subprocess
import sys

import pytest

from tests.support.processes import Tool, wait_for
from tests.support.routers import FAST_ROUTING, Router, free_port, peer_xml, write_config

pytestmark = pytest.mark.integration

CLASHING_NODE_ID = 0x5EED_0001


class PinnedRouter(Router):
    """A router whose node id is CLASHING_NODE_ID."""

    def __init__(self, config, name: str):
        self.config, self.name = config, name
        self.tool = Tool("tests.routing.pinned_node_id_tnwgd", [str(config)],
                         {"PINNED_NODE_ID": str(CLASHING_NODE_ID)})


def start_pinned(routers, portals: str, name: str) -> Router:
    router = PinnedRouter(write_config(routers.directory, name, portals, FAST_ROUTING), name)
    routers.routers.append(router)      # stopped and cleaned up with the test's others
    return router


def routerctl(router, *args, as_json: bool = True):
    out = subprocess.run([sys.executable, "-m", "router.cli.routerctl", "-n", router.name,
                          *(["--json"] if as_json else []), *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if as_json else out.stdout


def node_id_conflicts(router) -> list[str]:
    return [f["message"] for f in routerctl(router, "topology")["forbidden"]
            if f["kind"] == "two-routers-with-one-node-id"]


def test_two_routers_with_one_node_id_each_report_the_other(routers):
    west_port, east_port = free_port(), free_port()
    west = start_pinned(routers, peer_xml("TO_HUB", connect=west_port), "nidwest")
    hub = routers.start(peer_xml("TO_WEST", listen=west_port) + peer_xml("TO_EAST", listen=east_port),
                        FAST_ROUTING, name="nidhub")
    east = start_pinned(routers, peer_xml("TO_HUB", connect=east_port), "nideast")
    for router in (west, hub, east):
        router.wait_ready()
    assert routerctl(west, "status")["node_id"] == routerctl(east, "status")["node_id"] == CLASHING_NODE_ID

    for router, other in ((west, "nideast"), (east, "nidwest")):
        wait_for(lambda: node_id_conflicts(router), 20, message=f"{router.name} reports the clash")
        [message] = node_id_conflicts(router)
        assert router.name in message and other in message and "TO_HUB" in message, message
        assert routerctl(router, "topology")["routing_counters"]["route_info_node_id_conflicts"] > 0
        router.wait_for_log(message, 10)
        assert message.removeprefix("forbidden topology: ") in routerctl(router, "topology", as_json=False)
    wait_for(lambda: node_id_conflicts(hub), 20, message="the router between them reports it")
    [message] = node_id_conflicts(hub)
    assert "nidwest" in message and "nideast" in message, message
