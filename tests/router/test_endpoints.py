"""Endpoint portals: three domains, interest-driven proxies, purge and final advertisements,
cost and hop count on the wire, both directions at once."""

import pytest

from router.um.wire.errors import WireError
from router.um.wire.lbmr import COST_INFINITE, CostOption, decode_lbmr

from tests.support.processes import wait_for
from tests.support.routers import FAST_PURGE, endpoint_xml
from tests.support.tshark import LiveCapture, assert_no_expert_info, decode

pytestmark = pytest.mark.integration


def start_router(routers, domains, costs=(), after_config=""):
    portals = "".join(endpoint_xml(f"LAN{i + 1}", i + 1, d.config_path, costs[i] if i < len(costs) else 1,
                                   after_config=after_config)
                      for i, d in enumerate(domains))
    return routers.start(portals).wait_ready()


def start_pair(tools, source_domain, receiver_domains, topic, count, length=64, source_id=None):
    receivers = [tools.umrcv("-c", d.config_path, "--json", "-C", count, "--timeout", 240, topic)
                 for d in receiver_domains]
    args = ["-c", source_domain.config_path, "--json", "-M", count, "-l", length, "--start-on-stdin"]
    if source_id is not None:
        args += ["-i", source_id]
    source = tools.umsrc(*args, topic)
    for receiver in receivers:
        receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    return source, receivers


def test_three_lans_every_receiver_gets_everything(routers, tools, make_domain):
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    start_router(routers, [lan1, lan2, lan3])
    source, receivers = start_pair(tools, lan1, [lan2, lan3], "three.topic", 50_000)
    assert source.result(240)["sent"] == 50_000
    for receiver in receivers:
        got = receiver.result(240)
        assert (got["received"], got["gaps"], got["duplicates"]) == (50_000, 0, 0), got


def test_no_proxies_for_a_topic_nobody_wants(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = start_router(routers, [lan1, lan2])
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "--timeout", 60, "wanted")
    wait_for(lambda: router.counters()[0]["proxy_receivers"] == 1, 20, message="proxy receiver for 'wanted'")
    lonely = tools.umsrc("-c", lan1.config_path, "--json", "-M", 200, "-W", 0, "-L", 1.5, "unwanted")
    lonely.result(60)
    counters = router.counters()
    assert counters[0]["proxy_receivers"] == 1            # only 'wanted'
    assert counters[1]["proxy_sources"] == 0 and counters[1]["proxy_sources_created"] == 0
    assert counters[0]["transport_topic_fragments_rcvd"] == 0
    receiver.stop()


def test_departed_receiver_purges_interest_and_proxy_sends_final_advertisements(routers, tools, make_domain, tmp_path):
    lan1, lan2 = make_domain(), make_domain()
    router = start_router(routers, [lan1, lan2], costs=(1, 7), after_config=FAST_PURGE)
    pcap = tmp_path / "lan2.pcapng"
    finals = FinalAdvertisementWatcher(lan2, "fleeting")
    with LiveCapture(capture_filter=f"udp port {lan2.port}", path=pcap):
        source = tools.umsrc("-c", lan1.config_path, "--json", "-M", 1_000_000, "-P", 200, "-W", 1, "fleeting")
        receiver = tools.umrcv("-c", lan2.config_path, "--json", "-C", 50, "--timeout", 60, "fleeting")
        got = receiver.result(60)            # exits after 50 messages: its context says it leaves
        assert got["received"] >= 50
        wait_for(lambda: router.counters()[1]["proxy_sources"] == 0, 15, message="proxy source deleted")
        wait_for(lambda: router.counters()[0]["proxy_receivers"] == 0, 15, message="proxy receiver deleted")
        wait_for(lambda: router.counters()[1]["local_interest_topics"] == 0, 5, message="interest purged")
        # The capture has them once a listener in the same domain has heard them.
        wait_for(finals.heard, 5, message="the proxy source's final advertisements in LAN2")
        source.stop()
    finals.close()
    decode_as = [f"udp.port=={lan2.port},lbmr"]
    assert_no_expert_info(pcap, decode_as)
    frames = decode(pcap, decode_as, fields=["lbmr.tir.name", "lbmr.topt.cost.cost", "lbmr.topt.cost.hop_count",
                                             "lbmr.opt.src_type.src_type", "lbmr.opt.local_domain.local_domain_id"])
    proxy_tirs = [f for f in frames if "fleeting" in f.get("lbmr.tir.name", [])]
    costs = {c for f in proxy_tirs for c in f.get("lbmr.topt.cost.cost", [])}
    assert "7" in costs, "the proxy advertises its portal's cost"
    assert "-1" in costs, "the deleted proxy source sent final advertisements"
    assert all(f.get("lbmr.topt.cost.hop_count") == ["1"] for f in proxy_tirs)
    assert any(f.get("lbmr.opt.local_domain.local_domain_id") == ["2"] for f in proxy_tirs)


