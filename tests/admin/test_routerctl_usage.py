"""routerctl's usage errors: what it cannot act on is exit 2 with the argument named, never a
traceback, nor exit 1 as if a router had not answered."""
from __future__ import annotations

from tests.support.routerctl import routerctl


def test_a_timeout_routerctl_cannot_wait_for_is_a_usage_error(runtime_dir):
    for value in ("inf", "nan", "-inf", "1e12"):
        result = routerctl("--timeout", value, "-s", "tcp://127.0.0.1:9", "status")
        assert result.code == 2, result.explain()
        assert "Traceback" not in result.stderr and "--timeout" in result.stderr, result.explain()
        after = routerctl("-s", "tcp://127.0.0.1:9", "status", "--timeout", value)
        assert after.code == 2 and "Traceback" not in after.stderr, after.explain()
    # The longest timeout allowed still runs: nothing answers on port 9, so a short one says so.
    assert routerctl("--timeout", "0.5", "-s", "tcp://127.0.0.1:9", "status").code == 1


def test_an_endpoint_with_no_host_to_connect_to_is_a_usage_error(runtime_dir):
    for endpoint in ("tcp://*:5600", "tcp:// :5600", "tcp://[::1:5600", "tcp://-host:5600",
                     "tcp://a b:5600", "tcp://[]:5600"):
        result = routerctl("-s", endpoint, "--timeout", "1", "status")
        assert result.code == 2, result.explain()
        assert f"not an admin endpoint: {endpoint!r}" in result.stderr, result.explain()
    # Host names, IPv4 and bracketed IPv6 addresses are endpoints: nothing listens there, exit 1.
    for endpoint in ("tcp://127.0.0.1:9", "tcp://[::1]:9", "tcp://localhost:9"):
        result = routerctl("-s", endpoint, "--timeout", "0.5", "status")
        assert result.code == 1 and endpoint in result.stderr, result.explain()
