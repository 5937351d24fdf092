"""Multicast immediate messages through real routers: flooded into every other domain, whatever the
ACLs say, never back into the domain they came from, each delivered once even where two routers
join the same domains, and across peer links (seed §2.7; router.portals.immediate)."""
import pytest

from tests.support.peer_links import linked_pair
from tests.support.processes import wait_for
from tests.support.routers import endpoint_xml, free_port, worker_group_xml
from tests.support.tshark import LiveCapture, assert_no_expert_info, decode

pytestmark = pytest.mark.integration

# An outbound ACL that lets nothing into LAN2: immediate messages cross it all the same.
REJECT_ALL_OUTBOUND = ('      <acl><outbound><ace match="reject"><pcre-pattern>.</pcre-pattern></ace>'
                       '</outbound></acl>\n')


def _receive(tools, domain, count: int, *what):
    receiver = tools.umrcv("-c", domain.config_path, "--json", "-C", count, "--timeout", 60, *what)
    receiver.wait_for_stderr("umrcv: subscribed", 30)
    return receiver


def _send(tools, domain, count: int, rate: int, *what):
    return tools.umsrc("-c", domain.config_path, "--json", "-M", count, "-P", rate, "-l", 64, *what)


def _once(summary: dict, count: int) -> tuple:
    return (summary["received"], summary["unique"], summary["gaps"], summary["duplicates"]) == (count, count, 0, 0)


def _mim_prefs(domain) -> list[str]:
    return [f"lbtrm.mim_incoming_address:{domain.mim_group}", f"lbtrm.mim_outgoing_address:{domain.mim_group}",
            f"lbtrm.mim_incoming_dport:{domain.port}", f"lbtrm.mim_outgoing_dport:{domain.port}"]


def test_immediate_messages_flood_every_other_domain_past_acls_and_not_back(routers, tools, make_domain, tmp_path):
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path)
                           + endpoint_xml("LAN2", 2, lan2.config_path, after_config=REJECT_ALL_OUTBOUND)
                           + endpoint_xml("LAN3", 3, lan3.config_path)).wait_ready()
    count = 1000
    in_lan1 = _receive(tools, lan1, count, "mim.prices")           # beside the sender: the original only
    in_lan2 = _receive(tools, lan2, count, "mim.prices")
    topicless = _receive(tools, lan3, count, "--topicless")
    pcap = tmp_path / "lan2.pcapng"
    with LiveCapture(capture_filter=f"udp and dst host {lan2.mim_group}", path=pcap) as capture:
        topic_sender = _send(tools, lan1, count, 2000, "--immediate", "mim.prices")
        bare_sender = _send(tools, lan1, count, 2000, "--topicless")
        assert topic_sender.result(60)["sent"] == bare_sender.result(60)["sent"] == count
        lan2_got = in_lan2.result(60)
    for summary in (in_lan1.result(60), lan2_got, topicless.result(60)):
        assert _once(summary, count), summary

    wait_for(lambda: router.counters()[2]["immediate_topicless_fragments_sent"] == count, 10,
             message="LAN3 sent every topicless message")
    lan1_counters, lan2_counters, lan3_counters = (router.counters()[i] for i in range(3))
    assert lan1_counters["immediate_topic_fragments_rcvd"] == lan1_counters["immediate_topic_fragments_forwarded"] \
        == lan1_counters["immediate_topicless_fragments_rcvd"] == count
    for counters in (lan2_counters, lan3_counters):
        assert counters["immediate_topic_fragments_sent"] == counters["immediate_topicless_fragments_sent"] == count
    assert lan1_counters["immediate_topic_fragments_sent"] == lan1_counters["immediate_topicless_fragments_sent"] == 0
    assert lan2_counters["acl_outbound_rejected"] == 0, "ACLs do not apply to immediate messages"
    assert lan2_counters["proxy_sources"] == 0 and lan1_counters["proxy_receivers"] == 0, \
        "immediate messages need no proxies"

    # The wire in LAN2: the router's copies say they came from domain 1 and name the originating context.
    prefs = _mim_prefs(lan2)
    assert_no_expert_info(pcap, [], prefs)
    frames = decode(pcap, [], prefs, fields=["ip.src", "udp.srcport", "lbmc.odomain.domain", "lbmc.ctxinst.ctxinst",
                                             "lbmc.topicname.topic", "lbmc.sqn"], display_filter=capture.not_canary)
    topical = [f for f in frames if f.get("lbmc.topicname.topic") == ["mim.prices"]]
    assert len(topical) == count and len(frames) == 2 * count
    assert {f["lbmc.odomain.domain"][0] for f in frames} == {"1"}
    assert len({f["udp.srcport"][0] for f in frames}) == 1, "one router context sends them all"
    assert sorted(int(f["lbmc.sqn"][0]) for f in topical) == sorted(set(int(f["lbmc.sqn"][0]) for f in topical))


