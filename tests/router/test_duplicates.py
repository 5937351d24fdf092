"""<sqn-window>: a source's frames that reach an egress a second time are dropped there, counted as
the DRO counts "dropped (duplicate)", and each number crosses into the far domain (or over a peer
link) once.

What sends the same numbers twice here is the origin's own transport: the test's source sends
0..99, then frames numbered 50..99 again, then 100..149, the way a path change would bring a
stretch twice. Receivers would hide a duplicate (they drop numbers they delivered), so the wire
into the far domain is what shows each number once.
"""
from __future__ import annotations

import pytest

from router.um.context import Context
from router.um.wire.lbmc import LBMC_TYPE_MESSAGE, MESSAGE_HEADER, NHDR_DATA
from tests.router.test_sequence_info_across_routers import _Collector
from tests.support.peer_links import router_chain
from tests.support.processes import wait_for
from tests.support.routers import endpoint_xml
from tests.support.tshark import LiveCapture, decode

pytestmark = pytest.mark.integration


def _send_with_a_repeat(source) -> None:
    """0..99, 50..99 again (as raw frames of the source's topic index), 100..149."""
    for n in range(100):
        source.send(b"m%05d" % n)
    source.flush()
    again = b"".join(MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, 12 + 6, source.index, n) + b"m%05d" % n
                     for n in range(50, 100))
    source.session.send_raw(again, count=50, now=True)
    for n in range(100, 150):
        source.send(b"m%05d" % n)
    source.flush()


def _sqns_on_the_wire(pcap, low: int, high: int) -> list[int]:
    decode_as = [f"tcp.port=={port},lbttcp" for port in range(low, high + 1)]
    return [int(sqn) for f in decode(pcap, decode_as, fields=["lbmc.sqn"]) for sqn in f.get("lbmc.sqn", [])]


def test_an_endpoint_sends_each_number_into_its_domain_once(routers, make_domain, tmp_path):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path)
                           + endpoint_xml("LAN2", 2, lan2.config_path)).wait_ready()
    got = _Collector()
    pcap = tmp_path / "lan2.pcapng"
    with Context(**lan2.overrides()) as receiving, Context(**lan1.overrides()) as sending:
        source = sending.source("dup.endpoint")
        receiving.receiver("dup.endpoint", on_batch=got.on_batch, on_event=got.on_event)
        wait_for(lambda: got.joined, 30, message="the receiver joined the proxy source")
        with LiveCapture(capture_filter=f"tcp portrange {lan2.tcp_low}-{lan2.tcp_high}", path=pcap):
            _send_with_a_repeat(source)
            wait_for(lambda: len(got.sqns) >= 150, 30, message="every message in LAN2")
            wait_for(lambda: router.counters()[1]["transport_topic_fragments_dropped_duplicate"] == 50, 10,
                     message="the repeated stretch dropped at LAN2's proxy source")
    assert got.sqns == list(range(150))
    counters = router.counters()[1]
    assert counters["transport_topic_fragment_bytes_dropped_duplicate"] == 50 * 18, counters
    assert counters["transport_topic_fragments_sent"] == 150, counters
    assert sorted(_sqns_on_the_wire(pcap, lan2.tcp_low, lan2.tcp_high)) == list(range(150))
    wait_for(lambda: "UMR-3001-6" in router.log(), 10, message="the drop is logged")
    line = next(line for line in router.log().splitlines() if "UMR-3001-6" in line)
    assert "[information]" in line and "portal LAN2" in line and "50 frames of topic dup.endpoint" in line, line


def test_a_peer_link_carries_each_number_once(routers, make_domain):
    lan1, lan_far = make_domain(), make_domain()
    chain, _ = router_chain(routers, lan1, lan_far, 1, "dup")
    got = _Collector()
    with Context(**lan_far.overrides()) as receiving, Context(**lan1.overrides()) as sending:
        source = sending.source("dup.peer")
        receiving.receiver("dup.peer", on_batch=got.on_batch, on_event=got.on_event)
        wait_for(lambda: got.joined, 30, message="the receiver joined the far proxy source")
        _send_with_a_repeat(source)
        wait_for(lambda: len(got.sqns) >= 150, 30, message="every message in the far domain")
        link = lambda: chain[0].counters()[1]
        wait_for(lambda: link()["data_fragments_dropped_duplicate"] == 50, 10,
                 message="the repeated stretch dropped at the origin's peer portal")
    assert got.sqns == list(range(150))
    assert link()["data_fragment_bytes_dropped_duplicate"] == 50 * 18
    # Nothing reached the far router twice: its proxy source had nothing left to drop.
    assert chain[-1].counters()[1]["transport_topic_fragments_dropped_duplicate"] == 0
    wait_for(lambda: "UMR-3001-6" in chain[0].log(), 10, message="the drop is logged")


def test_a_source_heard_by_two_portals_of_a_router_goes_on_from_one(routers, tools, make_domain):
    """A bridges D1-D2, C bridges D1-D4, B joins D2, D4 and D3, with receivers in D2, D4 and D3.
    D1's source then has a copy in D2 (A's proxy source) and one in D4 (C's), and B's portals on
    both pull the topic for D3. Only the copy that comes the way of the D1 -> D3 path goes on:
    B's proxy source in D3 gets each message once, nothing to drop."""
    from tests.support.peer_links import converged, start
    d1, d2, d3, d4 = make_domain(), make_domain(), make_domain(), make_domain()
    a = start(routers, endpoint_xml("E1", 1, d1.config_path) + endpoint_xml("E2", 2, d2.config_path), "twa")
    c = start(routers, endpoint_xml("E1", 1, d1.config_path) + endpoint_xml("E4", 4, d4.config_path), "twc")
    b = start(routers, endpoint_xml("E2", 2, d2.config_path) + endpoint_xml("E4", 4, d4.config_path)
              + endpoint_xml("E3", 3, d3.config_path), "twb")
    for router in (a, b, c):
        router.wait_ready()
    wait_for(lambda: converged([a, b, c], 3), 30, message="route-info crossed D1, D2 and D4")
    count, topic = 2000, "two.ways"
    receivers = [tools.umrcv("-c", d.config_path, "--json", "-C", count, "--timeout", 120, topic)
                 for d in (d2, d4, d3)]
    source = tools.umsrc("-c", d1.config_path, "--json", "-M", count, "-l", 64, "-P", 5000, "--start-on-stdin",
                         topic)
    for receiver in receivers:
        receiver.wait_for_stderr("Beginning of Transport Session", 30)
    # Both of B's portals have joined the copy of the source in their domain.
    wait_for(lambda: all(b.counters()[i]["streams_in"] >= 1 for i in (0, 1)), 30,
             message="B heard the source in D2 and in D4")
    source.send_line()
    assert source.result(120)["sent"] == count
    for receiver in receivers:
        got = receiver.result(120)
        assert (got["received"], got["gaps"], got["duplicates"]) == (count, 0, 0), got
    wait_for(lambda: b.counters()[2]["transport_topic_fragments_sent"] >= count, 10,
             message="B sent every message into D3")
    counters = b.counters()
    assert counters[2]["transport_topic_fragments_dropped_duplicate"] == 0, counters[2]
    forwarded = [counters[i]["transport_topic_fragments_forwarded"] for i in (0, 1)]
    assert sorted(forwarded) == [0, count], forwarded
