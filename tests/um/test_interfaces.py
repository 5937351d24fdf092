"""UM interface options as UM takes them: an address, a CIDR network or an interface's name, each
turned into this host's address where a socket is opened (LBT-RU's interface included)."""
import pytest

from router.um.config import ConfigError, UMConfig
from router.um.context import Context
from router.um.netif import resolve_interface
from tests.support.domains import new_domain
from tests.support.processes import wait_for


def test_an_interface_name_is_its_address_and_an_unknown_one_says_so():
    assert resolve_interface("lo") == "127.0.0.1"
    assert resolve_interface("127.0.0.0/8") == "127.0.0.1"
    assert resolve_interface("10.1.2.3") == "10.1.2.3"
    with pytest.raises(ValueError, match="no interface named 'nosuchif0'"):
        resolve_interface("nosuchif0")


def test_option_files_take_names_and_still_refuse_mistyped_addresses():
    config = UMConfig()
    config.set("context", "resolver_multicast_interface", "lo")
    assert config.get("context", "resolver_multicast_interface") == "lo"
    for text in ("10.0.0.300", "eth0 eth1", "a-name-far-too-long-for-linux"):
        with pytest.raises(ConfigError, match="not an IPv4 address, a network or an interface name"):
            config.set("context", "resolver_multicast_interface", text)


@pytest.mark.integration
def test_lbtru_on_an_interface_network_and_resolution_on_an_interface_name(tmp_path):
    """transport_lbtru_interface as a network (its text was bound as it was, and the session
    failed) and resolver_multicast_interface by name (it was refused): messages flow."""
    options = {**new_domain(tmp_path).overrides(), "resolver_multicast_interface": "lo",
               "transport_lbtru_interface": "127.0.0.0/8"}
    with Context(**options) as receiving, Context(transport="lbtru", **options) as sending:
        got = []
        receiving.receiver("ru.by.name", on_batch=lambda ms: got.extend(m.data for m in ms))
        source = sending.source("ru.by.name")
        wait_for(lambda: source.receiver_count >= 1, 10, message="the receiver connects to the LBT-RU session")
        for n in range(20):
            source.send(b"%03d" % n)
        source.flush()
        wait_for(lambda: len(got) == 20, 10, message="every message")
    assert got == [b"%03d" % n for n in range(20)]
