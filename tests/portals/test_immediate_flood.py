"""router.portals.immediate as pure logic: how a MIM is carried between routers, and what a portal
counts and floods (the integration tests in tests/router/test_immediate_messages.py run real ones)."""
import pytest

from router.monitor.counters import PortalCounters
from router.portals.immediate import ImmediateFlood, carried, is_immediate, with_origin
from router.um.wire.errors import WireError
from router.um.wire.lbmc import CtxInst, LbmcMessage, ODomain, TopicName, decode_lbmc, encode_lbmc
from router.um.wire.lbmc_constants import LBMC_TYPE_MESSAGE, NHDR_CTXINST
from router.worker.records import RECORD_IMMEDIATE, RecordError, decode_immediate, encode_immediate

ORIGIN = bytes(range(8))


def _mim(*headers, payload=b"data", sqn=41) -> LbmcMessage:
    return LbmcMessage(LBMC_TYPE_MESSAGE, list(headers), payload, tidx=0, sqn=sqn)


def test_with_origin_puts_odomain_and_ctxinst_first_and_keeps_the_rest():
    frame = with_origin(_mim(TopicName("a.topic")), 7, ORIGIN)
    message, end = decode_lbmc(frame)
    assert end == len(frame) and is_immediate(message)
    assert message.headers == [ODomain(7), CtxInst(ORIGIN, NHDR_CTXINST), TopicName("a.topic")]
    assert (message.payload, message.sqn) == (b"data", 41)
    assert carried(frame)[1:] == (7, ORIGIN, True)


def test_with_origin_replaces_what_a_message_said_of_its_origin():
    old = _mim(CtxInst(b"x" * 8, NHDR_CTXINST), ODomain(3))
    message, _, origin, has_topic = carried(with_origin(old, 3, ORIGIN))
    assert [type(h) for h in message.headers] == [ODomain, CtxInst] and origin == ORIGIN and not has_topic


@pytest.mark.parametrize("frame, why", [
    (encode_lbmc(_mim(TopicName("t"))), "starting with ODOMAIN"),
    (encode_lbmc(_mim(ODomain(1), TopicName("t"))), "CTXINST"),
    (encode_lbmc(_mim(ODomain(1), CtxInst(ORIGIN, NHDR_CTXINST))) + b"\x00", "one LBMC MESSAGE"),
])
def test_carried_refuses_what_is_not_a_routers_immediate_message(frame, why):
    with pytest.raises(WireError, match=why):
        carried(frame)


def _no_log(name, text):
    raise AssertionError(f"nothing should be logged here: {name}: {text}")


class Rings:
    def __init__(self):
        self.records = []

    def immediate(self, mask, origin_domain, has_topic, frame):
        self.records.append((mask, origin_domain, has_topic, frame))


def test_a_portal_floods_each_message_once_to_every_other_portal():
    rings, counters = Rings(), PortalCounters()
    flood = ImmediateFlood(1, {"A": 0, "B": 1, "C": 2}, rings, counters, _no_log)
    frame = with_origin(_mim(TopicName("t")), 4, ORIGIN)
    flood.heard(4, ORIGIN, 41, True, frame)
    flood.heard(4, ORIGIN, 41, True, frame)                # the same message by another path
    flood.heard(4, ORIGIN, 42, False, frame)
    assert [(mask, domain, topical) for mask, domain, topical, _ in rings.records] == [(0b101, 4, True), (0b101, 4, False)]
    snapshot = counters.snapshot()
    assert snapshot["immediate_topic_fragments_rcvd"] == 2 and snapshot["immediate_topic_fragments_forwarded"] == 1
    assert snapshot["immediate_topicless_fragments_forwarded"] == 1
    assert snapshot["immediate_fragments_dropped_dup"] == 1
    assert snapshot["immediate_fragment_bytes_dropped_dup"] == len(frame)


def test_a_portal_alone_forwards_nothing_and_counts_no_forwarding():
    rings, counters = Rings(), PortalCounters()
    ImmediateFlood(0, {"A": 0}, rings, counters, _no_log).heard(1, ORIGIN, 0, True, b"x" * 40)
    assert rings.records == [] and counters.get("immediate_topic_fragments_forwarded") == 0
    assert counters.get("immediate_topic_fragments_rcvd") == 1


def test_what_a_send_did_is_counted_by_reason():
    counters, logged = PortalCounters(), []
    flood = ImmediateFlood(0, {}, Rings(), counters, lambda name, text: logged.append((name, text)))

    def too_large(frame):
        raise ValueError("does not fit one datagram")

    def refused(frame):
        raise OSError("network unreachable")

    assert flood.send(lambda frame: None, True, b"a" * 10)
    assert flood.send(lambda frame: True, False, b"b" * 20)
    assert not flood.send(too_large, True, b"c" * 30)
    assert not flood.send(refused, False, b"d" * 40)
    assert not flood.send(lambda frame: False, True, b"e" * 50)       # a peer link that is down or full
    snapshot = counters.snapshot()
    assert (snapshot["immediate_topic_fragments_sent"], snapshot["immediate_topic_fragment_bytes_sent"]) == (1, 10)
    assert snapshot["immediate_topicless_fragments_sent"] == 1
    assert (snapshot["immediate_topic_fragments_dropped_size_error"],
            snapshot["immediate_topic_fragment_bytes_dropped_size_error"]) == (1, 30)
    assert snapshot["immediate_topicless_fragments_dropped_error"] == 1
    assert (snapshot["immediate_topic_fragments_dropped_error"], snapshot["immediate_topic_fragment_bytes_dropped_error"]) \
        == (1, 50)
    # One log line per reason (rate-limited), naming what happened.
    assert [name for name, _ in logged] == ["drops-immediate-size-error", "drops-immediate-error"]
    assert "does not fit one datagram" in logged[0][1] and "network unreachable" in logged[1][1]


def test_a_message_that_cannot_carry_its_origin_is_counted_as_too_large():
    counters, logged = PortalCounters(), []
    flood = ImmediateFlood(0, {}, Rings(), counters, lambda name, text: logged.append(name))
    with pytest.raises(WireError):
        with_origin(_mim(payload=bytes(65_520)), 1, ORIGIN)
    flood.too_large(False, 65_532, "LBMC message over 65535 bytes")
    assert counters.get("immediate_topicless_fragments_dropped_size_error") == 1
    assert logged == ["drops-immediate-size-error"]


def test_the_ring_record_round_trips():
    frame = with_origin(_mim(), 9, ORIGIN)
    assert decode_immediate(encode_immediate(9, False, frame)) == (9, False, frame)
    assert RECORD_IMMEDIATE == 7
    with pytest.raises(RecordError, match="too short"):
        decode_immediate(b"\x00\x00\x00\x09\x01")
