"""Unicast immediate messages across routers (spec/dro.md §2.5, §2.7): `TCP:domain:ip:port` reaches a
context in another domain, hop by hop; the receiver sees where it came from and can answer the same
way; a message for a domain no path reaches is dropped, counted and logged. tshark decodes every
frame on the request ports and the peer link, DESTINATION included, with no expert warnings."""
import socket

import pytest

from router.um.context import Context
from router.um.unicast_immediate import NoRouteToDomain
from router.um.wire.lbmr import RemoteDomainRoute

from tests.support.peer_links import converged, linked_pair, routerctl, start
from tests.support.processes import wait_for
from tests.support.routers import FAST_ROUTING, endpoint_xml, free_port
from tests.support.tshark import LiveCapture, assert_no_expert_info, decode

pytestmark = pytest.mark.integration


class Inbox:
    """What a context's immediate-message callbacks and one topic receiver got."""

    def __init__(self, context: Context, topic: str):
        self.topicless, self.on_topic = [], []
        context.immediate_receiver(self.topicless.append)
        context.receiver(topic, self.on_topic.append)


def _routes_heard(context: Context, domain: int) -> bool:
    return context.resolver.domain_routes.router_for(domain) is not None


def _two_lans(routers, make_domain):
    """LAN1 (domain 1) and LAN2 (domain 2) joined by one router: (lan1, lan2, router)."""
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path),
                           FAST_ROUTING).wait_ready()
    return lan1, lan2, router


def _request_ports(*lans) -> str:
    """A capture filter for the domains' request ports alone: the range from one domain's to the
    other's may hold other tests' ports, their connections older than the capture."""
    return " or ".join(f"tcp portrange {lan.request_low}-{lan.request_high}" for lan in lans)


def _said_address(tool, what: str) -> str:
    """The ip:port a tool started with --unicast says it takes `what` at."""
    tool.wait_for_stderr(f"{what} to TCP:", 30)
    line = next(line for line in tool.stderr.splitlines() if f"{what} to TCP:" in line)
    return line.split("TCP:", 1)[1].split(" ", 1)[0]


def test_a_message_crosses_one_router_and_the_answer_comes_back(routers, make_domain, tmp_path):
    lan1, lan2, router = _two_lans(routers, make_domain)
    sender, target = Context(**lan1.overrides()), Context(**lan2.overrides())
    try:
        got = Inbox(target, "orders")
        replies = Inbox(sender, "replies")
        target_ip, target_port = target.request_address()
        with LiveCapture(capture_filter=f"udp port {lan1.port}", path=tmp_path / "lan1.pcapng"):
            wait_for(lambda: _routes_heard(sender, 2) and _routes_heard(target, 1), 20,
                     message="each domain's portal says it reaches the other domain")
        assert sender.resolver.domain_id == 1 and target.resolver.domain_id == 2
        # What LAN1 heard: the router's LAN1 portal reaches domain 2 at its request port.
        lbmr = [f"udp.port=={lan1.port},lbmr"]
        assert_no_expert_info(tmp_path / "lan1.pcapng", lbmr)
        routes = [f for f in decode(tmp_path / "lan1.pcapng", lbmr, fields=["lbmr.remote_domain_route.domain",
                                                                             "lbmr.remote_domain_route.ip",
                                                                             "lbmr.remote_domain_route.port"])
                  if f.get("lbmr.remote_domain_route.domain")]
        assert routes and routes[0]["lbmr.remote_domain_route.domain"] == ["2"], routes
        assert (routes[0]["lbmr.remote_domain_route.ip"][0], int(routes[0]["lbmr.remote_domain_route.port"][0])) \
            == sender.resolver.domain_routes.router_for(2)

        ports = _request_ports(lan1, lan2)
        pcap = tmp_path / "uim.pcapng"
        with LiveCapture(capture_filter=ports, path=pcap):
            for n in range(20):
                sender.send_unicast_immediate(f"TCP:2:{target_ip}:{target_port}", None, b"topicless %d" % n)
            sender.send_unicast_immediate(f"TCP:2:{target_ip}:{target_port}", "orders", b"on a topic")
            wait_for(lambda: len(got.topicless) == 20 and len(got.on_topic) == 1, 20,
                     message="every message arrived in domain 2")
            # The source is an address in the sender's domain, through the routers: answer it.
            source = got.topicless[0].source
            assert source.startswith("TCP:1:"), source
            target.send_unicast_immediate(source, "replies", b"answer")
            wait_for(lambda: len(replies.on_topic) == 1, 20, message="the answer came back to domain 1")
        assert [m.data for m in got.topicless] == [b"topicless %d" % n for n in range(20)]   # in order
        assert got.on_topic[0].data == b"on a topic" and got.on_topic[0].topic == "orders"
        assert replies.on_topic[0].data == b"answer" and replies.on_topic[0].source.startswith("TCP:2:")

        counters = router.counters()
        assert counters[0]["unicast_data_msgs_rcvd"] == counters[0]["unicast_data_msgs_forwarded"] == 21, counters[0]
        assert counters[1]["unicast_data_msgs_sent"] == 21, counters[1]
        assert counters[1]["unicast_data_msgs_rcvd"] == counters[0]["unicast_data_msgs_sent"] == 1
        assert counters[0]["unicast_data_msgs_dropped_no_route"] == 0

        low, high = min(lan1.request_low, lan2.request_low), max(lan1.request_high, lan2.request_high)
        decode_as = [f"tcp.port=={port},lbttcp" for port in range(low, high + 1)]
        prefs = [f"lbttcp.request_port_low:{low}", f"lbttcp.request_port_high:{high}"]
        assert_no_expert_info(pcap, decode_as, prefs, min_severity="warn")
        frames = decode(pcap, decode_as, prefs, fields=["lbmc.destination.domain_id", "lbmc.destination.port",
                                                        "lbmc.destination.hops_taken",
                                                        "lbmc.destination.orig_domain_id"])
        seen = {(int(f["lbmc.destination.domain_id"][i]), int(f["lbmc.destination.hops_taken"][i]),
                 int(f["lbmc.destination.orig_domain_id"][i]))
                for f in frames for i in range(len(f.get("lbmc.destination.domain_id", [])))}
        # Into the router as the sender made them (it knew its domain), out of it one hop on.
        assert {(2, 0, 1), (2, 1, 1), (1, 0, 2), (1, 1, 2)} <= seen, seen
    finally:
        sender.close()
        target.close()


