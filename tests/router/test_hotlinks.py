"""DRO Hotlinks on loopback: two routers both bridge D1 and D2, their D1 endpoints share a hotlink
index, so both forward every message of a D1 source into D2; a receiver with use_hotlink joins
both copies and delivers each message once, and loses nothing when one router dies. The same over
two redundant paths of peer links, with hotlink indexes on both datacenters' endpoints.
"""
import pytest

from tests.router.test_multi_hop import counter, kill_router, sent_by
from tests.support.peer_links import converged, start
from tests.support.processes import wait_for
from tests.support.routers import endpoint_xml, free_port, peer_xml
from tests.support.tshark import LiveCapture, assert_no_expert_info, decode

pytestmark = pytest.mark.integration

HOTLINK = "      <hotlink-index>1</hotlink-index>\n"


def hotlink_pair(routers, lan1, lan2, name):
    """Routers X and Y both bridge D1 and D2 with hotlink index 1 on D1; X's way costs 2, Y's 5."""
    pair = []
    for suffix, cost in (("x", 2), ("y", 5)):
        pair.append(start(routers, endpoint_xml("D1", 1, lan1.config_path, before_config=HOTLINK)
                          + endpoint_xml("D2", 2, lan2.config_path, cost=cost), f"{name}{suffix}"))
    for router in pair:
        router.wait_ready()
    wait_for(lambda: converged(pair, 2), 20, message="both routers know both")
    return pair


def beginnings(tool) -> int:
    return sum("Beginning of Transport Session" in line for line in list(tool.stderr_lines))


def test_hotlinked_routers_both_carry_a_source_and_a_hotlink_receiver_loses_nothing_when_one_dies(
        routers, tools, make_domain, tmp_path):
    lan1, lan2 = make_domain(), make_domain()
    x, y = hotlink_pair(routers, lan1, lan2, "hl")
    count, topic = 20000, "hotlink.topic"
    pcap = tmp_path / "lan2.pcapng"
    with LiveCapture(capture_filter=f"udp port {lan2.port}", path=pcap):
        hotlink = tools.umrcv("-c", lan2.config_path, "--json", "--hotlink", "-C", count, "--timeout", 120,
                              "--idle-timeout", 15, topic)
        plain = tools.umrcv("-c", lan2.config_path, "--json", "-C", count, "--timeout", 120, "--idle-timeout", 15,
                            topic)
        source = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-l", 64, "-P", 2000,
                             "--start-on-stdin", topic)
        wait_for(lambda: beginnings(hotlink) == 2, 30, message="the hotlink receiver joined both routers' copies")
        plain.wait_for_stderr("Beginning of Transport Session", 30)
        source.send_line()
        wait_for(lambda: sent_by(x, 1) > 2000 and sent_by(y, 1) > 2000, 20, message="both routers carry the source")
        assert counter(y, 0, "proxy_receivers") == 1, "the costlier router pulls the topic too"
        kill_router(x)
        assert source.result(120)["sent"] == count
        got, today = hotlink.result(120), plain.result(120)
    # The hotlink receiver: every message once, in order, though the router it heard first died.
    assert (got["received"], got["unique"], got["gaps"], got["duplicates"]) == (count, count, 0, 0), got
    assert got["hotlink_duplicates_discarded"] > 0, "the other router's copies were there and dropped"
    assert beginnings(hotlink) == 2, "nothing to join again: the other copy was joined already"
    # A receiver without use_hotlink behaves as before: one path, and the router's death costs messages.
    assert today["duplicates"] == 0 and today["gaps"] > 0 and today["unique"] + today["gaps"] == count, today
    assert "hotlink_duplicates_discarded" not in today
    print(f"router killed midway: use_hotlink receiver {got['gaps']} lost, {got['hotlink_duplicates_discarded']} "
          f"copies discarded; plain receiver {today['gaps']} lost")
    # Nothing new on the wire: D2's topic resolution decodes cleanly, and both routers advertise the
    # source with its one OTID over transports of their own.
    lbmr = [f"udp.port=={lan2.port},lbmr"]
    assert_no_expert_info(pcap, lbmr)
    tirs = decode(pcap, lbmr, fields=["lbmr.tir.name", "lbmr.topt.otid.originating_transport", "lbmr.tir.tcp.port"],
                  display_filter=f'lbmr.tir.name == "{topic}"')
    paths = {(otid, port) for f in tirs for name, otid, port in zip(
        f["lbmr.tir.name"], f["lbmr.topt.otid.originating_transport"], f["lbmr.tir.tcp.port"]) if name == topic}
    assert len({otid for otid, _ in paths}) == 1 and len({port for _, port in paths}) == 2, paths


@pytest.mark.parametrize("victim", ["A", "C"])
def test_over_peer_links_both_redundant_paths_carry_and_a_hotlink_receiver_loses_nothing_when_one_dies(
        routers, tools, make_domain, victim):
    """D1 - A == C - D2 and D1 - B == D - D2 (== a peer link), the endpoints on both datacenters with
    hotlink index 1; the chosen path crosses A and C. Both paths carry every message of a D1
    source; the chosen path's router on D1's side (A) or on D2's side (C) dies midway."""
    lan1, lan2 = make_domain(), make_domain()
    a_c, b_d = free_port(), free_port()
    hotlink = {"before_config": HOTLINK}
    # Names per case (a router's name is its admin address): the two cases may run at once.
    a = start(routers, endpoint_xml("D1", 1, lan1.config_path, **hotlink) + peer_xml("TO_C", connect=a_c),
              f"hpa{victim}")
    c = start(routers, peer_xml("TO_A", listen=a_c) + endpoint_xml("D2", 2, lan2.config_path, **hotlink),
              f"hpc{victim}")
    b = start(routers, endpoint_xml("D1", 1, lan1.config_path, cost=5, **hotlink) + peer_xml("TO_D", connect=b_d),
              f"hpb{victim}")
    d = start(routers, peer_xml("TO_B", listen=b_d) + endpoint_xml("D2", 2, lan2.config_path, cost=5, **hotlink),
              f"hpd{victim}")
    for router in (a, b, c, d):
        router.wait_ready()
    wait_for(lambda: converged([a, b, c, d], 4), 30, message="the four routers converged")
    count, topic = 20000, "hotlink.wan"
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "--hotlink", "-C", count, "--timeout", 120,
                           "--idle-timeout", 15, topic)
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-l", 64, "-P", 2000, "--start-on-stdin",
                         topic)
    wait_for(lambda: beginnings(receiver) == 2, 30, message="the hotlink receiver joined C's and D's copies")
    source.send_line()
    wait_for(lambda: sent_by(c, 1) > 2000 and sent_by(d, 1) > 2000, 20, message="both paths carry the source")
    kill_router({"A": a, "C": c}[victim])
    assert source.result(120)["sent"] == count
    got = receiver.result(120)
    assert (got["received"], got["unique"], got["gaps"], got["duplicates"]) == (count, count, 0, 0), got
    assert got["hotlink_duplicates_discarded"] > 0
