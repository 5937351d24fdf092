"""UM interface options as UM takes them: an address, a CIDR network or an interface's name, each
turned into this host's address where a socket is opened (LBT-RU's interface included)."""
import subprocess
import sys
from pathlib import Path

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


def _resolved_in_a_network_namespace(setup: list[str], specs: list[str]) -> list[str]:
    """What resolve_interface makes of each spec in a network namespace of its own (nothing on this
    host changes) after the `ip` commands of `setup`: an address, or the error's text."""
    script = ("import sys\nfrom router.um.netif import resolve_interface\n"
              "for spec in sys.argv[1:]:\n"
              "    try:\n        print(resolve_interface(spec))\n"
              "    except ValueError as err:\n        print('error:', err)\n")
    commands = " && ".join(["ip link set lo up", *(f"ip {command}" for command in setup),
                            f"{sys.executable} -c \"$0\" \"$@\""])
    done = subprocess.run(["unshare", "-n", "sh", "-c", commands, script, *specs], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_network_matches_any_address_of_an_interface_not_only_its_first():
    """A host whose interface carries several addresses (a second network, a service address
    added to it): a network names the one of them inside it, as UM finds it among all the
    host's addresses."""
    found = _resolved_in_a_network_namespace(["addr add 10.77.1.5/24 dev lo", "addr add 127.0.0.9/8 dev lo"],
                                             ["10.77.1.0/24", "127.0.0.0/8", "lo", "10.78.0.0/16"])
    assert found[:3] == ["10.77.1.5", "127.0.0.1", "127.0.0.1"]        # a name: the interface's first
    assert found[3] == "error: no local interface has an address in 10.78.0.0/16"


def _open_descriptors() -> int:
    return len(list(Path("/proc/self/fd").iterdir()))


_UNICAST = {"resolver_unicast_daemon": "127.0.0.1:15380"}


@pytest.mark.parametrize("options, said", [
    # An address no interface of this host has: the kernel says only "No such device" (multicast)
    # or "Cannot assign requested address" for each port of the range (unicast).
    ({"resolver_multicast_interface": "10.99.99.99"}, "resolver_multicast_interface 10.99.99.99"),
    ({"resolver_multicast_interface": "nosuchif0"}, "no interface named 'nosuchif0'"),
    ({**_UNICAST, "resolver_unicast_interface": "10.99.99.99"}, "resolver_unicast_interface 10.99.99.99"),
], ids=["multicast-address", "multicast-name", "unicast-address"])
def test_a_resolver_interface_this_host_lacks_is_named_with_its_option(tmp_path, options, said):
    """A context whose resolver interface this host lacks does not open: the error names the
    option and what it was set to (a router logs it as the reason its portal cannot start), and
    nothing it opened before stays open."""
    domain = new_domain(tmp_path)
    [option] = [name for name in options if name.endswith("_interface")]
    before = _open_descriptors()
    with pytest.raises(OSError) as raised:
        Context(**{**domain.overrides(), **options})
    assert said in str(raised.value) and option in str(raised.value), str(raised.value)
    assert _open_descriptors() == before
