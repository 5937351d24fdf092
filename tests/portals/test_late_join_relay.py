"""The late-join relay's rewriting (router.portals.late_join_relay), with the ring and the request
port replaced by recorders: a receiver's requests become the ingress portal's own (its request
index and port, the origin's transport and topic indexes), and the origin's answers become what
the receiver asked for (its request index, the proxy's topic index), addressed to it."""
import sys
from types import SimpleNamespace

from router.monitor.counters import PortalCounters
from router.portals.late_join_relay import LateJoinRelay
from router.portals.proxy_sources import ProxySourceTable
from router.um.config import UMConfig
from router.um.wire.lbmc import (LBMC_TYPE_CONTROL, LBMC_TYPE_MESSAGE, LBMC_TYPE_RETRANS, LbmcMessage, decode_lbmc,
                                 encode_lbmc)
from router.um.wire.lbmc_late_join import LjiRequest, UmeLjInfo, UmeRxReq
from router.um.wire.lbmr import LateJoinOption

ORIGIN = LateJoinOption(src_tcp_port=14391, src_ip="10.1.1.1", transport_idx=5, high_seqnum=0, low_seqnum=0)
OURS = ("10.2.2.2", 14392)                 # the ingress portal's request port
RECEIVER = ("10.3.3.3", 14393)             # the requester, behind egress portal 2


class Recorder:
    def __init__(self):
        self.sent = []

    def send_frames(self, address, frames):
        self.sent.append((address, bytes(frames)))

    def late_join(self, portal, stream_id, message):
        self.sent.append(("late_join", portal, stream_id, bytes(message)))

    def late_join_answer(self, portal, ip, port, frames):
        self.sent.append(("answer", portal, ip, port, bytes(frames)))


class Connection:
    """A connection to our request port (what the context passes with each frame)."""
    is_open = True


CONNECTION = Connection()


def relay(late_join=ORIGIN, others=None):
    responder, datapath = Recorder(), Recorder()
    context = SimpleNamespace(responder=responder, request_address=lambda: OURS, uim_relay=None, config=UMConfig())
    streams = {4: SimpleNamespace(late_join=late_join, advert=SimpleNamespace(origin_index=11)), **(others or {})}
    counters = PortalCounters()
    return LateJoinRelay("LAN1", context, datapath, SimpleNamespace(streams=streams), counters), \
        responder, datapath, counters


def retrans_frame(tidx: int, sqn: int, payload: bytes) -> bytes:
    frame = bytearray(encode_lbmc(LbmcMessage(LBMC_TYPE_MESSAGE, [], payload, tidx, sqn)))
    frame[0] = LBMC_TYPE_RETRANS
    return bytes(frame)


def control(*headers) -> bytes:
    return encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, list(headers)))


def test_requests_go_to_the_origin_as_the_ingress_portals_own_and_answers_come_back_as_asked():
    lj, responder, datapath, counters = relay()
    lj.request_in(2, 4, control(LjiRequest(77, 1, 3, *RECEIVER, 0, 0, 200, 4),
                                UmeRxReq(77, 1, 3, 42, RECEIVER[1], RECEIVER[0])))
    [(address, message)] = responder.sent
    assert address == (ORIGIN.src_ip, ORIGIN.src_tcp_port)
    info_request, rx_request = decode_lbmc(message)[0].headers
    assert (info_request.transport_idx, info_request.topic_idx, info_request.req_ip, info_request.req_port,
            info_request.rx_req_outstanding_max, info_request.flags) == (5, 11, *OURS, 200, 4)
    assert (rx_request.transport_idx, rx_request.id_2, rx_request.seqnum, rx_request.rx_ip, rx_request.rx_port) == \
        (5, 11, 42, *OURS)
    assert counters.get("late_join_requests_relayed") == 1

    # The origin's answers at our request port: back to egress portal 2, for the receiver.
    assert lj.answer_in(control(UmeLjInfo(10, 50, info_request.request_idx)), CONNECTION)
    retrans = bytearray(encode_lbmc(LbmcMessage(LBMC_TYPE_MESSAGE, [], b"forty-two", 11, 42)))
    retrans[0] = LBMC_TYPE_RETRANS
    assert lj.answer_in(bytes(retrans), CONNECTION)
    (_, portal, ip, port, info_frames), (_, portal2, ip2, port2, frame) = datapath.sent
    assert (portal, ip, port, portal2, ip2, port2) == (2, *RECEIVER, 2, *RECEIVER)
    [info] = decode_lbmc(info_frames)[0].headers
    assert (info.low_seqnum, info.high_seqnum, info.qidx) == (10, 50, 77)
    message = decode_lbmc(frame)[0]
    assert (message.msg_type, message.tidx, message.sqn, message.payload) == (LBMC_TYPE_RETRANS, 3, 42, b"forty-two")
    assert counters.get("late_join_answers_rcvd") == 2
    assert not lj.answer_in(bytes(retrans), CONNECTION)            # answered once: a second copy is nobody's


