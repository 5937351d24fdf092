"""Request/response across a router (seed section 2.6): the router is the responder to the
requester and the requester to the responder. Requests cross as data with their REQUEST header
rewritten to the router's portal in the responders' domain; responses come back through the
portal the request came in by. tshark shows each domain only ever asked to answer its own portal."""
import pytest

from router.um.context import Context
from router.um.requests import RequestOrigin

from tests.support.processes import wait_for
from tests.support.routers import endpoint_xml
from tests.support.tshark import LiveCapture, assert_no_expert_info, decode

pytestmark = pytest.mark.integration


def _umreq(tools, *args):
    return tools.start("router.cli.umreq", *args)


def _umresp(tools, *args):
    return tools.start("router.cli.umresp", *args)


def _ask_across(tools, responder_domain, requester_domain, topic: str, count: int, length: int, interest_arrived):
    """A responder, then (once the router has its interest) a requester: their --json summaries."""
    responder = _umresp(tools, "-c", responder_domain.config_path, "--json", "-C", count, "--timeout", 90, topic)
    wait_for(interest_arrived, 30, message="the router has a proxy receiver for the responder's topic")
    requester = _umreq(tools, "-c", requester_domain.config_path, "--json", "-R", count, "-l", length,
                       "--wait-timeout", 30, "--response-timeout", 10, topic)
    return requester.result(120), responder.result(60)


def test_requests_cross_the_router_and_every_response_comes_back(routers, tools, make_domain, tmp_path):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) +
                           endpoint_xml("LAN2", 2, lan2.config_path)).wait_ready()
    count = 40
    ports = (f"tcp portrange {lan1.tcp_low}-{lan1.request_high} or "
             f"tcp portrange {lan2.tcp_low}-{lan2.request_high}")
    pcap = tmp_path / "requests.pcapng"
    with LiveCapture(capture_filter=ports, path=pcap):
        asked, answered = _ask_across(tools, lan1, lan2, "svc.quote", count, 32,
                                      lambda: router.counters()[1]["receiver_topics"] == 1)
    assert (asked["requests"], asked["answered"], asked["unanswered"]) == (count, count, 0), asked
    assert answered["requests"] == answered["responded"] == count, answered
    wait_for(lambda: router.counters()[1]["unicast_data_msgs_sent"] == count, 10,
             message="LAN2 sent every response on to the requester")
    lan1_counters, lan2_counters = router.counters()[0], router.counters()[1]
    assert lan2_counters["transport_topic_req_fragments_rcvd"] == count, lan2_counters
    assert lan1_counters["transport_topic_req_fragments_sent"] == count, lan1_counters
    assert lan1_counters["proxy_requests"] == count
    assert lan1_counters["unicast_data_msgs_rcvd"] == lan1_counters["unicast_data_msgs_forwarded"] == count
    assert lan1_counters["unicast_data_msgs_rcvd_unknown_fwd"] == 0

    # The wire: in LAN2 the requests name the requester's own request port; in LAN1 (the same
    # requests, sent on by the router's proxy source) they name the router's LAN1 request port.
    source_ports = (min(lan1.tcp_low, lan2.tcp_low), max(lan1.tcp_high, lan2.tcp_high))
    request_ports = (min(lan1.request_low, lan2.request_low), max(lan1.request_high, lan2.request_high))
    decode_as = [f"tcp.port=={port},lbttcp" for low, high in (source_ports, request_ports)
                 for port in range(low, high + 1)]
    prefs = [f"lbttcp.source_port_low:{source_ports[0]}", f"lbttcp.source_port_high:{source_ports[1]}",
             f"lbttcp.request_port_low:{request_ports[0]}", f"lbttcp.request_port_high:{request_ports[1]}"]
    assert_no_expert_info(pcap, decode_as, prefs, min_severity="warn")
    frames = decode(pcap, decode_as, prefs, fields=["tcp.srcport", "lbmc.tcp_request.port",
                                                    "lbmc.tcp_request.qidx", "tcp.dstport"])
    named = {}
    for frame in frames:
        for port in frame.get("lbmc.tcp_request.port", []):
            sender = int(frame["tcp.srcport"][0])
            domain = "LAN1" if lan1.tcp_low <= sender <= lan1.tcp_high else "LAN2"
            named.setdefault(domain, set()).add(int(port))
    assert named.get("LAN2") and all(lan2.request_low <= p <= lan2.request_high for p in named["LAN2"]), named
    assert named.get("LAN1") and all(lan1.request_low <= p <= lan1.request_high for p in named["LAN1"]), named
    # Responses: the responder answers the router's LAN1 port, the router answers the requester.
    responses_to = {int(f["tcp.dstport"][0]) for f in frames
                    if f.get("tcp.dstport") and not f.get("lbmc.tcp_request.port")
                    and (lan1.request_low <= int(f["tcp.dstport"][0]) <= lan1.request_high
                         or lan2.request_low <= int(f["tcp.dstport"][0]) <= lan2.request_high)}
    assert any(lan1.request_low <= p <= lan1.request_high for p in responses_to), responses_to
    assert any(lan2.request_low <= p <= lan2.request_high for p in responses_to), responses_to

    # Something answers the router's LAN1 request port with an index the router never handed
    # out: counted as received with unknown forwarding info and logged, not forwarded; nothing breaks.
    stranger = Context(**lan1.overrides())
    try:
        stranger.respond(RequestOrigin("127.0.0.1", min(named["LAN1"]), 0xFFFF0000), b"nobody asked")
        wait_for(lambda: router.counters()[0]["unicast_data_msgs_rcvd_unknown_fwd"] == 1, 10,
                 message="the stray response is counted")
    finally:
        stranger.close()
    assert router.counters()[0]["unicast_data_msgs_forwarded"] == count
    router.wait_for_log("UMR-3004-3")


