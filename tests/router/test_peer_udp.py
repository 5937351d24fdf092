"""Two routers whose peer link has a UDP data path (`<udp>` on both sides): everything arrives, in
both directions, through loss on the path; routerctl shows the path; tshark decodes it as LBT-RU.
"""
import socket

import pytest

from tests.support.peer_links import converged, linked_pair, routerctl
from tests.support.processes import wait_for
from tests.support.routers import FAST_ROUTING, endpoint_xml, free_port, peer_xml
from tests.support.tshark import LiveCapture, decode, expert_info

pytestmark = pytest.mark.integration


def udp_xml(port: int, window: str = "") -> str:
    # UM's 10 Mbit/s default peer rate is a WAN's; loopback takes more.
    return (f"      <udp><port>{port}</port>{window}"
            f'<peer-rate-limit data="1000000000" retransmit="100000000" interval="10"/></udp>\n')


def udp_linked_pair(routers, lan1, lan2, prefix: str, env_b: dict | None = None, window_a: str = ""):
    """LAN1 - router A - peer link with a UDP path - router B - LAN2: (A, B, A's UDP port, B's)."""
    udp_a, udp_b = free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_DGRAM)
    a, b = linked_pair(routers, lan1, lan2, prefix, a_link={"extra": udp_xml(udp_a, window_a)},
                       b_link={"extra": udp_xml(udp_b)}, env_b=env_b)
    return a, b, udp_a, udp_b


def send_and_receive(tools, source_domain, receiver_domain, topic, count, rate=25000):
    receiver = tools.umrcv("-c", receiver_domain.config_path, "--json", "-C", count, "--timeout", 120, topic)
    source = tools.umsrc("-c", source_domain.config_path, "--json", "-M", count, "-P", rate, "--start-on-stdin",
                         topic)
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    assert source.result(120)["sent"] == count
    return receiver


def test_a_udp_peer_link_delivers_everything_both_ways_through_loss(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    # Router B's end of the path drops 5% of the DATA it receives: A's sender repairs it, from a
    # transmission window whose memory is limited (a few seconds of this stream).
    a, b, udp_a, udp_b = udp_linked_pair(routers, lan1, lan2, "pua", env_b={"LBTRU_LOSS_RATE": "5"},
                                         window_a='<transmission-window size="25165824" limit="8000000"/>')
    count = 50_000
    east = send_and_receive(tools, lan1, lan2, "udp.east", count)
    west = send_and_receive(tools, lan2, lan1, "udp.west", 10_000)
    for receiver, expected in ((east, count), (west, 10_000)):
        got = receiver.result(120)
        assert (got["received"], got["gaps"], got["duplicates"]) == (expected, 0, 0), got
    a_link = routerctl(a, "topics", "TO_B")["portals"]["TO_B"]["link"]
    b_link = routerctl(b, "topics", "TO_A")["portals"]["TO_A"]["link"]
    assert a_link["udp"]["port"] == udp_a and b_link["udp"]["port"] == udp_b
    assert b_link["udp"]["receive"]["naks_sent"] > 0 and b_link["udp"]["receive"]["lost"] == 0, b_link["udp"]
    assert a_link["udp"]["send"]["rxs_sent"] > 0 and a_link["udp"]["send"]["clients_connected"] == 1
    window = a_link["udp"]["transmission_window"]
    assert window["limit"] == 8_000_000 and window["size"] == 25165824 and window["datagrams"] > 0, window
    assert window["bytes_counted_for_limit"] <= 8_000_000, window
    b.wait_for_log("dropping 5.0% of received DATA datagrams on purpose (LBTRU_LOSS_RATE)")
    assert a.counters()[1]["data_fragments_sent"] >= count
    # The portals' counters (web monitor, Parquet, /metrics) carry the path's, kept up each keepalive tick.
    wait_for(lambda: b.counters()[0]["udp_retransmissions_rcvd"] > 0 and a.counters()[1]["udp_naks_rcvd"] > 0, 10,
             message="the UDP path's counters in the portals'")
    a_peer, b_peer = a.counters()[1], b.counters()[0]
    assert a_peer["udp_datagrams_sent"] > 0 and a_peer["udp_retransmissions_sent"] > 0, a_peer
    assert b_peer["udp_datagrams_rcvd"] > 0 and b_peer["udp_naks_sent"] > 0 and b_peer["udp_datagrams_lost"] == 0


def test_the_udp_path_on_the_wire(routers, tools, make_domain, tmp_path):
    """The data crosses on UDP as LBT-RU carrying the LBMC messages; the TCP link carries the
    handshake (with each side's UDP port) and keepalives, not the data."""
    lan1, lan2 = make_domain(), make_domain()
    port, udp_a, udp_b = free_port(), free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_DGRAM)
    pcap = tmp_path / "link.pcapng"
    with LiveCapture(capture_filter=f"tcp port {port} or udp port {udp_a} or udp port {udp_b}", path=pcap) as capture:
        # The acceptor first, so the initiator's first connect finds it (no TCP RST in the capture).
        b = routers.start(peer_xml("TO_A", listen=port, extra=udp_xml(udp_b))
                          + endpoint_xml("LAN2", 2, lan2.config_path), FAST_ROUTING, name="pwb").wait_ready()
        a = routers.start(endpoint_xml("LAN1", 1, lan1.config_path)
                          + peer_xml("TO_B", connect=port, extra=udp_xml(udp_a)), FAST_ROUTING, name="pwa").wait_ready()
        wait_for(lambda: converged([a, b], 2), 20, message="both routers know both")
        got = send_and_receive(tools, lan1, lan2, "udp.wire", 2000, rate=5000).result(120)
        assert (got["received"], got["gaps"], got["duplicates"]) == (2000, 0, 0), got
    prefs = [f"lbtru.source_port_low:{udp_a}", f"lbtru.source_port_high:{udp_a}",
             f"lbtru.receiver_port_low:{udp_b}", f"lbtru.receiver_port_high:{udp_b}"]
    on_udp = decode(pcap, [], prefs, fields=["lbmc.sqn", "lbmc.topicname.topic"],
                    display_filter=f"lbtru and udp.srcport == {udp_a} and {capture.not_canary}")
    assert sorted(int(s) for row in on_udp for s in row.get("lbmc.sqn", [])) == list(range(2000))
    assert any("udp.wire" in row.get("lbmc.topicname.topic", []) for row in on_udp), "the advertisement"
    warnings = expert_info(pcap, [], prefs, min_severity="warn")
    assert all(row.startswith("Warn/Sequence/LBT-RU: NAK") for row in warnings), warnings
    link = [f"tcp.port=={port},lbttcp"]
    on_tcp = decode(pcap, link, fields=["lbmc.sqn", "lbmc.ctxinfo.port"], display_filter=f"tcp.port == {port}")
    assert not [row for row in on_tcp if row.get("lbmc.sqn")], "no data on the TCP link"
    assert {int(p) for row in on_tcp for p in row.get("lbmc.ctxinfo.port", [])} == {udp_a, udp_b}
    assert not expert_info(pcap, link, min_severity="warn")


