"""Large requests and responses across a peer link: LAN1 - router A - peer link - router B - LAN2,
the requester in LAN1, the responder in LAN2. UM sends a message larger than one LBMC message in
pieces (FRAG); a response crosses the link in pieces too and reaches the requester whole, once,
in order with the responder's other responses, counted once as a response sent on the link."""
import pytest

from router.um.context import Context

from tests.support.peer_links import linked_pair
from tests.support.processes import wait_for
from tests.support.routers import free_port
from tests.support.tshark import LiveCapture, assert_no_expert_info, decode

pytestmark = pytest.mark.integration

A_LAN1, A_LINK = 0, 1            # router A: its endpoint portal in LAN1, its peer portal
B_LINK, B_LAN2 = 0, 1            # router B: its peer portal, its endpoint portal in LAN2


def _pattern(size: int, seed: int) -> bytes:
    """Bytes whose every 64 KB piece differs, so a piece out of place or twice shows."""
    return bytes((seed + i * 7 + (i >> 16)) & 0xFF for i in range(size))


def _asked_across(requester: Context, responder: Context, router_a, topic: str, question: bytes):
    """The responder's receiver, then (once router A pulls the topic in) the requester's source
    and one request: (what the responder got, the responses that came back, the open request)."""
    asked, answers = [], []
    responder.receiver(topic, asked.append)
    wait_for(lambda: router_a.counters()[A_LAN1]["receiver_topics"] == 1, 30,
             message="router A has a proxy receiver for the responder's topic")
    source = requester.source(topic)
    wait_for(lambda: source.receiver_count, 30, message="router A's proxy receiver joins the requester's source")
    pending = source.send_request(question, answers.append)
    wait_for(lambda: asked, 30, message="the request reaches the responder")
    return asked, answers, pending


def test_responses_larger_than_one_lbmc_message_cross_a_peer_link_whole(routers, make_domain, tmp_path):
    lan1, lan2 = make_domain(), make_domain()
    port = free_port()
    a, b = linked_pair(routers, lan1, lan2, "lrs", port=port)
    requester, responder = Context(**lan1.overrides()), Context(**lan2.overrides())
    try:
        asked, answers, pending = _asked_across(requester, responder, a, "svc.large", b"send the lot")
        assert [m.data for m in asked] == [b"send the lot"]
        sent = [_pattern(200_000, 1), _pattern(1_000_000, 2), b"and that is all", _pattern(65_400, 3)]
        for data in sent:
            asked[0].respond(data)
        wait_for(lambda: len(answers) >= len(sent), 60, message="every response came back to the requester")
        assert [len(r.data) for r in answers] == [len(d) for d in sent]
        assert [r.data for r in answers] == sent            # whole, once, in order
        total = sum(len(d) for d in sent)
        wait_for(lambda: a.counters()[A_LAN1]["unicast_data_msgs_sent"] == len(sent), 10,
                 message="router A's LAN1 portal sent every response to the requester")
        b_link, a_link = b.counters()[B_LINK], a.counters()[A_LINK]
        assert (b_link["unicast_data_msgs_sent"], b_link["unicast_data_msg_bytes_sent"]) == (len(sent), total), b_link
        assert b_link["unicast_data_msgs_dropped_error"] == 0, b_link
        assert (a_link["unicast_data_msgs_rcvd"], a_link["unicast_data_msg_bytes_rcvd"]) == (len(sent), total), a_link
        assert a_link["unicast_data_msgs_forwarded"] == len(sent), a_link
        assert a_link["unicast_data_msgs_rcvd_unknown_fwd"] == 0 and a_link["link_malformed"] == 0, a_link

        # On the link, as Wireshark reads it (a UIM stream: the link's port as a request port):
        # pieces of at most 65,000 bytes, DESTINATION -> FRAG -> DATA, that it puts back together.
        # One response of a few pieces: a burst of megabytes outruns the capture on loopback.
        pcap = tmp_path / "link.pcapng"
        with LiveCapture(capture_filter=f"tcp port {port}", path=pcap):
            asked[0].respond(_pattern(150_000, 5))
            wait_for(lambda: len(answers) == len(sent) + 1, 30, message="the last response came back")
        assert answers[-1].data == _pattern(150_000, 5)
        pending.close()
        link = [f"tcp.port=={port},lbttcp"]
        prefs = ["lbmc.reassemble_fragments:TRUE", f"lbttcp.request_port_low:{port}",
                 f"lbttcp.request_port_high:{port}"]
        assert_no_expert_info(pcap, link, prefs)
        frames = decode(pcap, link, prefs, fields=["lbmc.msglen", "lbmc.frag.len", "lbmc.frag.offset",
                                                   "lbmc.destination.port", "lbmc.tidx"])
        pieces = [(int(o), int(n)) for f in frames for o, n in zip(f.get("lbmc.frag.offset", []),
                                                                   f.get("lbmc.frag.len", []))]
        assert [n for _, n in pieces] == [150_000] * 3 and pieces[0][0] == 0, pieces
        assert max(int(n) for f in frames for n in f.get("lbmc.msglen", [])) <= 65_000
    finally:
        requester.close()
        responder.close()


