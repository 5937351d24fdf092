"""Multicast immediate messages in router.um: the LBT-RM DATA codec, delivery control, and contexts
sending and receiving them over real multicast on loopback, checked by tshark."""
import socket
import threading

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from router.um.config import UMConfig
from router.um.context import Context
from router.um.immediate import ImmediateChannel
from router.um.immediate_delivery import ImmediateDeliveryControl
from router.um.immediate_fragments import ImmediateReassembly
from router.um.wire.errors import WireError
from router.um.wire.lbmc import CtxInst, Frag, LbmcMessage, TopicName, encode_lbmc
from router.um.wire.lbmc_constants import LBMC_TYPE_MESSAGE, NHDR_CTXINST
from router.um.wire.lbtrm import HEADER_SIZE, decode_lbtrm_data, encode_lbtrm_data
from tests.support.processes import wait_for
from tests.support.tshark import LiveCapture, assert_no_expert_info, decode


# -- codec and delivery control (pure logic) --------------------------------------------------------
def test_lbtrm_data_round_trip_and_malformed_datagrams():
    datagram = encode_lbtrm_data(0xCAFE, 7, b"\x00\x00\x00\x10" + bytes(12))
    packet = decode_lbtrm_data(datagram)
    assert (packet.session_id, packet.sqn, packet.trail_sqn, bytes(packet.payload)) == \
        (0xCAFE, 7, 7, b"\x00\x00\x00\x10" + bytes(12))
    with pytest.raises(WireError, match="DATA header truncated at offset 19"):
        decode_lbtrm_data(datagram[:HEADER_SIZE - 1])
    with pytest.raises(WireError, match="version 1"):
        decode_lbtrm_data(b"\x10" + datagram[1:])
    with pytest.raises(WireError, match="not DATA"):
        decode_lbtrm_data(b"\x02" + datagram[1:])           # an SM


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_delivery_control_passes_each_message_once_per_origin():
    control = ImmediateDeliveryControl(window=4, idle_timeout=30, clock=Clock())
    a, b = b"A" * 8, b"B" * 8
    assert [control.is_new(a, s) for s in (0, 1, 1, 3, 2, 2)] == [True, True, False, True, True, False]
    assert control.is_new(b, 1)                       # another origin has numbers of its own
    assert control.is_new(a, 9) and not control.is_new(a, 5)     # older than the window: a copy
    assert control.is_new(a, 6) and not control.is_new(a, 6)     # inside it: new once


def test_delivery_control_follows_wrapping_sequence_numbers_and_forgets_quiet_origins():
    clock = Clock()
    control = ImmediateDeliveryControl(window=16, idle_timeout=30, clock=clock)
    origin = b"W" * 8
    assert control.is_new(origin, 0xFFFFFFFE) and control.is_new(origin, 0xFFFFFFFF)
    assert control.is_new(origin, 0) and control.is_new(origin, 1)
    assert not control.is_new(origin, 0xFFFFFFFF)
    clock.now = 31.0                                   # quiet past mim_src_deletion_timeout
    assert control.is_new(b"X" * 8, 0)                 # (the sweep runs on the next message)
    assert origin not in control.origins
    assert control.is_new(origin, 0xFFFFFFFF)           # a restarted origin starts afresh


def test_delivery_control_memory_stays_within_the_window():
    control = ImmediateDeliveryControl(window=100, idle_timeout=30, clock=Clock())
    for sqn in range(10_000):
        assert control.is_new(b"M" * 8, sqn)
    assert len(control.origins[b"M" * 8].seen) <= 200


# -- contexts on loopback -----------------------------------------------------------------------------
def _collector(expected: int):
    got, done = [], threading.Event()

    def on_message(message):
        got.append(message)
        if len(got) >= expected:
            done.set()
    return got, done, on_message


