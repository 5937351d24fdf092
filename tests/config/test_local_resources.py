"""What a configuration claims on its host: names for shared memory and sockets, listening ports.

A router that cannot have them fails at start or keeps failing while it runs; the file is the
place to say so, at the element that asks for them.
"""
from __future__ import annotations

import pytest

from router.config import ConfigError, load_gateway_config
from router.ipc.shm import segment_name
from tests.config.samples import TWO_LANS, peer


def error_of(path) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    return caught.value


# ------------------------------------------------------------------------------ router name

@pytest.mark.parametrize("name", ["NYC DRO", "nyc.dro", "a/b", "dro:1"])
def test_a_router_name_that_cannot_name_its_shared_memory_is_refused_at_its_element(write_gateway, name):
    path = write_gateway(TWO_LANS, daemon=f"<name>{name}</name>")
    err = error_of(path)
    assert (err.path, err.line, err.element) == (str(path), 2, "name")
    assert "letters, digits" in err.reason and repr(name) in err.reason


def test_a_router_named_after_a_dotted_file_gets_a_name_its_shared_memory_can_use(write_gateway):
    config = load_gateway_config(write_gateway(TWO_LANS, name="nyc.dro.xml"))
    assert config.daemon.name == "nyc-dro"
    assert segment_name(config.daemon.name, "counters0", 1) == "/umr.nyc-dro.1.counters0"


def test_a_router_name_too_long_for_its_socket_paths_is_refused_at_its_element(write_gateway):
    """The name is in the bus sockets' paths (at most 107 bytes): a longer one made the router
    stop at start with ZeroMQ's error."""
    path = write_gateway(TWO_LANS, daemon=f"<name>{'r' * 65}</name>")
    err = error_of(path)
    assert (err.path, err.line, err.element) == (str(path), 2, "name")
    assert "65 characters long" in err.reason and "at most 64 characters" in err.reason
    assert load_gateway_config(write_gateway(TWO_LANS, daemon=f"<name>{'r' * 64}</name>")).daemon.name == "r" * 64


def test_a_router_named_after_a_long_file_gets_a_name_its_sockets_can_carry(write_gateway):
    config = load_gateway_config(write_gateway(TWO_LANS, name="a-" + "b" * 62 + ".c.xml"))
    assert config.daemon.name == "a-" + "b" * 62


def test_router_names_of_letters_digits_dash_and_underscore_are_kept(write_gateway):
    config = load_gateway_config(write_gateway(TWO_LANS, daemon="<name>NYC_dro-2</name>"))
    assert config.daemon.name == "NYC_dro-2"


# --------------------------------------------------------------------------- listening ports

def acceptor(port: int, interface: str = "") -> str:
    where = f"<interface>{interface}</interface>" if interface else ""
    return f"{where}<acceptor><listen-port>{port}</listen-port></acceptor>"


def test_two_peers_listening_on_one_port_are_refused_at_the_second(write_gateway):
    path = write_gateway(TWO_LANS + peer("P1", acceptor(26123)) + "\n" + peer("P2", acceptor(26123)))
    err = error_of(path)
    assert (err.path, err.line, err.element) == (str(path), 5, "listen-port")
    assert "P1" in err.reason and "26123" in err.reason and "line 4" in err.reason


def test_peers_listening_on_one_port_of_different_addresses_are_accepted(write_gateway):
    path = write_gateway(TWO_LANS + peer("P1", acceptor(26123, "127.0.0.1"))
                         + peer("P2", acceptor(26123, "127.0.0.2")))
    assert [p.link.acceptor.listen_port for p in load_gateway_config(path).peers] == [26123, 26123]


def test_a_peer_on_every_address_and_one_on_a_single_address_share_the_port(write_gateway):
    path = write_gateway(TWO_LANS + peer("P1", acceptor(26123)) + "\n" + peer("P2", acceptor(26123, "127.0.0.1")))
    assert error_of(path).element == "listen-port"


def test_the_eliminated_dual_tcp_form_listens_too(write_gateway):
    dual = ("<tcp><listen-port>26123</listen-port><companion><address>127.0.0.1</address>"
            "<port>26124</port></companion></tcp>")
    path = write_gateway(TWO_LANS + peer("P1", acceptor(26123)) + "\n"
                         + f"<peer><name>P2</name>{dual}</peer>")
    assert error_of(path).element == "listen-port"


def test_two_peers_on_one_udp_port_are_refused_at_the_second(write_gateway):
    udp = "<udp><port>26200</port></udp>"
    path = write_gateway(TWO_LANS + peer("P1", acceptor(26123), after=udp) + "\n"
                         + peer("P2", acceptor(26124), after=udp))
    err = error_of(path)
    assert (err.line, err.element) == (5, "port")
    assert "P1" in err.reason and "26200" in err.reason


def test_a_tcp_and_a_udp_port_of_one_number_do_not_collide(write_gateway):
    path = write_gateway(TWO_LANS + peer("P1", acceptor(26123), after="<udp><port>26123</port></udp>")
                         + peer("P2", acceptor(26124)))
    assert len(load_gateway_config(path).peers) == 2