def test_a_message_crosses_a_peer_link_and_no_route_is_counted(routers, make_domain, tmp_path):
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    port = free_port()
    a, b = linked_pair(routers, lan1, lan2, "uim", port=port, timeout=30)
    sender, target, alone = Context(**lan1.overrides()), Context(**lan2.overrides()), Context(**lan3.overrides())
    try:
        got = Inbox(target, "orders")
        target_ip, target_port = target.request_address()
        wait_for(lambda: _routes_heard(sender, 2), 20, message="router A says in LAN1 that it reaches domain 2")
        with LiveCapture(capture_filter=f"tcp port {port}", path=tmp_path / "link.pcapng"):
            for n in range(10):
                sender.send_unicast_immediate(f"TCP:2:{target_ip}:{target_port}", "orders", b"hop %d" % n)
            wait_for(lambda: len(got.on_topic) == 10, 20, message="every message crossed the link")
        assert [m.data for m in got.on_topic] == [b"hop %d" % n for n in range(10)]
        assert got.on_topic[0].source.startswith("TCP:1:")
        # A message of 300,000 bytes goes in five pieces, each routed as it is, and arrives whole.
        big = bytes(range(250)) * 1200
        sender.send_unicast_immediate(f"TCP:2:{target_ip}:{target_port}", "orders", big)
        wait_for(lambda: len(got.on_topic) == 11, 20, message="the large message crossed")
        assert got.on_topic[10].data == big
        wait_for(lambda: a.counters()[1]["unicast_data_msgs_sent"] == 15, 10, message="A's peer portal sent them")
        assert b.counters()[0]["unicast_data_msgs_rcvd"] == b.counters()[0]["unicast_data_msgs_forwarded"] == 15
        assert b.counters()[1]["unicast_data_msgs_sent"] == 15            # 10 messages and 5 pieces
        link = decode(tmp_path / "link.pcapng", [f"tcp.port=={port},lbttcp"], [],
                      fields=["lbmc.destination.domain_id", "lbmc.destination.hops_taken", "lbmc.topicname.topic"])
        # Under load the link batches several messages into one segment: each field is a list.
        crossed = [(hops, topic) for f in link
                   for hops, topic in zip(f.get("lbmc.destination.hops_taken", []), f.get("lbmc.topicname.topic", []))]
        assert crossed.count(("1", "orders")) == 10, [f for f in link if f.get("lbmc.destination.hops_taken")]
        assert_no_expert_info(tmp_path / "link.pcapng", [f"tcp.port=={port},lbttcp"], [], min_severity="warn")

        # Domain 7 is nowhere: the application is told at once, nothing is sent.
        with pytest.raises(NoRouteToDomain, match="domain 7"):
            sender.send_unicast_immediate(f"TCP:7:{target_ip}:{target_port}", None, b"lost")
        assert sender.counters()["uim_no_route"] == 1
        # A message to router A's LAN1 port for a domain it does not reach (the sender used an
        # address it learnt some other way): dropped, counted, logged, like the DRO's Gwd-6361-123.
        router_port = sender.resolver.domain_routes.router_for(2)
        from router.um.unicast_immediate import encode_uim
        from router.um.wire.lbmc_headers import Destination
        stray = encode_uim(0, None, b"nowhere", Destination(7, target_ip, target_port, 0, 1, "127.0.0.1", 1))
        alone.responder.send_unicast(router_port, [stray])
        wait_for(lambda: a.counters()[0]["unicast_data_msgs_dropped_no_route"] == 1, 10,
                 message="router A counted the message it had no route for")
        wait_for(lambda: "UMR-3005-1" in a.log(), 10, message="and logged it")
        # A message that does not parse, at the same port: counted and logged; the router goes on.
        junk = bytearray(stray)
        junk[13] = 8                            # DESTINATION says it is 8 bytes long, not 28
        with socket.create_connection(router_port, timeout=10) as bad:
            bad.sendall(bytes(junk))
            wait_for(lambda: a.counters()[0]["unicast_malformed"] == 1, 10, message="the bad message is counted")
        wait_for(lambda: "does not parse" in a.log(), 10, message="and logged")
        sender.send_unicast_immediate(f"TCP:2:{target_ip}:{target_port}", "orders", b"still routed")
        wait_for(lambda: got.on_topic[-1].data == b"still routed", 20, message="the router still routes")
    finally:
        for context in (sender, target, alone):
            context.close()