def test_immediate_messages_reach_the_topics_receivers_and_the_topicless_callback(domain, tmp_path):
    pcap = tmp_path / "mim.pcapng"
    topic_got, topic_done, on_topic = _collector(20)
    wild_got, wild_done, on_wild = _collector(20)
    bare_got, bare_done, on_bare = _collector(5)
    other = []
    with LiveCapture(capture_filter=f"udp and dst host {domain.mim_group}", path=pcap) as capture:
        with Context(**domain.overrides()) as receiving, Context(**domain.overrides()) as sending:
            receiving.receiver("mim.prices", on_topic)
            receiving.receiver("mim.other", other.append)
            receiving.wildcard_receiver(r"^mim\.pri", on_wild)
            receiving.immediate_receiver(on_bare)
            for n in range(20):
                assert sending.send_immediate("mim.prices", b"price %d" % n) == 2 * n
                if n < 5:
                    sending.send_immediate(None, b"note %d" % n)
                else:
                    sending.send_immediate("mim.x", b"-")            # a topic nobody here receives
            assert topic_done.wait(10) and wild_done.wait(10) and bare_done.wait(10)
            wait_for(lambda: receiving.counters()["mim_messages_received"] == 40, 10, message="all 40 heard")
            counters = receiving.counters()
    assert [m.data for m in topic_got] == [b"price %d" % n for n in range(20)]
    assert {m.topic for m in topic_got} == {"mim.prices"} and other == []
    assert [m.data for m in wild_got] == [m.data for m in topic_got]
    assert [m.data for m in bare_got] == [b"note %d" % n for n in range(5)] and bare_got[0].topic == ""
    assert topic_got[0].source.startswith("LBTRM:127.0.0.1:")
    assert counters["mim_messages_received"] == 40 and counters["mim_duplicates"] == 0

    prefs = [f"lbtrm.mim_incoming_address:{domain.mim_group}", f"lbtrm.mim_outgoing_address:{domain.mim_group}",
             f"lbtrm.mim_incoming_dport:{domain.port}", f"lbtrm.mim_outgoing_dport:{domain.port}"]
    assert_no_expert_info(pcap, [], prefs)
    frames = decode(pcap, [], prefs, fields=["lbtrm.hdr.type", "lbmc.topicname.topic", "lbmc.ctxinst.ctxinst"],
                    display_filter=capture.not_canary)
    assert len(frames) == 40
    topics = [f.get("lbmc.topicname.topic", [None])[0] for f in frames]
    assert topics.count("mim.prices") == 20 and topics.count(None) == 5
    assert all(f.get("lbmc.ctxinst.ctxinst") for f in frames), "every MIM names its originating context"


def test_large_immediate_messages_go_in_fragments_and_arrive_whole(domain, tmp_path, monkeypatch):
    pcap = tmp_path / "fragments.pcapng"
    got, done, on_message = _collector(3)
    bare, bare_done, on_bare = _collector(1)
    bodies = [bytes([n]) * size for n, size in enumerate((8150, 50_000, 20_001))]
    with LiveCapture(capture_filter=f"udp and dst host {domain.mim_group}", path=pcap) as capture:
        with Context(**domain.overrides()) as receiving, Context(**domain.overrides()) as sending:
            receiving.receiver("mim.big", on_message)
            receiving.immediate_receiver(on_bare)
            first = [sending.send_immediate("mim.big", body) for body in bodies]
            sending.send_immediate(None, b"t" * 30_000)
            assert done.wait(10) and bare_done.wait(10)
            counters = receiving.counters()
            monkeypatch.setattr("router.um.immediate.MAX_MESSAGE", 40_000)
            with pytest.raises(ValueError, match="larger than 40000"):
                sending.send_immediate("mim.big", bytes(40_001))
    assert [m.data for m in got] == bodies and bare[0].data == b"t" * 30_000
    assert [m.sequence_number for m in got] == first == [0, 2, 9]      # fragments take a number each
    assert counters["mim_reassembled"] == 4 and counters["mim_reassembly_expired"] == 0

    prefs = [f"lbtrm.mim_incoming_address:{domain.mim_group}", f"lbtrm.mim_outgoing_address:{domain.mim_group}",
             f"lbtrm.mim_incoming_dport:{domain.port}", f"lbtrm.mim_outgoing_dport:{domain.port}",
             "lbmc.reassemble_fragments:TRUE"]
    assert_no_expert_info(pcap, [], prefs)
    frames = decode(pcap, [], prefs, fields=["udp.length", "lbmc.frag.offset", "lbmc.frag.len"],
                    display_filter=capture.not_canary)
    assert all(int(f["udp.length"][0]) - 8 <= 8192 for f in frames), "no datagram above the datagram size"
    assert sorted(int(f["lbmc.frag.len"][0]) for f in frames if f.get("lbmc.frag.len"))[-1] == 50_000