def test_a_request_larger_than_one_lbmc_message_crosses_a_peer_link_whole(routers, make_domain):
    """A 300,000-byte request goes in pieces (REQUEST -> FRAG -> DATA); every piece carries the
    same proxy request index over the link, so the responder gets it whole and its answer finds
    the requester."""
    lan1, lan2 = make_domain(), make_domain()
    a, b = linked_pair(routers, lan1, lan2, "lrq")
    requester, responder = Context(**lan1.overrides()), Context(**lan2.overrides())
    try:
        question = _pattern(300_000, 4)
        asked, answers, pending = _asked_across(requester, responder, a, "svc.upload", question)
        assert [m.data for m in asked] == [question]
        asked[0].respond(b"got %d bytes" % len(asked[0].data))
        wait_for(lambda: answers, 30, message="the answer came back")
        assert [r.data for r in answers] == [b"got 300000 bytes"]
        assert a.counters()[A_LINK]["proxy_requests"] == 1
        pending.close()
    finally:
        requester.close()
        responder.close()


def test_a_response_of_megabytes_crosses_the_routers_whole(routers, make_domain):
    """UM puts back together responses of up to 64 MB: one of 6 MB is larger than a ring record
    between the routers' workers, and still reaches the requester whole, counted once."""
    lan1, lan2 = make_domain(), make_domain()
    a, b = linked_pair(routers, lan1, lan2, "lmb")
    requester, responder = Context(**lan1.overrides()), Context(**lan2.overrides())
    try:
        asked, answers, pending = _asked_across(requester, responder, a, "svc.bulk", b"everything")
        answer = _pattern(6_000_000, 6)
        asked[0].respond(answer)
        wait_for(lambda: answers, 60, message="the response came back")
        assert len(answers) == 1 and answers[0].data == answer
        wait_for(lambda: a.counters()[A_LAN1]["unicast_data_msgs_sent"] == 1, 10,
                 message="router A's LAN1 portal sent the response to the requester")
        b_lan2, b_link, a_link = b.counters()[B_LAN2], b.counters()[B_LINK], a.counters()[A_LINK]
        assert b_lan2["unicast_data_msgs_forwarded"] == b_link["unicast_data_msgs_sent"] == 1, (b_lan2, b_link)
        assert a_link["unicast_data_msgs_forwarded"] == 1, a_link
        pending.close()
    finally:
        requester.close()
        responder.close()


def test_a_response_for_a_link_that_went_down_counts_as_dropped_not_sent(routers, make_domain):
    """The request crossed, then the link went down (router A stopped): router B's peer portal
    cannot send the response on, and says so in its response counters, not only in the link's."""
    lan1, lan2 = make_domain(), make_domain()
    a, b = linked_pair(routers, lan1, lan2, "lrd")
    requester, responder = Context(**lan1.overrides()), Context(**lan2.overrides())
    try:
        asked, answers, pending = _asked_across(requester, responder, a, "svc.down", b"still there?")
        a.stop()
        wait_for(lambda: b.counters()[B_LINK]["link_disconnects"] >= 1, 30, message="router B's link went down")
        dropped_before = b.counters()[B_LINK]["data_fragments_dropped_not_operational"]
        asked[0].respond(b"too late")
        wait_for(lambda: b.counters()[B_LAN2]["unicast_data_msgs_forwarded"] == 1, 10,
                 message="router B's LAN2 portal forwarded the response to its peer portal")
        wait_for(lambda: b.counters()[B_LINK]["data_fragments_dropped_not_operational"] > dropped_before, 10,
                 message="the link counted the response as not sent")
        b_link = b.counters()[B_LINK]
        assert b_link["unicast_data_msgs_sent"] == 0, b_link
        assert (b_link["unicast_data_msgs_dropped_error"], b_link["unicast_data_msg_bytes_dropped_error"]) == \
            (1, len(b"too late")), b_link
        pending.close()
    finally:
        requester.close()
        responder.close()