def test_two_routers_joining_the_same_domains_deliver_each_message_once(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    portals = endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path)
    first = routers.start(portals, name="mimx")
    second = routers.start(portals, name="mimy")
    first.wait_ready(), second.wait_ready()
    count = 1000
    in_lan2 = _receive(tools, lan2, count, "mim.dual")
    in_lan1 = _receive(tools, lan1, count, "mim.dual")
    sender = _send(tools, lan1, count, 2000, "--immediate", "mim.dual")
    assert sender.result(60)["sent"] == count
    assert _once(in_lan2.result(60), count)
    assert _once(in_lan1.result(60), count), "neither router brings a message back into its own domain"

    # Each router floods each message from LAN1 once. Into LAN2 it goes at least once and at most
    # once per router: a router that hears the other's copy first sends none of its own.
    wait_for(lambda: all(r.counters()[0]["immediate_topic_fragments_forwarded"] == count for r in (first, second)),
             15, message="each router forwarded each message once")
    sent_into_lan2 = [r.counters()[1]["immediate_topic_fragments_sent"] for r in (first, second)]
    assert all(sent <= count for sent in sent_into_lan2) and sum(sent_into_lan2) >= count, sent_into_lan2
    assert [r.counters()[0]["immediate_topic_fragments_sent"] for r in (first, second)] == [0, 0]


def test_immediate_messages_cross_a_peer_link(routers, tools, make_domain, tmp_path):
    lan1, lan2 = make_domain(), make_domain()
    port = free_port()
    a, b = linked_pair(routers, lan1, lan2, "mim", port=port)
    count = 500
    in_lan2 = _receive(tools, lan2, count, "mim.far")
    topicless = _receive(tools, lan2, count, "--topicless")
    link_pcap = tmp_path / "link.pcapng"
    with LiveCapture(capture_filter=f"tcp port {port}", path=link_pcap):
        topic_sender = _send(tools, lan1, count, 1000, "--immediate", "mim.far")
        bare_sender = _send(tools, lan1, count, 1000, "--topicless")
        assert topic_sender.result(60)["sent"] == bare_sender.result(60)["sent"] == count
        assert _once(in_lan2.result(60), count) and _once(topicless.result(60), count)
    wait_for(lambda: b.counters()[1]["immediate_topic_fragments_sent"] == count, 10, message="LAN2 sent them")
    assert a.counters()[1]["immediate_topic_fragments_sent"] == a.counters()[1]["immediate_topicless_fragments_sent"] \
        == count
    assert b.counters()[0]["immediate_topic_fragments_rcvd"] == b.counters()[0]["immediate_topicless_fragments_rcvd"] \
        == count
    assert b.counters()[0]["link_malformed"] == 0

    # On the link they are LBMC messages with the origin first: they decode cleanly.
    link = [f"tcp.port=={port},lbttcp"]
    assert_no_expert_info(link_pcap, link, min_severity="warn")
    frames = decode(link_pcap, link, fields=["lbmc.odomain.domain", "lbmc.ctxinst.ctxinst", "lbmc.topicname.topic"])
    domains = [value for frame in frames for value in frame.get("lbmc.odomain.domain", [])]
    assert domains.count("1") == 2 * count and set(domains) == {"1"}


def test_large_immediate_messages_cross_in_fragments_and_a_smaller_egress_drops_them(routers, tools, make_domain):
    lan1, lan3 = make_domain(), make_domain()
    lan2 = make_domain("context transport_lbtrm_datagram_max_size 1500")
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path)
                           + endpoint_xml("LAN3", 3, lan3.config_path)).wait_ready()
    count = 50
    big_in_lan3 = _receive(tools, lan3, count, "mim.big")
    small_in_lan2 = _receive(tools, lan2, count, "mim.small")
    big = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-P", 200, "-l", 20_000, "--immediate", "mim.big")
    small = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-P", 200, "-l", 1000, "--immediate",
                        "mim.small")
    assert big.result(60)["sent"] == small.result(60)["sent"] == count
    assert _once(big_in_lan3.result(60), count), "fragments forwarded one by one arrive whole"
    assert _once(small_in_lan2.result(60), count)

    # 20,000 bytes take three fragments in LAN1 (8192-byte datagrams); none fits LAN2's 1500.
    wait_for(lambda: router.counters()[1]["immediate_topic_fragments_dropped_size_error"] == 3 * count, 10,
             message="LAN2 dropped every fragment too large for it")
    lan1_counters, lan2_counters, lan3_counters = (router.counters()[i] for i in range(3))
    assert lan1_counters["immediate_topic_fragments_rcvd"] == 4 * count
    assert lan3_counters["immediate_topic_fragments_sent"] == 4 * count
    assert lan2_counters["immediate_topic_fragments_sent"] == count
    router.wait_for_log("UMR-3001-4")


def test_immediate_messages_cross_portals_that_share_a_worker(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path),
                           worker_group_xml("LAN1", "LAN2")).wait_ready()
    assert len(set(router.worker_pids().values())) == 1
    count = 500
    receiver = _receive(tools, lan2, count, "mim.grouped")
    assert _send(tools, lan1, count, 1000, "--immediate", "mim.grouped").result(60)["sent"] == count
    assert _once(receiver.result(60), count)
    wait_for(lambda: router.counters()[1]["immediate_topic_fragments_sent"] == count, 10, message="LAN2 sent them")
    assert router.counters()[0]["ring_records_malformed"] == router.counters()[1]["ring_records_malformed"] == 0
