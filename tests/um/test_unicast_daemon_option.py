"""`resolver_unicast_daemon` as UM reads it: `[Iface[:Src_Port]->]IP:Dest_Port`, entries separated
by commas or semicolons, each setting adding to the list (0.0.0.0:0 clears it), and the interface
and source port of an entry being where the context talks to that resolver daemon from."""
from __future__ import annotations

import socket

import pytest

from router.um.config import ConfigError, UMConfig, parse_lines
from router.um.lbmr_channel import LbmrChannel, new_src_id
from router.um.loop import EventLoop
from router.um.wire.lbmr import decode_lbmr
from tests.support.processes import wait_for
from tests.support.routers import free_port


def daemons(*lines: str) -> list[str]:
    config = parse_lines([f"context resolver_unicast_daemon {line}" for line in lines], "um.cfg")
    return [str(daemon) for daemon in config.get("context", "resolver_unicast_daemon")]


def test_each_setting_adds_daemons_and_an_all_zero_entry_clears_them():
    assert daemons("10.0.0.1:15380", "10.0.0.2:15380") == ["10.0.0.1:15380", "10.0.0.2:15380"]
    assert daemons("10.0.0.1:15380", "0.0.0.0:0,10.0.0.3:15380") == ["10.0.0.3:15380"]
    assert daemons("10.0.0.1:15380", "10.0.0.1:15380") == ["10.0.0.1:15380"]


def test_entries_may_be_separated_by_semicolons():
    assert daemons("10.0.0.1:15380;10.0.0.2:15380") == ["10.0.0.1:15380", "10.0.0.2:15380"]


def test_the_interface_and_source_port_of_an_entry_are_kept():
    assert daemons("10.1.0.5:14500->10.1.0.100:15380, 10.2.0.0/16->10.2.0.100:15380, "
                   '"eth1"->10.3.0.100:15380') == [
        "10.1.0.5:14500->10.1.0.100:15380", "10.2.0.0/16->10.2.0.100:15380", "eth1->10.3.0.100:15380"]


def test_a_quoted_interface_name_is_accepted_as_ums_documentation_writes_it():
    config = parse_lines(['context resolver_unicast_interface "eth0"'])
    assert config.get("context", "resolver_unicast_interface") == "eth0"


def test_a_bad_local_part_names_the_file_and_line():
    with pytest.raises(ConfigError) as caught:
        parse_lines(["", "context resolver_unicast_daemon 10.0.0.300:1->10.0.0.1:15380"], "um.cfg")
    assert (caught.value.path, caught.value.line) == ("um.cfg", 2) and "10.0.0.300" in caught.value.reason


def test_keepalives_go_to_each_daemon_from_the_interface_and_port_its_entry_names():
    """127.0.0.2 is this host's too (all of 127/8 is loopback): a channel that ignored the entry's
    interface would send from resolver_unicast_interface (127.0.0.1) and a port of its range."""
    lbmrd = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    lbmrd.bind(("127.0.0.1", 0))
    lbmrd.settimeout(0.2)
    source_port = free_port(socket.SOCK_DGRAM)
    config = UMConfig()
    config.set("context", "resolver_unicast_daemon", f"127.0.0.2:{source_port}->127.0.0.1:{lbmrd.getsockname()[1]}")
    config.set("context", "resolver_unicast_keepalive_interval", "50")
    loop = EventLoop("lbmr-unicast-test")
    loop.start_thread()
    channel = None
    try:
        channel = loop.call_and_wait(lambda: LbmrChannel(config, loop, lambda packet, address: None, new_src_id()))
        senders = []

        def heard() -> bool:
            try:
                data, address = lbmrd.recvfrom(65535)
            except socket.timeout:
                return False
            decode_lbmr(data)
            senders.append(address)
            return True
        wait_for(heard, 5, message="a keepalive at the resolver daemon")
        assert senders[0] == ("127.0.0.2", source_port)
    finally:
        if channel is not None:
            loop.call_and_wait(channel.close)
        loop.close()
        lbmrd.close()