def test_requests_for_a_stream_whose_origin_offers_no_late_join_are_counted_not_relayed():
    lj, responder, _, counters = relay(late_join=None)
    lj.request_in(2, 4, control(UmeRxReq(77, 1, 3, 42, RECEIVER[1], RECEIVER[0])))
    lj.request_in(2, 99, control(UmeRxReq(77, 1, 3, 42, RECEIVER[1], RECEIVER[0])))     # an unknown stream
    assert responder.sent == [] and counters.get("late_join_requests_not_relayed") == 2


def test_frames_that_answer_nothing_relayed_are_left_to_the_context():
    lj, _, datapath, _ = relay()
    assert not lj.answer_in(control(UmeLjInfo(1, 2, 12345)), CONNECTION)
    retrans = bytearray(encode_lbmc(LbmcMessage(LBMC_TYPE_MESSAGE, [], b"x", 11, 1)))
    retrans[0] = LBMC_TYPE_RETRANS
    assert not lj.answer_in(bytes(retrans), CONNECTION) and datapath.sent == []
    assert lj.counters.get("late_join_answers_unknown") == 2


def test_two_receivers_asking_for_one_message_each_get_it():
    lj, responder, datapath, _ = relay()
    other = ("10.4.4.4", 14394)
    lj.request_in(2, 4, control(UmeRxReq(1, 1, 3, 42, RECEIVER[1], RECEIVER[0])))
    lj.request_in(3, 4, control(UmeRxReq(1, 1, 8, 42, other[1], other[0])))
    retrans = bytearray(encode_lbmc(LbmcMessage(LBMC_TYPE_MESSAGE, [], b"x", 11, 42)))
    retrans[0] = LBMC_TYPE_RETRANS
    assert lj.answer_in(bytes(retrans), CONNECTION)
    answers = {(portal, ip, port): decode_lbmc(frame)[0].tidx for _, portal, ip, port, frame in datapath.sent}
    assert answers == {(2, *RECEIVER): 3, (3, *other): 8}


def test_rxreqs_alone_go_behind_an_lji_req_of_the_relays_own_whose_answer_is_not_passed_on():
    lj, responder, datapath, counters = relay()
    lj.request_in(2, 4, control(UmeRxReq(1, 1, 3, 42, RECEIVER[1], RECEIVER[0])))
    [(_, message)] = responder.sent
    probe, rx_request = decode_lbmc(message)[0].headers
    assert isinstance(probe, LjiRequest) and (probe.transport_idx, probe.topic_idx, probe.req_ip, probe.req_port) \
        == (5, 11, *OURS)
    assert lj.answer_in(control(UmeLjInfo(0, 50, probe.request_idx)), CONNECTION)
    assert datapath.sent == []                          # ours: it only binds the connection
    assert lj.answer_in(retrans_frame(11, 42, b"x"), CONNECTION)
    assert [(kind, portal) for kind, portal, *_ in datapath.sent] == [("answer", 2)]


# Regression: at 11fb9e1 every relayed request of UME_RXREQs alone went behind an LJI_REQ of the
# relay's own, bound connection or not: the origin answered each with a UME_LJ_INFO, as many answers
# again as the retransmissions asked for (38,533 answers for 20,000 RETRANS frames in a test of
# four late receivers across two links).
def test_the_relays_own_lji_req_goes_only_while_no_open_connection_is_bound_or_when_a_requester_asks_again():
    lj, responder, _, _ = relay()

    def kinds():
        _, message = responder.sent.pop()
        return [type(header).__name__ for header in decode_lbmc(message)[0].headers]
    lj.request_in(2, 4, control(UmeRxReq(1, 1, 3, 42, RECEIVER[1], RECEIVER[0])))
    probe = decode_lbmc(responder.sent[-1][1])[0].headers[0]
    assert kinds() == ["LjiRequest", "UmeRxReq"]
    connection = Connection()
    assert lj.answer_in(control(UmeLjInfo(0, 50, probe.request_idx)), connection)      # binds it
    lj.request_in(2, 4, control(UmeRxReq(1, 1, 3, 43, RECEIVER[1], RECEIVER[0])))
    assert kinds() == ["UmeRxReq"]
    lj.request_in(2, 4, control(UmeRxReq(1, 1, 3, 43, RECEIVER[1], RECEIVER[0])))      # its retry
    assert kinds() == ["LjiRequest", "UmeRxReq"]
    connection.is_open = False                              # the origin's connection is gone
    lj.request_in(2, 4, control(UmeRxReq(1, 1, 3, 44, RECEIVER[1], RECEIVER[0])))
    assert kinds() == ["LjiRequest", "UmeRxReq"]
    del connection                                          # forgotten with it
    assert lj.bound_to == {}


