"""The origin's TSNIs through routers: a tail lost on the way is told to the receivers beyond.

A receiver sees a lost message when a later one arrives; the end of a burst has no later one. An
idle source says where each topic is (TSNI, router.um.sequence_info). A router passes that on
behind the stream's frames (a SEQUENCE_INFO ring record, a TSNI of the link topic index across a
peer link), and its proxy sources say it in their own TSNIs. So what a peer link dropped at the
end of a burst is told to the far receiver as lost (or, with OTR, asked for and recovered), with
nothing sent after it.
"""
from __future__ import annotations

import socket

import pytest

from router.um.context import Context
from router.um.messages import BOS, UNRECOVERABLE_LOSS
from tests.router.test_peer_udp import udp_xml
from tests.support.peer_links import router_chain
from tests.support.processes import wait_for
from tests.support.routers import free_port
from tests.support.tshark import LiveCapture, decode, expert_info

pytestmark = pytest.mark.integration

# Idle sources (the origin, and the routers' proxy sources) say where their topics are every 300 ms
# (UM: 5 s); the origin keeps what it sends, and the far receiver asks for what it misses, when
# the test recovers. The same options for the routers' portals (their domains' files) and for the
# test's own contexts.
_TSNI = {"transport_topic_sequence_number_info_interval": 300}
_RETAIN = {"late_join": True, "retransmit_retention_size_limit": 200_000_000}
_OTR = {"use_otr": True, "otr_request_initial_delay": 200, "otr_request_minimum_interval": 200}
_SCOPE = {"transport_topic_sequence_number_info_interval": "source", "late_join": "source",
          "retransmit_retention_size_limit": "source", "use_otr": "receiver", "otr_request_initial_delay": "receiver",
          "otr_request_minimum_interval": "receiver"}


def _lines(options: dict) -> list[str]:
    return [f"{_SCOPE[name]} {name} {int(value)}" for name, value in options.items()]


def _slow_udp_link(rate: int) -> tuple[str, str]:
    """A UDP peer path at `rate` bit/s with a 100 KB queue on the sending side: a burst overflows it."""
    slow = (f"      <udp><port>{free_port(socket.SOCK_DGRAM)}</port>"
            f'<peer-rate-limit data="{rate}" retransmit="1000000" interval="10"/></udp>\n'
            "      <max-queue>100000</max-queue>\n")
    return slow, udp_xml(free_port(socket.SOCK_DGRAM))


class _Collector:
    def __init__(self):
        self.sqns: list[int] = []
        self.lost: list[tuple[int, int]] = []           # (first sequence number, count)
        self.joined = False

    def on_batch(self, messages) -> None:
        self.sqns.extend(message.sequence_number for message in messages)

    def on_event(self, event) -> None:
        if event.kind == UNRECOVERABLE_LOSS:
            self.lost.append((event.sequence_number, event.count))
        elif event.kind == BOS:
            self.joined = True

    def accounted(self) -> int:
        return len(self.sqns) + sum(count for _, count in self.lost)


@pytest.mark.parametrize("recover", [False, True], ids=["told", "recovered"])
def test_a_tail_a_peer_link_dropped_reaches_the_far_receiver_with_nothing_sent_after_it(routers, make_domain,
                                                                                        recover):
    origin = {**_TSNI, **(_RETAIN if recover else {})}
    far = {**_TSNI, **(_OTR if recover else {})}
    lan1, lan_far = make_domain(*_lines(origin)), make_domain(*_lines(far))
    # Told: the tail is dropped only if the burst reaches the link faster than the link drains, to
    # its last message. At 16 Mbit/s (2,000 of these messages a second) a loaded machine (the suite
    # on four workers) slowed the sender and the routers below that: the queue drained mid-burst and
    # the tail got through. 1 Mbit/s (125 a second) keeps it full to the end. Recovered: 16 Mbit/s,
    # so that the repairs of what was dropped cross in time.
    rate = 16_000_000 if recover else 1_000_000
    chain, _ = router_chain(routers, lan1, lan_far, 1, "sqi" + "ro"[recover], link_extra=_slow_udp_link(rate))
    origin_peer = lambda: chain[0].counters()[1]
    count, length = 2_000, 1_000
    got = _Collector()
    with Context(**lan_far.overrides(), **far) as receiving, Context(**lan1.overrides(), **origin) as sending:
        source = sending.source("sqi.tail")
        receiving.receiver("sqi.tail", on_batch=got.on_batch, on_event=got.on_event)
        wait_for(lambda: got.joined, 30, message="the receiver joined the far proxy source")
        for n in range(count):
            source.send(n.to_bytes(4, "big") * (length // 4))
        source.flush()
        wait_for(lambda: origin_peer()["data_fragments_forwarded"] >= count, 30, message="the burst at the link")
        if recover:
            wait_for(lambda: len(set(got.sqns)) == count, 60, message="every message, the tail recovered")
        else:
            wait_for(lambda: got.accounted() >= count, 30, message="every message delivered or told lost")
        dropped = origin_peer()["data_fragments_dropped_would_block"]
    assert dropped > 0, origin_peer()
    assert got.sqns == sorted(set(got.sqns)), "in order, once each"
    if recover:
        assert got.sqns == list(range(count)) and got.lost == []
        return
    told = {sqn for first, n in got.lost for sqn in range(first, first + n)}
    assert told.isdisjoint(got.sqns) and told | set(got.sqns) == set(range(count)), (got.lost, got.sqns[-5:])
    assert count - 1 in told, "the burst's tail was dropped: only a TSNI could tell it"
    assert len(told) == dropped, (len(told), dropped)


def test_the_origins_sequence_info_crosses_a_tcp_link_as_a_tsni_that_decodes_cleanly(routers, tools, make_domain,
                                                                                       tmp_path):
    lan1, lan_far = make_domain(*_lines(_TSNI)), make_domain(*_lines(_TSNI))
    chain, ports = router_chain(routers, lan1, lan_far, 1, "sqiw")
    pcap = tmp_path / "link.pcapng"
    with LiveCapture(capture_filter=f"tcp port {ports[0]}", path=pcap) as capture:
        receiver = tools.umrcv("-c", lan_far.config_path, "--json", "-C", 100, "--timeout", 60, "sqi.wire")
        source = tools.umsrc("-c", lan1.config_path, "--json", "-M", 100, "-L", 3, "--start-on-stdin", "sqi.wire")
        receiver.wait_for_stderr("Beginning of Transport Session", 30)
        source.send_line()
        assert receiver.result(60)["received"] == 100
        assert source.result(60)["sent"] == 100         # it lingered 3 s idle: TSNIs every 300 ms
    link = [f"tcp.port=={ports[0]},lbttcp"]
    tsnis = decode(pcap, link, fields=["lbmc.tsni.tsni_rec.tidx", "lbmc.tsni.tsni_rec.sqn"],
                   display_filter=f"lbmc.tsni and {capture.not_canary}")
    assert tsnis and all(row["lbmc.tsni.tsni_rec.sqn"] == ["99"] for row in tsnis), tsnis
    assert not expert_info(pcap, link, min_severity="warn")