def test_requests_and_responses_cross_two_routers_hop_by_hop(routers, tools, make_domain):
    """LAN1 - router A - peer link - router B - LAN2: the requester in LAN1, the responder in LAN2.
    Each peer portal maps the requests it sends over the link; responses come back over it."""
    from tests.support.peer_links import linked_pair
    lan1, lan2 = make_domain(), make_domain()
    a, b = linked_pair(routers, lan1, lan2, "req")
    count = 30
    asked, answered = _ask_across(tools, lan2, lan1, "svc.far", count, 100,
                                  lambda: a.counters()[0]["receiver_topics"] == 1)
    assert (asked["answered"], asked["unanswered"]) == (count, 0), asked
    assert answered["responded"] == count, answered
    wait_for(lambda: a.counters()[0]["unicast_data_msgs_sent"] == count, 10,
             message="router A's LAN1 portal sent every response to the requester")
    a_lan1, a_link = a.counters()[0], a.counters()[1]
    b_link, b_lan2 = b.counters()[0], b.counters()[1]
    assert a_lan1["transport_topic_req_fragments_rcvd"] == count, a_lan1
    assert a_link["transport_topic_req_fragments_sent"] == a_link["proxy_requests"] == count, a_link
    assert b_link["transport_topic_req_fragments_rcvd"] == count, b_link
    assert b_lan2["transport_topic_req_fragments_sent"] == b_lan2["proxy_requests"] == count, b_lan2
    assert b_lan2["unicast_data_msgs_forwarded"] == b_link["unicast_data_msgs_sent"] == count
    assert a_link["unicast_data_msgs_rcvd"] == a_link["unicast_data_msgs_forwarded"] == count, a_link
    assert a_link["unicast_data_msgs_rcvd_unknown_fwd"] == b_lan2["unicast_data_msgs_rcvd_unknown_fwd"] == 0


def test_requests_reach_a_responder_whose_domain_receives_over_lbt_ipc(routers, tools, make_domain):
    """The responder's domain gets the router's proxy source over LBT-IPC: the first request,
    sent before the responder has attached to that source's ring, is answered too."""
    lan1, lan2 = make_domain("source transport lbtipc"), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) +
                           endpoint_xml("LAN2", 2, lan2.config_path)).wait_ready()
    count = 20
    asked, answered = _ask_across(tools, lan1, lan2, "svc.ipc", count, 32,
                                  lambda: router.counters()[1]["receiver_topics"] == 1)
    assert (asked["answered"], asked["unanswered"]) == (count, 0), asked
    assert answered["responded"] == count, answered


def test_a_response_for_a_requester_that_is_gone_counts_as_dropped_not_sent(routers, make_domain):
    """The requester closes before its answer comes back: the router's portal in its domain cannot
    connect to its request port, so the response is dropped, and its counters say so."""
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) +
                           endpoint_xml("LAN2", 2, lan2.config_path)).wait_ready()
    responder, requester = Context(**lan1.overrides()), Context(**lan2.overrides())
    try:
        held = []
        responder.receiver("svc.gone", lambda message: held.append(message))
        wait_for(lambda: router.counters()[1]["receiver_topics"] == 1, 30,
                 message="the router has a proxy receiver for the responder's topic")
        source = requester.source("svc.gone")
        wait_for(lambda: source.receiver_count >= 1, 30, message="the router's proxy receiver joins")
        source.send_request(b"anyone?")
        wait_for(lambda: held, 30, message="the request reaches the responder")
        requester.close()                      # its request port with it
        held[0].respond(b"too late")
        wait_for(lambda: router.counters()[0]["unicast_data_msgs_forwarded"] == 1, 10,
                 message="the response is forwarded to the requester's domain")
        wait_for(lambda: router.counters()[1]["unicast_data_msgs_dropped_error"] == 1, 10,
                 message="the response to the closed requester is counted as dropped")
        lan2_counters = router.counters()[1]
        assert lan2_counters["unicast_data_msgs_sent"] == 0, lan2_counters
        assert lan2_counters["unicast_data_msg_bytes_dropped_error"] == len(b"too late"), lan2_counters
    finally:
        requester.close()
        responder.close()


def test_a_response_of_megabytes_crosses_one_router_whole(routers, make_domain):
    """A 6 MB response (UM puts back together up to 64 MB) is larger than one record of the ring
    between the router's portals: it crosses in pieces and reaches the requester whole, counted
    once as forwarded and once as sent."""
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) +
                           endpoint_xml("LAN2", 2, lan2.config_path)).wait_ready()
    responder, requester = Context(**lan1.overrides()), Context(**lan2.overrides())
    try:
        asked, answers = [], []
        responder.receiver("svc.bulk", asked.append)
        wait_for(lambda: router.counters()[1]["receiver_topics"] == 1, 30,
                 message="the router has a proxy receiver for the responder's topic")
        source = requester.source("svc.bulk")
        wait_for(lambda: source.receiver_count, 30, message="the router's proxy receiver joins")
        pending = source.send_request(b"everything", answers.append)
        wait_for(lambda: asked, 30, message="the request reaches the responder")
        answer = bytes(range(251)) * 24_000
        asked[0].respond(answer)
        wait_for(lambda: answers, 60, message="the response came back")
        assert len(answers) == 1 and answers[0].data == answer
        wait_for(lambda: router.counters()[1]["unicast_data_msgs_sent"] == 1, 10,
                 message="the requester's portal sent the response")
        assert router.counters()[0]["unicast_data_msgs_forwarded"] == 1
        assert router.counters()[0]["transport_topic_fragments_dropped_size_error"] == 0
        pending.close()
    finally:
        requester.close()
        responder.close()