def test_two_origins_using_one_topic_index_get_their_answers_told_apart_by_connection():
    other_origin = LateJoinOption(src_tcp_port=14391, src_ip="10.1.1.9", transport_idx=5, high_seqnum=0,
                                  low_seqnum=0)
    other_stream = SimpleNamespace(late_join=other_origin, advert=SimpleNamespace(origin_index=11))
    lj, responder, datapath, _ = relay(others={6: other_stream})
    other = ("10.4.4.4", 14394)
    lj.request_in(2, 4, control(UmeRxReq(1, 1, 3, 42, RECEIVER[1], RECEIVER[0])))     # origin 10.1.1.1
    lj.request_in(3, 6, control(UmeRxReq(1, 1, 8, 42, other[1], other[0])))           # origin 10.1.1.9
    probes = {address[0]: decode_lbmc(message)[0].headers[0].request_idx for address, message in responder.sent}
    first, second = Connection(), Connection()
    # The second origin answers first, on its own connection; then the first.
    assert lj.answer_in(control(UmeLjInfo(0, 50, probes["10.1.1.9"])), second)
    assert lj.answer_in(retrans_frame(11, 42, b"nine"), second)
    assert lj.answer_in(control(UmeLjInfo(0, 50, probes["10.1.1.1"])), first)
    assert lj.answer_in(retrans_frame(11, 42, b"one"), first)
    answers = [(portal, ip, decode_lbmc(frame)[0].payload) for _, portal, ip, _, frame in datapath.sent]
    assert answers == [(3, other[0], b"nine"), (2, RECEIVER[0], b"one")]


def test_an_answer_on_an_unbound_connection_that_two_origins_wait_for_is_nobodys():
    other_origin = LateJoinOption(src_tcp_port=14391, src_ip="10.1.1.9", transport_idx=5, high_seqnum=0,
                                  low_seqnum=0)
    lj, _, datapath, counters = relay(others={6: SimpleNamespace(late_join=other_origin,
                                                                advert=SimpleNamespace(origin_index=11))})
    lj.request_in(2, 4, control(UmeRxReq(1, 1, 3, 42, RECEIVER[1], RECEIVER[0])))
    lj.request_in(3, 6, control(UmeRxReq(1, 1, 8, 42, 14394, "10.4.4.4")))
    assert not lj.answer_in(retrans_frame(11, 42, b"whose?"), CONNECTION)
    assert datapath.sent == [] and counters.get("late_join_answers_unknown") == 1


def _rxreqs_sent(responder) -> list[int]:
    return [h.seqnum for _, message in responder.sent for h in decode_lbmc(message)[0].headers
            if isinstance(h, UmeRxReq)]


def test_a_second_receiver_asking_for_a_message_already_asked_for_joins_the_request(monkeypatch):
    """Several late receivers of one topic ask for the same messages at once: the origin is asked
    once and its one answer goes to each of them (no duplicate answers from the origin)."""
    import router.portals.late_join_relay as module
    now = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    lj, responder, datapath, counters = relay()
    other = ("10.4.4.4", 14394)
    lj.request_in(2, 4, control(UmeRxReq(1, 1, 3, 42, RECEIVER[1], RECEIVER[0]),
                                UmeRxReq(1, 1, 3, 43, RECEIVER[1], RECEIVER[0])))
    now[0] += 0.01
    lj.request_in(3, 4, control(UmeRxReq(1, 1, 8, 42, other[1], other[0]),
                                UmeRxReq(1, 1, 8, 44, other[1], other[0])))
    assert _rxreqs_sent(responder) == [42, 43, 44]
    assert counters.get("late_join_requests_joined") == 1
    assert lj.answer_in(retrans_frame(11, 42, b"x"), CONNECTION)
    assert {(portal, decode_lbmc(frame)[0].tidx) for _, portal, _, _, frame in datapath.sent} == {(2, 3), (3, 8)}
    assert counters.get("late_join_answers_unknown") == 0


