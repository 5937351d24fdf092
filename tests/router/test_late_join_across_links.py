"""Late join and OTR across peer links: the proxy sources beyond a link keep nothing, so a
receiver's requests travel hop by hop to the originating source and its answers come back
(router.portals.peer_late_join), through one link or two (a transit router of peer portals only).
tshark reads the requests and answers on the link cleanly."""
import signal

import pytest

from tests.router.test_late_join import _first_run
from tests.support.peer_links import router_chain
from tests.support.processes import wait_for
from tests.support.tshark import LiveCapture, assert_no_expert_info, decode

pytestmark = pytest.mark.integration

_ORIGIN_RETAINS = ("source late_join 1", "source retransmit_retention_size_limit 100000000")
_OTR = ("receiver use_otr 1", "receiver otr_request_initial_delay 200", "receiver otr_request_minimum_interval 200")



@pytest.mark.parametrize("hops", [1, 2])
def test_a_late_receiver_beyond_links_gets_what_came_before_from_the_origin(routers, tools, make_domain, hops):
    lan1, lan_far = make_domain(*_ORIGIN_RETAINS), make_domain()
    chain, _ = router_chain(routers, lan1, lan_far, hops, f"ljx{hops}")
    first = 2000
    got = _first_run(tools, lan1, lan_far, first, f"lj.links.{hops}")
    assert (got["received"], got["gaps"], got["duplicates"]) == (first, 0, 0), got

    late = tools.umrcv("-c", lan_far.config_path, "--json", "-C", first, "--timeout", 120, f"lj.links.{hops}")
    got = late.result(120)
    assert (got["received"], got["retransmitted"], got["gaps"], got["duplicates"]) == (first, first, 0, 0), got
    per_source = next(iter(got["per_source"].values()))
    assert (per_source["first_seq"], per_source["last_seq"]) == (0, first - 1)

    # Every portal on the way passed requests on and answers back; none was left unrelayed.
    origin_side = chain[0].counters()
    far_side = chain[-1].counters()
    assert origin_side[0]["late_join_requests_relayed"] > 0 and origin_side[0]["late_join_answers_rcvd"] > 0
    assert origin_side[1]["late_join_requests_rcvd"] > 0 and origin_side[1]["late_join_answers_sent"] > 0
    assert far_side[0]["late_join_requests_relayed"] > 0 and far_side[0]["late_join_answers_rcvd"] > 0
    assert far_side[1]["late_join_requests_rcvd"] > 0 and far_side[1]["late_join_answers_sent"] > 0
    for router in chain[1:-1]:                     # a transit router: peer portal to peer portal
        towards_origin, towards_far = router.counters()[0], router.counters()[1]
        assert towards_origin["late_join_requests_relayed"] > 0 and towards_origin["late_join_answers_rcvd"] > 0
        assert towards_far["late_join_requests_rcvd"] > 0 and towards_far["late_join_answers_sent"] > 0
    for router in chain:
        for portal in router.counters().values():
            assert portal["late_join_requests_not_relayed"] == portal["link_malformed"] == 0, portal
            # Only answers to a request its requester repeated before the first answer came.
            assert portal["late_join_answers_unknown"] <= portal["late_join_requests_reasked"], portal


# 8 KB messages whole; 20 KB messages in three fragments each (the origin's datagram size 8,192):
# the far portal drops often in the middle of a message, and OTR asks for each missing fragment.
@pytest.mark.parametrize("count, length, origin_extra", [(2000, 8192, ()),
                                                         (800, 20000, ("context transport_tcp_datagram_max_size 8192",))],
                         ids=["whole", "fragmented"])
