"""<admin>: an endpoint the admin socket can be bound at and routerctl can reach, or an error at
the element (a router whose admin socket cannot be bound runs without one: no routerctl, no reload
by command)."""
from __future__ import annotations

import pytest
import zmq

from router.config import ConfigError, load_gateway_config
from tests.config.samples import TWO_LANS


@pytest.mark.parametrize("endpoint, words", [
    ("tcp://127.0.0.1:15a00", "the port must be 1..65535, got '15a00'"),
    ("tcp://127.0.0.1:99999", "the port must be 1..65535, got '99999'"),
    ("tcp://127.0.0.1:0", "the port must be 1..65535, got '0'"),
    ("tcp://127.0.0.1:" + "9" * 5000, "the port must be 1..65535"),
    ("tcp://127.0.0.1:*", "the port must be 1..65535, got '*'"),
    ("tcp://127.0.0.1", "expected tcp://127.0.0.1:PORT"),
    ("tcp://127.0.0.1.5:15400", "must be on loopback"),
    ("tcp://[::1]:15400", "must be on loopback"),
    ("tcp://0.0.0.0:15400", "must be on loopback"),
])
def test_an_admin_endpoint_that_cannot_be_bound_or_reached_is_refused_at_its_element(write_gateway, endpoint, words):
    path = write_gateway(TWO_LANS, daemon=f"<admin>{endpoint}</admin>")
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    err = caught.value
    assert (err.path, err.line, err.element) == (str(path), 2, "admin")
    assert words in err.reason, err.reason


@pytest.mark.parametrize("endpoint", ["tcp://127.0.0.1:15400", "tcp://127.0.0.2:15400", "tcp://localhost:15400"])
def test_a_loopback_admin_endpoint_is_accepted_and_binds(write_gateway, endpoint):
    path = write_gateway(TWO_LANS, daemon=f"<admin>{endpoint}</admin>")
    admin = load_gateway_config(path).daemon.admin
    assert admin == endpoint
    context = zmq.Context()
    socket = context.socket(zmq.REP)
    try:
        socket.bind(admin.replace(":15400", ":0"))
        assert socket.getsockopt(zmq.LAST_ENDPOINT).decode().startswith("tcp://127.0.0.")
    finally:
        socket.close(0)
        context.term()
