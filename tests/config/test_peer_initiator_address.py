"""<initiator><address>: an IPv4 address or a DNS name, refused at its element otherwise."""
from __future__ import annotations

import pytest

from router.config import ConfigError, load_gateway_config
from tests.config.samples import endpoint, peer


def _initiator(address: str) -> str:
    return f"<initiator><address>{address}</address><port>26123</port></initiator>"


@pytest.mark.parametrize("address, words", [
    ("300.1.1.1", "'300.1.1.1' is not an IPv4 address"),
    ("10.0.0", "'10.0.0' is not an IPv4 address"),
    ("::1", "'::1' is neither an IPv4 address nor a DNS name"),
    ("router b.example.com", "'router b.example.com' is neither an IPv4 address nor a DNS name"),
])
def test_an_address_the_link_could_never_connect_to_is_refused(write_gateway, address, words):
    # Accepted, the link failed to resolve it at every reconnect attempt, for as long as it ran.
    path = write_gateway(endpoint("A", 1, "lan1.cfg") + peer("P", _initiator(address)))
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    err = caught.value
    assert (err.path, err.line, err.element) == (str(path), 4, "address")
    assert err.reason.startswith(words)


@pytest.mark.parametrize("address", ["10.30.3.102", "router-b.example.com", "localhost"])
def test_an_ipv4_address_or_a_name_is_taken(write_gateway, address):
    path = write_gateway(endpoint("A", 1, "lan1.cfg") + peer("P", _initiator(address)))
    assert load_gateway_config(path).portal("P").link.initiator.address == address