def test_what_a_far_portal_dropped_is_recovered_from_the_origin_across_the_link(routers, tools, make_domain, count,
                                                                               length, origin_extra):
    lan1 = make_domain(*_ORIGIN_RETAINS, *origin_extra)
    lan2 = make_domain(*_OTR)
    # A name per case: the two run at once on the suite's workers, and a router's name is its admin address.
    chain, _ = router_chain(routers, lan1, lan2, 1, f"otrx{length}", far_extra="      <max-queue>200000</max-queue>\n")
    far = chain[-1]
    fragments = -(-length // 8192) if origin_extra else 1
    stopped = tools.umrcv("-c", lan2.config_path, "--json", "-C", count, "--timeout", 120, "otr.links")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-l", length, "--linger", 60,
                         "--start-on-stdin", "otr.links")
    stopped.wait_for_stderr("Beginning of Transport Session", 60)
    stopped.proc.send_signal(signal.SIGSTOP)
    try:
        source.send_line()
        wait_for(lambda: far.counters()[1]["transport_topic_fragments_dropped_would_block"] > 0, 60,
                 message="the far LAN's portal dropping for the stopped receiver")
        wait_for(lambda: far.counters()[0]["transport_topic_fragments_rcvd"] >= count * fragments, 60,
                 message="every message at the far router")
    finally:
        stopped.proc.send_signal(signal.SIGCONT)
    got = stopped.result(120)
    dropped = far.counters()[1]["transport_topic_fragments_dropped_would_block"]
    assert (got["received"], got["unique"], got["gaps"], got["duplicates"], got["out_of_order"], got["malformed"]) \
        == (count, count, 0, 0, 0, 0), got
    assert got["unrecoverable_loss"] == 0, got
    if fragments == 1:
        assert got["otr_recovered"] == dropped, (dropped, got)
    else:                       # a message whose dropped fragments were recovered counts once
        assert 0 < got["otr_recovered"] <= dropped, (dropped, got)
    assert chain[0].counters()[0]["late_join_requests_relayed"] > 0
    assert far.counters()[0]["late_join_requests_relayed"] > 0


def test_tshark_reads_the_requests_and_answers_on_the_link(routers, tools, make_domain, tmp_path):
    lan1, lan2 = make_domain(*_ORIGIN_RETAINS), make_domain()
    chain, ports = router_chain(routers, lan1, lan2, 1, "ljxt")
    first = 50
    pcap = tmp_path / "link.pcapng"
    with LiveCapture(capture_filter=f"tcp port {ports[0]}", path=pcap):
        got = _first_run(tools, lan1, lan2, first, "lj.links.tshark")
        assert got["received"] == first, got
        late = tools.umrcv("-c", lan2.config_path, "--json", "-C", first, "--timeout", 120, "lj.links.tshark")
        got = late.result(120)
    assert (got["received"], got["retransmitted"]) == (first, first), got
    decode_as = [f"tcp.port=={ports[0]},lbttcp"]
    assert_no_expert_info(pcap, decode_as, min_severity="warn")
    frames = decode(pcap, decode_as, fields=[
        "lbmc.lji_req.transport_idx", "lbmc.lji_req.req_port", "lbmc.ume_lj_info.low_seqnum",
        "lbmc.ume_lj_info.high_seqnum", "lbmc.destination.port", "lbmc.ume_rxreq.seqnum", "lbmc.ume_rxreq.rx_port",
        "lbmc.advertisement.ad_flags.lj"])
    values = lambda field: [v for f in frames for v in f.get(field, [])]
    # The stream was advertised over the link as offering late join; its requests and answers crossed.
    assert any(v in ("1", "True") for v in values("lbmc.advertisement.ad_flags.lj"))
    assert values("lbmc.lji_req.transport_idx")
    # The late receiver's answer: the origin has everything from 0 (the early one joined before any).
    assert (0, first - 1) in zip((int(v, 0) for v in values("lbmc.ume_lj_info.low_seqnum")),
                                 (int(v, 0) for v in values("lbmc.ume_lj_info.high_seqnum")))
    assert sorted({int(v, 0) for v in values("lbmc.ume_rxreq.seqnum")}) == list(range(first))
    # Each answer is addressed to its requester: a request port the requests named.
    requesters = set(values("lbmc.lji_req.req_port")) | set(values("lbmc.ume_rxreq.rx_port"))
    assert values("lbmc.destination.port") and set(values("lbmc.destination.port")) <= requesters