def test_a_requester_asking_again_goes_to_the_origin_again_however_soon(monkeypatch):
    """The first request or its answer may have been lost: a requester asking again (after its
    retransmit_request_interval, however short) is asked for again at once, and the answer still
    reaches it once; another requester within REASK_AFTER is joined to the request."""
    import router.portals.late_join_relay as module
    now = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    lj, responder, datapath, counters = relay()
    lj.request_in(2, 4, control(UmeRxReq(1, 1, 3, 42, RECEIVER[1], RECEIVER[0])))
    now[0] += module.REASK_AFTER / 4              # a requester with a 60 ms retransmit_request_interval
    lj.request_in(2, 4, control(UmeRxReq(1, 1, 3, 42, RECEIVER[1], RECEIVER[0])))
    now[0] += module.REASK_AFTER / 4              # another requester: joined
    lj.request_in(3, 4, control(UmeRxReq(1, 1, 8, 42, 14394, "10.4.4.4")))
    now[0] += module.REASK_AFTER
    lj.request_in(2, 4, control(UmeRxReq(1, 1, 3, 42, RECEIVER[1], RECEIVER[0])))
    assert _rxreqs_sent(responder) == [42, 42, 42]
    assert counters.get("late_join_requests_joined") == 1
    assert counters.get("late_join_requests_reasked") == 2
    assert lj.answer_in(retrans_frame(11, 42, b"x"), CONNECTION)
    assert sorted(portal for _, portal, _, _, _ in datapath.sent) == [2, 3]        # once to each requester
    # The origin answers each time it was asked: the answers after the first find nobody waiting,
    # as many as were asked again, and are counted so.
    assert not lj.answer_in(retrans_frame(11, 42, b"x"), CONNECTION)
    assert not lj.answer_in(retrans_frame(11, 42, b"x"), CONNECTION)
    assert len(datapath.sent) == 2
    assert counters.get("late_join_answers_unknown") == counters.get("late_join_requests_reasked") == 2


def _clock(monkeypatch) -> list[float]:
    import router.portals.late_join_relay as module
    now = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    return now


def test_retransmissions_the_origin_never_sends_are_forgotten_once_their_requesters_gave_up(monkeypatch):
    """An origin that no longer retains what is asked sends nothing back. The requesters give up
    (late join after retransmit_request_message_timeout, 10 s by default; OTR after
    otr_request_duration, 20 s): what nobody asked for since is forgotten and counted, so requests
    nobody will answer do not pile up for good."""
    now = _clock(monkeypatch)
    lj, _, datapath, counters = relay()
    lj.request_in(2, 4, control(UmeRxReq(1, 1, 3, 42, RECEIVER[1], RECEIVER[0]),
                                UmeRxReq(1, 1, 3, 43, RECEIVER[1], RECEIVER[0]),
                                UmeRxReq(1, 1, 3, 44, RECEIVER[1], RECEIVER[0])))
    now[0] += 15.0
    lj.request_in(2, 4, control(UmeRxReq(1, 1, 3, 42, RECEIVER[1], RECEIVER[0])))    # still asked for
    now[0] += 6.0                     # 21 s after 43 and 44 were asked, 6 s after 42 was
    lj.request_in(2, 4, control(UmeRxReq(1, 1, 3, 45, RECEIVER[1], RECEIVER[0])))
    assert not lj.answer_in(retrans_frame(11, 43, b"too late"), CONNECTION)     # nobody waits for it now
    assert datapath.sent == []
    assert counters.get("late_join_requests_unanswered") == 2
    assert lj.answer_in(retrans_frame(11, 42, b"in time"), CONNECTION)
    assert lj.answer_in(retrans_frame(11, 45, b"in time"), CONNECTION)
    assert [decode_lbmc(frame)[0].sqn for *_, frame in datapath.sent] == [42, 45]


def test_an_information_request_the_origin_never_answers_is_forgotten_too(monkeypatch):
    now = _clock(monkeypatch)
    lj, responder, datapath, counters = relay()
    lj.request_in(2, 4, control(LjiRequest(77, 1, 3, *RECEIVER, 0, 0, 200, 4)))
    [(_, message)] = responder.sent
    [info_request] = decode_lbmc(message)[0].headers
    now[0] += 21.0
    lj.request_in(2, 4, control(UmeRxReq(1, 1, 3, 45, RECEIVER[1], RECEIVER[0])))
    assert not lj.answer_in(control(UmeLjInfo(10, 50, info_request.request_idx)), CONNECTION)
    assert datapath.sent == []
    assert counters.get("late_join_requests_unanswered") == 1


