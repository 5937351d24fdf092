"""Where the admin socket lives: mode 0600 by default, tcp:// on loopback when configured, and a
second router with the same name does not steal the first one's socket."""
import os
import stat
import threading

import pytest
import zmq

from tests.support.processes import wait_for
from tests.support.routerctl import routerctl
from tests.support.routers import endpoint_xml, free_port

pytestmark = pytest.mark.integration


def portals(lan1, lan2) -> str:
    return endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path)


def test_tcp_admin_endpoint_on_loopback(runtime_dir, routers, make_domain):
    port = free_port()
    router = routers.start(portals(make_domain(), make_domain()),
                           daemon_extra=f"    <admin>tcp://127.0.0.1:{port}</admin>\n").wait_ready()
    status = routerctl("-s", f"tcp://127.0.0.1:{port}", "--json", "status").json()
    assert status["pid"] == router.pid
    assert not any(name.endswith(".admin") for name in os.listdir(runtime_dir)), "no ipc socket besides tcp://"


def test_socket_is_private_and_a_namesake_router_does_not_take_it(runtime_dir, routers, make_domain):
    first = routers.start(portals(make_domain(), make_domain()), name="twin").wait_ready()
    path = os.path.join(runtime_dir, "twin.admin")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    second = routers.start(portals(make_domain(), make_domain()), name="twin").wait_ready()
    wait_for(lambda: "in use by another router" in second.log(), 10, message="the second router's complaint")
    assert routerctl("-n", "twin", "--json", "status").json()["pid"] == first.pid
    second.stop()
    assert os.path.exists(path), "the second router must not remove the first one's socket"
    assert routerctl("-n", "twin", "--json", "status").json()["pid"] == first.pid


def test_an_endpoint_answering_something_else_is_an_error_not_a_traceback(runtime_dir):
    """routerctl -s pointed at a ZeroMQ socket that is not a router's: exit 1 saying so."""
    context = zmq.Context.instance()
    impostor = context.socket(zmq.ROUTER)
    impostor.setsockopt(zmq.LINGER, 0)
    endpoint = f"ipc://{runtime_dir}/impostor.admin"
    impostor.bind(endpoint)
    done = threading.Event()

    def answer_garbage() -> None:
        while not done.is_set():
            if impostor.poll(100):
                identity, _ = impostor.recv_multipart()
                impostor.send_multipart([identity, b"\xc1 not msgpack"])
    answering = threading.Thread(target=answer_garbage, daemon=True)
    answering.start()
    try:
        result = routerctl("-s", endpoint, "status")
    finally:
        done.set()
        answering.join(5)
        impostor.close()
    assert result.code == 1, result.explain()
    assert "not a router's admin reply" in result.stderr and "Traceback" not in result.stderr, result.explain()