def test_what_the_udp_path_drops_when_its_queue_is_full_is_counted_exactly(routers, tools, make_domain):
    """A burst faster than the path's rate and larger than <max-queue>: the sending portal drops
    what does not fit, whole messages, counted once each; what it counts sent is what the far
    receiver gets (the path used to count a whole call dropped when a batch flushed in it was)."""
    lan1, lan2 = make_domain(), make_domain()
    port, udp_a, udp_b = free_port(), free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_DGRAM)
    slow = (f"      <udp><port>{udp_a}</port>"
            f'<peer-rate-limit data="16000000" retransmit="1000000" interval="10"/></udp>\n'
            "      <max-queue>100000</max-queue>\n")
    a = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) + peer_xml("TO_B", connect=port, extra=slow),
                      FAST_ROUTING, name="puqa")
    b = routers.start(peer_xml("TO_A", listen=port, extra=udp_xml(udp_b)) + endpoint_xml("LAN2", 2, lan2.config_path),
                      FAST_ROUTING, name="puqb")
    a.wait_ready(), b.wait_ready()
    wait_for(lambda: converged([a, b], 2), 20, message="both routers know both")
    count = 3000
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "-C", count, "--idle-timeout", 3, "--timeout", 120,
                           "udp.queue")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-l", 1000, "--start-on-stdin", "udp.queue")
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    assert source.result(120)["sent"] == count
    got = receiver.result(120)
    peer = a.counters()[1]
    assert peer["data_fragments_forwarded"] == count, peer
    assert 0 < peer["data_fragments_dropped_would_block"] < count, peer
    assert peer["data_fragments_sent"] + peer["data_fragments_dropped_would_block"] == count, peer
    assert got["received"] == got["unique"] == peer["data_fragments_sent"], (got, peer)
    assert got["duplicates"] == 0, got
    # Logged once per episode (a burst), not once per refusal between the messages it takes.
    assert 1 <= a.log().count("UDP path queue full") <= 2, a.log()