def test_the_tools_send_across_across_the_router(routers, tools, make_domain):
    """umsrc --unicast TCP:domain:ip:port to a umrcv --unicast in the other domain: every message, in order."""
    lan1, lan2, _ = _two_lans(routers, make_domain)
    count = 200
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "-C", count, "--timeout", 60, "--unicast", "--topicless")
    ip_port = _said_address(receiver, "unicast immediate messages")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-l", 64, "--topicless",
                         "--unicast", f"TCP:2:{ip_port}", "--wait-timeout", 30)
    sent, got = source.result(60), receiver.result(60)
    assert sent["sent"] == count
    assert (got["received"], got["gaps"], got["duplicates"], got["out_of_order"]) == (count, 0, 0, 0), got


def test_a_message_crosses_a_transit_domain_to_the_next_router(routers, make_domain):
    """A joins D1-D2, B joins D2-D3: A's D2 portal hands the message to B's D2 portal, the one that
    says in D2 it reaches D3. A message for D2 itself goes straight to its target there."""
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    a = start(routers, endpoint_xml("E1", 1, lan1.config_path) + endpoint_xml("E2", 2, lan2.config_path), "uta")
    b = start(routers, endpoint_xml("E2", 2, lan2.config_path) + endpoint_xml("E3", 3, lan3.config_path), "utb")
    a.wait_ready(), b.wait_ready()
    wait_for(lambda: converged([a, b], 2), 30, message="route-info crossed the transit domain")
    sender = Context(**lan1.overrides())
    far, middle = Context(**lan3.overrides()), Context(**lan2.overrides())
    try:
        far_got, middle_got = Inbox(far, "t"), Inbox(middle, "t")
        far_ip, far_port = far.request_address()
        middle_ip, middle_port = middle.request_address()
        wait_for(lambda: _routes_heard(sender, 3) and _routes_heard(sender, 2), 20,
                 message="A says in D1 it reaches D2 and D3")
        # In D2, only B says it reaches D3 (A's path to D3 leaves by its D2 portal: B's to offer).
        wait_for(lambda: middle.resolver.domain_routes.domains() == {1, 3}, 20, message="D2 hears A and B")
        # routerctl topics says what each portal offers, and what it heard the other router offer.
        a_e2, b_e2 = routerctl(a, "topics")["portals"]["E2"], routerctl(b, "topics")["portals"]["E2"]
        assert (a_e2["unicast_domains"], b_e2["unicast_domains"]) == ([1], [3])
        assert a_e2["unicast_routers_on_domain"] == [f"{b_e2['unicast_address']} reaches [3]"], a_e2
        assert middle.resolver.domain_routes.router_for(3) not in (None, sender.resolver.domain_routes.router_for(3))
        for n in range(5):
            sender.send_unicast_immediate(f"TCP:3:{far_ip}:{far_port}", "t", b"far %d" % n)
        sender.send_unicast_immediate(f"TCP:2:{middle_ip}:{middle_port}", None, b"middle")
        wait_for(lambda: len(far_got.on_topic) == 5 and len(middle_got.topicless) == 1, 20,
                 message="both targets got their messages")
        assert [m.data for m in far_got.on_topic] == [b"far %d" % n for n in range(5)]
        assert far_got.on_topic[0].source.startswith("TCP:1:"), far_got.on_topic[0]
        assert middle_got.topicless[0].source.startswith("TCP:1:"), middle_got.topicless[0]
        a_counts, b_counts = a.counters(), b.counters()
        assert a_counts[0]["unicast_data_msgs_forwarded"] == 6 and a_counts[1]["unicast_data_msgs_sent"] == 6
        assert b_counts[0]["unicast_data_msgs_rcvd"] == b_counts[0]["unicast_data_msgs_forwarded"] == 5
        assert b_counts[1]["unicast_data_msgs_sent"] == 5
    finally:
        for context in (sender, far, middle):
            context.close()


