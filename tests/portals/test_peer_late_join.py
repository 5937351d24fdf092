"""What late join and OTR put on a peer link (router.portals.peer_late_join): requests carry the
stream's link topic index and keep the requester's own; an answer crosses addressed to its
requester and arrives byte for byte as it left, to the portal the request came in by."""
from router.portals.peer_late_join import PeerLateJoinRelay, is_late_join_answer, is_late_join_request
from router.um.wire.lbmc import LbmcMessage, decode_lbmc, encode_lbmc
from router.um.wire.lbmc_constants import LBMC_TYPE_CONTROL, LBMC_TYPE_RETRANS
from router.um.wire.lbmc_headers import Destination, Frag
from router.um.wire.lbmc_late_join import LjiRequest, UmeLjInfo, UmeRxReq
from router.worker.records import StreamAdvert


class _Counters(dict):
    def add(self, name, n=1):
        self[name] = self.get(name, 0) + n


class _Link:
    """What the relay sends on, kept (the link itself is tested over TCP in test_peer_link.py)."""
    is_up = True

    def __init__(self):
        self.sent = []

    def send_control(self, message):
        self.sent.append(encode_lbmc(message) if isinstance(message, LbmcMessage) else bytes(message))
        return True

    def send_data(self, message, fragments=1):
        return self.send_control(message)


class _Datapath:
    def __init__(self):
        self.records = []

    def late_join(self, ring, stream_id, message):
        self.records.append(("request", ring, stream_id, bytes(message)))

    def late_join_answer(self, ring, ip, port, frames):
        self.records.append(("answer", ring, ip, port, bytes(frames)))


class _Stream:
    def __init__(self, link_index, late_join=True):
        self.advert = StreamAdvert(9, "t", bytes(32), 0, 1, 1, "s", "PEER", link_index, late_join)
        self.late_join = late_join


def relay():
    link, datapath, counters = _Link(), _Datapath(), _Counters()
    return PeerLateJoinRelay("PEER", link, datapath, counters, lambda *a: None), link, datapath, counters


def test_requests_cross_with_the_link_index_and_the_answers_come_back_to_their_portal_unchanged():
    near, near_link, near_path, near_counters = relay()
    far, far_link, far_path, far_counters = relay()
    asked = encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, [
        LjiRequest(7, 3, 44, "127.0.0.5", 15001, 0, 100, 10, 0),
        UmeRxReq(0, 3, 44, 12, 15001, "127.0.0.5")]))
    near.request_out(4, _Stream(0x1234), asked)                 # a receiver behind portal 4 asked
    [on_link] = near_link.sent
    message = decode_lbmc(on_link)[0]
    assert is_late_join_request(message)
    assert [h.transport_idx for h in message.headers] == [0x1234, 0x1234]
    assert message.headers[0].topic_idx == 44 and message.headers[1].id_2 == 44      # the requester's own

    # The far side: the stream with link index 0x1234 comes from its portal 2, stream 77.
    far.request_in(message, {0x1234: (2, 77)}.get)
    [(kind, ring, stream_id, forwarded)] = far_path.records
    assert (kind, ring, stream_id) == ("request", 2, 77) and decode_lbmc(forwarded)[0] == message

    info = encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, [UmeLjInfo(0, 12, 7, 0)]))
    retrans = encode_lbmc(LbmcMessage(LBMC_TYPE_RETRANS, [Frag(12, 0, 100)], b"x" * 40, tidx=44, sqn=12))
    for answer in (info, retrans):
        far.answer_out("127.0.0.5", 15001, answer)
    for data in far_link.sent:
        crossing = decode_lbmc(data)[0]
        assert is_late_join_answer(crossing) and (crossing.headers[0].ipaddr, crossing.headers[0].port) == \
            ("127.0.0.5", 15001)
        near.answer_in(crossing)
    assert near_path.records == [("answer", 4, "127.0.0.5", 15001, info), ("answer", 4, "127.0.0.5", 15001, retrans)]
    assert near_counters == {"late_join_requests_rcvd": 1, "late_join_requests_relayed": 1, "late_join_answers_rcvd": 2}
    assert far_counters == {"late_join_requests_rcvd": 1, "late_join_requests_relayed": 1, "late_join_answers_sent": 2}


def test_what_cannot_be_relayed_is_counted():
    near, link, _, counters = relay()
    asked = encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, [UmeRxReq(0, 3, 44, 12, 15001, "127.0.0.5")]))
    near.request_out(4, _Stream(5, late_join=None), asked)      # the origin offers no late join
    near.request_out(4, None, asked)                             # the stream has ended
    near.request_out(4, _Stream(5), b"\x00\x00")                 # not LBMC
    assert link.sent == [] and counters["late_join_requests_not_relayed"] == 3
    near.request_in(decode_lbmc(asked)[0], {}.get)               # a link index we send nothing on
    assert counters["late_join_requests_not_relayed"] == 4
    stranger = LbmcMessage(LBMC_TYPE_CONTROL, [*decode_lbmc(encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, [
        UmeLjInfo(0, 1, 2, 0)])))[0].headers])
    stranger.headers.insert(0, Destination(0, "127.0.0.9", 1, 1, 0, "0.0.0.0", 0))
    near.answer_in(stranger)                                     # nobody here asked
    assert counters["late_join_answers_unknown"] == 1