def test_reassembly_drops_what_stops_coming_and_what_does_not_fit():
    clock = Clock()
    reassembly = ImmediateReassembly(timeout=5.0, max_pending=2, clock=clock)
    origin = b"R" * 8
    assert reassembly.add(origin, Frag(10, 0, 8), b"abcd") is None
    assert reassembly.add(origin, Frag(10, 4, 8), b"efgh") == b"abcdefgh"
    assert reassembly.add(origin, Frag(20, 0, 8), b"abcd") is None          # its other half is lost
    clock.now = 6.0
    assert reassembly.add(origin, Frag(30, 0, 4), b"wxyz") == b"wxyz"
    assert reassembly.counters["mim_reassembly_expired"] == 1 and not reassembly.pending
    for first in (40, 50, 60):                                              # one more than max_pending
        reassembly.add(origin, Frag(first, 0, 8), b"1234")
    assert list(reassembly.pending) == [(origin, 50), (origin, 60)]
    assert reassembly.add(origin, Frag(50, 6, 8), b"xyz") is None            # beyond its length
    assert reassembly.add(origin, Frag(70, 0, 0), b"") is None               # no length at all
    assert reassembly.counters["mim_fragments_malformed"] == 2 and reassembly.counters["mim_reassembly_expired"] == 2


def test_reassembly_holds_at_most_one_largest_message_however_many_start():
    # A first fragment is a small datagram that may claim up to 64 MB: a sender starting many
    # messages and finishing none must not make every listening context (a router's too) hold
    # 64 MB for each.
    from router.um.immediate_fragments import MAX_MESSAGE
    reassembly = ImmediateReassembly(timeout=30.0, clock=Clock())
    claim = 30 * 1024 * 1024
    for first in range(4):
        assert reassembly.add(b"H" * 8, Frag(first, 0, claim), b"x" * 100) is None
    assert sum(len(entry[0]) for entry in reassembly.pending.values()) <= MAX_MESSAGE
    assert reassembly.counters["mim_reassembly_expired"] == 2 and len(reassembly.pending) == 2
    assert reassembly.add(b"H" * 8, Frag(3, 100, claim), b"y" * (claim - 100)) == b"x" * 100 + b"y" * (claim - 100)
    assert list(reassembly.pending) == [(b"H" * 8, 2)] and reassembly.waiting == claim


def test_reassembly_completes_only_when_every_byte_came():
    reassembly = ImmediateReassembly(timeout=30.0, clock=Clock())
    origin = b"D" * 8
    assert reassembly.add(origin, Frag(10, 0, 12), b"abcd") is None
    assert reassembly.add(origin, Frag(10, 0, 12), b"abcd") is None          # the same piece again
    assert reassembly.add(origin, Frag(10, 2, 12), b"cdef") is None          # overlapping what came
    assert reassembly.add(origin, Frag(10, 8, 12), b"ijkl") is None          # 6..7 still missing
    assert reassembly.add(origin, Frag(10, 6, 12), b"gh") == b"abcdefghijkl"