@pytest.mark.parametrize("linked", [False, True], ids=["one router", "peer link"])
def test_a_unicast_request_from_another_domain_is_answered_through_the_routers(routers, make_domain, tmp_path,
                                                                                linked):
    """lbm_unicast_immediate_request to TCP:2:ip:port: the target answers the RequestMessage it got,
    and each response goes back to domain 1 by its DESTINATION, hop by hop, to the requester."""
    if linked:
        lan1, lan2 = make_domain(), make_domain()
        first, last = linked_pair(routers, lan1, lan2, "uq", timeout=30)
    else:
        lan1, lan2, first = _two_lans(routers, make_domain)
        last = first
    requester, target = Context(**lan1.overrides()), Context(**lan2.overrides())
    try:
        asked, answers = [], []
        target.receiver("svc.quote", asked.append)
        ip, port = target.request_address()
        wait_for(lambda: _routes_heard(requester, 2) and _routes_heard(target, 1), 20,
                 message="each domain hears its router's offer")
        low, high = min(lan1.request_low, lan2.request_low), max(lan1.request_high, lan2.request_high)
        pcap = tmp_path / "requests.pcapng"
        with LiveCapture(capture_filter=_request_ports(lan1, lan2), path=pcap), \
                requester.send_unicast_immediate_request(f"TCP:2:{ip}:{port}", "svc.quote", b"bid?",
                                                         answers.append):
            wait_for(lambda: len(asked) == 1, 20, message="the request crossed")
            request = asked[0]
            assert request.data == b"bid?" and request.origin.domain == 1 and request.source.startswith("TCP:1:")
            for n in range(3):
                request.respond(b"offer %d" % n)
            wait_for(lambda: len(answers) == 3, 20, message="every response came back to domain 1")
        decode_as = [f"tcp.port=={p},lbttcp" for p in range(low, high + 1)]
        prefs = [f"lbttcp.request_port_low:{low}", f"lbttcp.request_port_high:{high}"]
        assert_no_expert_info(pcap, decode_as, prefs, min_severity="warn")
        frames = decode(pcap, decode_as, prefs, fields=["lbmc.tcp_request.qidx", "lbmc.topicname.topic",
                                                        "lbmc.destination.domain_id"])
        requests = [f for f in frames if f.get("lbmc.tcp_request.qidx")]
        assert requests and all("svc.quote" in f["lbmc.topicname.topic"] for f in requests), requests
        # Responses routed to domain 1, each leg (a segment may carry several: each field is a list).
        routed_back = sum(f.get("lbmc.destination.domain_id", []).count("1") for f in frames)
        assert routed_back >= 3, frames
        assert [a.data for a in answers] == [b"offer %d" % n for n in range(3)]
        assert answers[0].source.startswith("TCP:2:")
        assert requester.counters()["responses_received"] == 3
        # Each router moved the request one way and the responses the other.
        wait_for(lambda: last.counters()[len(last.counters()) - 1]["unicast_data_msgs_sent"] == 1, 10,
                 message="the request went into LAN2")
        assert first.counters()[0]["unicast_data_msgs_sent"] == 3, first.counters()[0]
    finally:
        requester.close()
        target.close()


