"""What a router portal's request port refuses shows in the portal's counters: a response larger
than a request port takes, and a stream that breaks the framing (each closes its connection)."""
import re
import socket

import pytest

from router.um.request_port import MAX_PARTIAL_BYTES
from router.um.requests import message_frames
from tests.support.processes import wait_for
from tests.support.routerctl import routerctl, two_lan_router

pytestmark = pytest.mark.integration


def request_port_of(portal: str) -> tuple[str, int]:
    found = []

    def opened() -> bool:
        address = routerctl("--json", "topics").json()["portals"][portal]["unicast_address"]
        found[:] = [address] if address else []
        return bool(found)
    wait_for(opened, 20, message=f"{portal}'s request port open")
    ip, port = found[0].rsplit(":", 1)
    return ip, int(port)


def refused(address: tuple[str, int], stream: bytes) -> None:
    with socket.create_connection(address, timeout=10) as client:
        client.sendall(stream)
        assert client.recv(10) == b"", "the connection is closed"


def test_responses_a_portals_request_port_refuses_are_counted(runtime_dir, routers, make_domain):
    router = two_lan_router(routers, make_domain(), make_domain())
    address = request_port_of("LAN1")
    headers, piece = next(message_frames(5, 0, bytes(MAX_PARTIAL_BYTES + 1), 65535))
    refused(address, headers + bytes(piece))
    refused(address, b"\x00\x00\x00\x02")                 # a frame length below the 4-byte minimum
    wait_for(lambda: (router.counters()[0]["responses_too_large"], router.counters()[0]["responses_malformed"])
             == (1, 1), 10, message="both refusals counted")
    assert (router.counters()[1]["responses_too_large"], router.counters()[1]["responses_malformed"]) == (0, 0)
    shown = routerctl("--json", "stats", "LAN1").json()["portals"]["LAN1"]["counters"]
    assert (shown["responses_too_large"], shown["responses_malformed"]) == (1, 1), shown
    text = routerctl("stats", "LAN1").stdout
    assert re.search(r"^responses_too_large +1$", text, re.MULTILINE), text