class FinalAdvertisementWatcher:
    """Listens in a domain for TIRs of `topic` with cost 0xFFFFFFFF (final advertisements)."""

    def __init__(self, domain, topic: str):
        self.topic = topic
        self.sock = domain.resolver_listener()
        self.seen = False

    def heard(self) -> bool:
        while not self.seen:
            try:
                packet = decode_lbmr(self.sock.recv(65536))
            except BlockingIOError:
                break
            except WireError:
                continue
            for tir in getattr(packet.body, "tirs", ()):
                if tir.topic == self.topic and any(isinstance(o, CostOption) and o.cost == COST_INFINITE
                                                   for o in tir.options):
                    self.seen = True
        return self.seen

    def close(self) -> None:
        self.sock.close()


def test_both_directions_at_once(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    start_router(routers, [lan1, lan2])
    east = tools.umrcv("-c", lan2.config_path, "--json", "-C", 20_000, "--timeout", 240, "east")
    west = tools.umrcv("-c", lan1.config_path, "--json", "-C", 20_000, "--timeout", 240, "west")
    to_east = tools.umsrc("-c", lan1.config_path, "--json", "-M", 20_000, "--start-on-stdin", "east")
    to_west = tools.umsrc("-c", lan2.config_path, "--json", "-M", 20_000, "--start-on-stdin", "west")
    east.wait_for_stderr("Beginning of Transport Session", 30)
    west.wait_for_stderr("Beginning of Transport Session", 30)
    to_east.send_line()
    to_west.send_line()
    for receiver in (east, west):
        got = receiver.result(240)
        assert (got["received"], got["gaps"], got["duplicates"]) == (20_000, 0, 0), got


def test_two_sources_with_the_same_topic_index_both_cross(routers, tools, make_domain):
    """Both sources use topic index 1 in their own sessions; in the egress domain one proxy
    source keeps index 1 and the other's frames are rewritten to its own index."""
    lan1, lan2 = make_domain(), make_domain()
    start_router(routers, [lan1, lan2])
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "-C", 40_000, "--timeout", 240, "shared.index")
    sources = [tools.umsrc("-c", lan1.config_path, "--json", "-M", 20_000, "-i", sid, "--start-on-stdin",
                           "shared.index") for sid in ("0x1", "0x2")]
    wait_for(lambda: receiver.stderr.count("Beginning of Transport Session") >= 2, 30, message="two BOS")
    for source in sources:
        source.send_line()
    got = receiver.result(240)
    assert (got["received"], got["gaps"], got["duplicates"]) == (40_000, 0, 0), got
    assert set(got["per_source"]) == {"00000001", "00000002"}
    assert receiver.stderr.count("Beginning of Transport Session") == 2, receiver.stderr


def test_fragment_larger_than_the_egress_datagram_size_is_dropped_and_counted(routers, tools, make_domain):
    """The seed's protocol-conversion warning: a 20 KB message is one TCP fragment in LAN1 but
    exceeds LAN2's 8192-byte datagram size, so the router drops it and counts why."""
    lan1 = make_domain()
    lan2 = make_domain("context transport_tcp_datagram_max_size 8192")
    router = start_router(routers, [lan1, lan2])
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "--timeout", 60, "--idle-timeout", 2, "big.frames")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", 10, "-l", 20_000, "--start-on-stdin", "big.frames")
    small = tools.umsrc("-c", lan1.config_path, "--json", "-M", 10, "-l", 100, "-i", "0x5", "--start-on-stdin",
                        "big.frames")
    wait_for(lambda: receiver.stderr.count("Beginning of Transport Session") >= 2, 30, message="two BOS")
    source.send_line()
    source.result(60)
    small.send_line()
    small.result(60)
    wait_for(lambda: router.counters()[1]["transport_topic_fragments_dropped_size_error"] == 10, 10,
             message="ten oversized frames counted")
    got = receiver.result(60)
    assert got["received"] == 10 and list(got["per_source"]) == ["00000005"], got
    router.wait_for_log("UMR-3001-2")


def test_protocol_conversion_lbt_ipc_in_tcp_out(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    start_router(routers, [lan1, lan2])
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "-C", 50_000, "--timeout", 240, "ipc.to.tcp")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-T", "lbtipc", "-M", 50_000, "--start-on-stdin",
                         "ipc.to.tcp")
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    got = receiver.result(240)
    assert (got["received"], got["gaps"], got["duplicates"]) == (50_000, 0, 0), got
    assert got["um_sources"][0].startswith("TCP:")


def test_protocol_conversion_tcp_in_lbt_ipc_out(routers, tools, make_domain):
    lan1 = make_domain()
    lan2 = make_domain("source transport lbtipc")        # the router's proxy sources in LAN2 use LBT-IPC
    start_router(routers, [lan1, lan2])
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "-C", 50_000, "--timeout", 240, "tcp.to.ipc")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", 50_000, "-l", 200, "--start-on-stdin", "tcp.to.ipc")
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    got = receiver.result(240)
    assert (got["received"], got["gaps"], got["duplicates"]) == (50_000, 0, 0), got
    assert got["um_sources"][0].startswith("LBT-IPC:")