def test_malformed_immediate_datagrams_are_counted_and_receiving_goes_on(domain):
    got, done, on_message = _collector(1)
    with Context(**domain.overrides()) as receiving, Context(**domain.overrides()) as sending:
        receiving.receiver("mim.ok", on_message)
        junk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        junk.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
        try:
            for datagram in (b"\x00", encode_lbtrm_data(1, 0, b"\x00\x00\x00\x40"), b"\x72" + bytes(30)):
                junk.sendto(datagram, (domain.mim_group, domain.port))
        finally:
            junk.close()
        wait_for(lambda: receiving.counters()["mim_malformed"] == 3, 10, message="three malformed datagrams counted")
        sending.send_immediate("mim.ok", b"still here")
        assert done.wait(10) and got[0].data == b"still here"


def test_a_message_whose_fragments_stop_coming_is_given_up_with_nothing_more_arriving(domain):
    # MIM is not retransmitted: the first fragment of a message whose others were lost is all
    # that comes. It is given up (and counted) when it has waited mim_src_deletion_timeout, not
    # whenever another fragmented message happens to arrive, maybe never.
    first_only = encode_lbtrm_data(7, 0, encode_lbmc(LbmcMessage(
        LBMC_TYPE_MESSAGE, [CtxInst(b"L" * 8, NHDR_CTXINST), TopicName("mim.lost"), Frag(0, 0, 20_000)],
        b"p" * 4000, tidx=0, sqn=0)))
    with Context(**domain.overrides(), mim_src_deletion_timeout=300) as receiving:
        receiving.receiver("mim.lost", lambda message: None)
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
        try:
            sender.sendto(first_only, (domain.mim_group, domain.port))
        finally:
            sender.close()
        wait_for(lambda: receiving.counters()["mim_fragments_received"] == 1, 10, message="the fragment heard")
        wait_for(lambda: receiving.counters()["mim_reassembly_expired"] == 1, 10,
                 message="the incomplete message given up once it has waited")
        assert receiving.loop.call_and_wait(lambda: len(receiving.immediate.reassembly.pending)) == 0


def test_mim_incoming_address_0_0_0_0_turns_receiving_off(domain):
    with Context(**domain.overrides(), mim_incoming_address="0.0.0.0") as context:
        context.receiver("mim.off", lambda m: None)
        assert context.immediate.receiver is None
        context.send_immediate("mim.off", b"sending still works")
        assert context.counters()["mim_messages_sent"] == 1


class _NoLoop:
    def add_reader(self, fd, callback):
        pass

    def call_later(self, delay, callback, *args):
        return threading.Timer(delay, callback)          # never started: only cancelled


_VALID = encode_lbtrm_data(1, 0, encode_lbmc(LbmcMessage(
    LBMC_TYPE_MESSAGE, [CtxInst(b"o" * 8, NHDR_CTXINST), TopicName("t"), Frag(0, 0, 100)], b"p" * 10, tidx=0, sqn=0)))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, len(_VALID) - 1), st.integers(0, 255)), min_size=1, max_size=6),
       st.integers(1, len(_VALID)))
def test_any_corrupted_datagram_is_counted_never_raised(changes, keep):
    channel = ImmediateChannel(UMConfig(), _NoLoop(), "127.0.0.1", b"s" * 8, lambda message: None)
    try:
        datagram = bytearray(_VALID)
        for at, value in changes:
            datagram[at] = value
        channel._on_datagram(bytes(datagram[:keep]), ("127.0.0.1", 9))
        counters = channel.counters
        assert counters["mim_malformed"] + counters["mim_messages_received"] >= 1
    finally:
        channel.close()


def test_a_control_message_in_an_immediate_datagram_is_counted_as_malformed():
    channel = ImmediateChannel(UMConfig(), _NoLoop(), "127.0.0.1", b"s" * 8, lambda message: None)
    try:
        control = encode_lbmc(LbmcMessage(0x8, [CtxInst(b"o" * 8, NHDR_CTXINST)]))
        channel._on_datagram(encode_lbtrm_data(1, 0, control), ("127.0.0.1", 9))
        assert channel.counters["mim_malformed"] == 1 and channel.counters["mim_messages_received"] == 0
    finally:
        channel.close()