def test_umreq_asks_a_umresp_in_another_domain_by_its_address(routers, tools, make_domain):
    lan1, lan2, _ = _two_lans(routers, make_domain)
    count = 20
    responder = tools.start("router.cli.umresp", "-c", lan2.config_path, "--json", "-C", count, "--timeout", 60,
                            "--unicast", "svc.quote")
    ip_port = _said_address(responder, "unicast immediate requests")
    requester = tools.start("router.cli.umreq", "-c", lan1.config_path, "--json", "-R", count, "-l", 32,
                            "--unicast", f"TCP:2:{ip_port}", "--wait-timeout", 30, "--response-timeout", 10,
                            "svc.quote")
    asked, answered = requester.result(60), responder.result(60)
    assert (asked["requests"], asked["answered"], asked["unanswered"]) == (count, count, 0), asked
    assert answered["requests"] == answered["responded"] == count, answered


def test_a_large_request_and_its_large_answer_cross_a_udp_peer_link(routers, make_domain):
    """Pieces are small enough for a peer link's UDP datagrams: a 200,000-byte request and a
    150,000-byte response both cross a link with a UDP data path whole."""
    from tests.router.test_peer_udp import udp_linked_pair
    lan1, lan2 = make_domain(), make_domain()
    udp_linked_pair(routers, lan1, lan2, "uud")
    requester, target = Context(**lan1.overrides()), Context(**lan2.overrides())
    try:
        asked, answers = [], []
        target.immediate_receiver(asked.append)
        ip, port = target.request_address()
        wait_for(lambda: _routes_heard(requester, 2) and _routes_heard(target, 1), 20,
                 message="each domain hears its router's offer")
        question, answer = bytes(range(200)) * 1000, bytes(range(150)) * 1000
        with requester.send_unicast_immediate_request(f"TCP:2:{ip}:{port}", None, question, answers.append):
            wait_for(lambda: len(asked) == 1, 20, message="the request crossed whole")
            assert asked[0].data == question
            asked[0].respond(answer)
            wait_for(lambda: len(answers) == 1, 20, message="the answer came back whole")
        assert answers[0].data == answer
    finally:
        requester.close()
        target.close()


def test_domain_route_bounds_set_how_often_a_portal_tells_its_domain_what_it_reaches(routers, make_domain):
    """<domain-route max-interval="200"> on LAN1's portal: its domain hears the routes about five
    times a second once they settle; LAN2's portal, on the DRO's default 1000 ms, about once."""
    lan1, lan2 = make_domain(), make_domain()
    fast = '      <topic-resolution><domain-route min-interval="50" max-interval="200"/></topic-resolution>\n'
    routers.start(endpoint_xml("LAN1", 1, lan1.config_path, after_config=fast)
                  + endpoint_xml("LAN2", 2, lan2.config_path), FAST_ROUTING).wait_ready()
    heard = {1: [], 2: []}
    contexts = [Context(**lan.overrides()) for lan in (lan1, lan2)]
    try:
        for domain, context in zip((1, 2), contexts):
            context.add_lbmr_listener(lambda packet, address, got=heard[domain]:
                                      got.append(packet.body.domains) if isinstance(packet.body, RemoteDomainRoute)
                                      else None)
        wait_for(lambda: len(heard[1]) >= 20, 30, message="LAN1 heard its portal's routes 20 times")
        assert {tuple(domains) for domains in heard[1]} == {(2,)} and {tuple(d) for d in heard[2]} <= {(1,)}
        assert len(heard[2]) <= len(heard[1]) // 2, (len(heard[1]), len(heard[2]))
    finally:
        for context in contexts:
            context.close()


def test_a_message_for_a_target_that_is_gone_counts_as_dropped_not_sent(routers, make_domain):
    """The target context closed: the router's portal in its domain cannot connect to its request
    port, so the message is dropped, and its counters say so."""
    lan1, lan2, router = _two_lans(routers, make_domain)
    sender, target = Context(**lan1.overrides()), Context(**lan2.overrides())
    try:
        # Once the router's portals have said which domains they reach, their request ports are
        # open: the port the target gives up is not taken again by the router's own LAN2 context.
        wait_for(lambda: _routes_heard(sender, 2) and _routes_heard(target, 1), 20,
                 message="LAN1's portal says it reaches domain 2, LAN2's domain 1")
        target_ip, target_port = target.request_address()
        target.close()                                  # its request port with it
        sender.send_unicast_immediate(f"TCP:2:{target_ip}:{target_port}", None, b"anyone home?")
        wait_for(lambda: router.counters()[0]["unicast_data_msgs_forwarded"] == 1, 10,
                 message="the message is forwarded to the target's domain")
        wait_for(lambda: router.counters()[1]["unicast_data_msgs_dropped_error"] == 1, 10,
                 message="the message for the closed target is counted as dropped")
        assert router.counters()[1]["unicast_data_msgs_sent"] == 0, router.counters()[1]
    finally:
        sender.close()
        target.close()