def _traced_lines(call) -> int:
    """The Python lines `call` runs (a measure of its work that no clock disturbs)."""
    lines = [0]

    def trace(frame, event, arg):
        if event == "line":
            lines[0] += 1
        return trace
    sys.settrace(trace)
    try:
        call()
    finally:
        sys.settrace(None)
    return lines[0]


def test_an_answer_on_a_connection_not_yet_bound_is_found_without_a_pass_over_every_request():
    """A RETRANS on a connection no LJ_INFO bound yet is found by its topic index and sequence
    number at once, however many requests wait: a pass over all of them per frame, on the
    worker's loop, stalled every portal of the worker when many waited."""
    def lines_to_answer(waiting: int) -> int:
        lj, responder, datapath, _ = relay()
        responder.send_frames = lambda address, frames: None
        for start in range(0, waiting, 64):
            lj.request_in(2, 4, control(*[UmeRxReq(1, 1, 3, sqn, RECEIVER[1], RECEIVER[0])
                                          for sqn in range(start, min(start + 64, waiting))]))
        frame = retrans_frame(11, 5, b"x")
        found = []
        lines = _traced_lines(lambda: found.append(lj.answer_in(frame, Connection())))
        assert found == [True] and len(datapath.sent) == 1
        return lines
    assert lines_to_answer(20_000) == lines_to_answer(10)


def test_two_receivers_of_one_context_asking_for_one_message_each_get_it_from_one_answer(monkeypatch):
    """Two receivers of one context share its request port and, for one source, the topic index:
    only their request indexes tell them apart. Each must get the message; the second is no retry
    of the first (the origin's one answer went to one of them, the other waited a whole retry
    interval)."""
    now = _clock(monkeypatch)
    lj, responder, datapath, counters = relay()
    lj.request_in(2, 4, control(UmeRxReq(1, 1, 3, 42, RECEIVER[1], RECEIVER[0])))
    now[0] += 0.01
    lj.request_in(2, 4, control(UmeRxReq(2, 1, 3, 42, RECEIVER[1], RECEIVER[0])))
    assert _rxreqs_sent(responder) == [42]                   # the origin asked once
    assert counters.get("late_join_requests_joined") == 1
    assert lj.answer_in(retrans_frame(11, 42, b"x"), CONNECTION)
    assert [(portal, ip, port, decode_lbmc(frame)[0].sqn) for _, portal, ip, port, frame in datapath.sent] == \
        [(2, *RECEIVER, 42), (2, *RECEIVER, 42)]             # a copy for each


class _Sources:
    """A portal context that makes proxy sources (recorders)."""
    def __init__(self):
        self.config = UMConfig()
        self.offered = []

    def source(self, topic, **options):
        return SimpleNamespace(index=options["index"], set_cost=lambda cost, hops: None, late_join=None)

    def offer_relayed_late_join(self, source, relay):
        self.offered.append(relay)


def test_requests_of_a_rerouted_stream_go_the_new_way_while_the_old_one_lingers():
    """A stream comes a new way (a link on the old one failed, seen first by the routers before
    it): the old stream ends only when the router past the failure notices it, after its peer
    keepalive timeout. Meanwhile what receivers ask goes the new way, which brings the data:
    the old one leads to a link that is down."""
    from router.worker.records import StreamAdvert
    context = _Sources()
    table = ProxySourceTable(context, 1, 2, 1 << 20, 1.0, PortalCounters(), lambda kind, text: None)
    datapath = Recorder()
    lj = LateJoinRelay("LAN2", context, datapath, SimpleNamespace(streams={}), PortalCounters())

    def advert(stream_id: int, cost: int) -> StreamAdvert:
        return StreamAdvert(stream_id=stream_id, otid=b"o" * 32, topic="t", source="TCP:10.1.1.1:14390:1",
                            origin_domain_id=1, origin_portal="LAN1", origin_index=11, cost=cost, hop_count=2,
                            late_join=True)
    old = table.advertise(1, advert(5, 2))                   # by the peer portal of ring 1
    lj.offer(old)
    new = table.advertise(3, advert(7, 4))                   # the new way, by the peer portal of ring 3
    assert new is old
    headers = [LjiRequest(1, 1, 3, *RECEIVER, 0, 0, 200, 4)]
    request = control(*headers)
    context.offered[0](headers)
    assert datapath.sent == [("late_join", 3, 7, request)]
    table.advertise(1, advert(5, 2))                          # the old way announced again: still the new way
    context.offered[0](headers)
    assert datapath.sent[-1] == ("late_join", 3, 7, request)
    table.end_stream(3, 7)                                    # the new way gone: the one left
    context.offered[0](headers)
    assert datapath.sent[-1] == ("late_join", 1, 5, request)
