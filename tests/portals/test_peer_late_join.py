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

    def send_data(self, message, fragments=1, longest=None):
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
    return PeerLateJoinRelay("PEER", link, datapath, counters), link, datapath, counters


def _crossing(link: _Link) -> list[LbmcMessage]:
    """What went on the link, message by message (a RETRANS goes as two: its address, then it)."""
    out = []
    for data in link.sent:
        offset = 0
        while offset < len(data):
            message, offset = decode_lbmc(data, offset)
            out.append(message)
    link.sent.clear()
    return out


def test_requests_cross_with_the_link_index_and_a_link_address_and_answers_come_back_to_their_requester():
    near, near_link, near_path, near_counters = relay()
    far, far_link, far_path, far_counters = relay()
    asked = encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, [
        LjiRequest(7, 3, 44, "127.0.0.5", 15001, 0, 100, 10, 0),
        UmeRxReq(0, 3, 44, 12, 15001, "127.0.0.5")]))
    near.request_out(4, _Stream(0x1234), asked)                 # a receiver behind portal 4 asked
    [message] = _crossing(near_link)
    assert is_late_join_request(message)
    info_request, rx_request = message.headers
    assert [h.transport_idx for h in message.headers] == [0x1234, 0x1234]
    assert info_request.topic_idx == 44 and rx_request.id_2 == 44                # the requester's own
    # The requester's address on the link: not its own (another LAN may use that one), its port kept.
    link_address = (info_request.req_ip, info_request.req_port)
    assert link_address == (rx_request.rx_ip, rx_request.rx_port) and link_address[1] == 15001
    assert link_address[0].startswith("0.") and link_address[0] != "127.0.0.5"

    # The far side: the stream with link index 0x1234 comes from its portal 2, stream 77.
    far.request_in(message, {0x1234: (2, 77)}.get)
    [(kind, ring, stream_id, forwarded)] = far_path.records
    assert (kind, ring, stream_id) == ("request", 2, 77) and decode_lbmc(forwarded)[0] == message

    # Its ingress answers the address the requests gave; the answers cross back.
    info = encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, [UmeLjInfo(0, 12, 7, 0)]))
    retrans = encode_lbmc(LbmcMessage(LBMC_TYPE_RETRANS, [Frag(12, 0, 100)], b"x" * 40, tidx=44, sqn=12))
    biggest = encode_lbmc(LbmcMessage(LBMC_TYPE_RETRANS, [], b"y" * (65535 - 12), tidx=44, sqn=13))
    for answer in (info, retrans, biggest):
        far.answer_out(*link_address, answer)
    crossing = _crossing(far_link)
    assert [m.msg_type for m in crossing] == [LBMC_TYPE_CONTROL] * 2 + [LBMC_TYPE_RETRANS] + \
        [LBMC_TYPE_CONTROL, LBMC_TYPE_RETRANS]
    assert all(is_late_join_answer(m) for m in crossing)
    assert {(m.headers[0].ipaddr, m.headers[0].port) for m in crossing if m.msg_type == LBMC_TYPE_CONTROL} == \
        {link_address}
    for message in crossing:
        near.answer_in(message)
    assert near_path.records == [("answer", 4, "127.0.0.5", 15001, frames) for frames in (info, retrans, biggest)]
    assert near_counters == {"late_join_requests_rcvd": 1, "late_join_requests_relayed": 1, "late_join_answers_rcvd": 3}
    assert far_counters == {"late_join_requests_rcvd": 1, "late_join_requests_relayed": 1, "late_join_answers_sent": 3}


def test_two_requesters_with_one_address_behind_two_portals_each_get_their_own_answers():
    near, link, datapath, _ = relay()
    for egress in (4, 5):                            # 10.0.0.5:14391 in two LANs, each behind its portal
        asked = encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, [LjiRequest(7, 3, 44, "10.0.0.5", 14391, 0, 100,
                                                                       10, 0)]))
        near.request_out(egress, _Stream(0x10), asked)
    addresses = [(m.headers[0].req_ip, m.headers[0].req_port) for m in _crossing(link)]
    assert len(set(addresses)) == 2
    for address in reversed(addresses):
        near.answer_in(LbmcMessage(LBMC_TYPE_CONTROL, [Destination(0, *address, 1, 0, "0.0.0.0", 0),
                                                       UmeLjInfo(0, 5, 7, 0)]))
    assert [(ring, ip, port) for _, ring, ip, port, _ in datapath.records] == \
        [(5, "10.0.0.5", 14391), (4, "10.0.0.5", 14391)]


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
