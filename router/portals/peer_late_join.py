"""Late join and OTR across a peer link: requests travel on to the originating source, hop by hop.

A stream that comes over a link is advertised with ADVERTISEMENT's LJ flag (ad_flags) when its
origin offers late join, so the far router's proxy sources offer it too (spec/dro.md §2.7: "Late
Join / OTR: supported end-to-end; proxies don't retain"). What a receiver there asks of such a
proxy source reaches this router's peer portal as the stream's ingress (router.portals.late_join_relay,
a LATE_JOIN ring record), and crosses the link as a CONTROL message of the requester's own
headers, each with its transport index set to the stream's topic index on the link:

    CONTROL -> LJI_REQ(transport_idx = link topic index, the requester's index, address, ...)
    CONTROL -> UME_RXREQ(transport_idx = link topic index, the requester's topic index, sqn, address)

The far peer portal finds the stream by that index and hands the request to the stream's ingress
portal there (a peer portal again, or the endpoint portal in the origin's domain, which asks the
origin and remembers for whom). The answers come back the way the request went; across each link
they are addressed to the requester with a DESTINATION header (as responses are, router.portals.
peer_responses):

    CONTROL -> DESTINATION(requester ip, port) -> UME_LJ_INFO
    RETRANS(topic index, sqn) -> DESTINATION(requester ip, port) -> [FRAG ->] DATA

and the portal that sent the request on finds the portal it came from by that address (a
requester is a context's request port, behind one portal of this router). Nothing in the
requests changes on the way but the transport index; the requester's topic index, which the
RETRANS frames carry back, stays its own.
"""
from __future__ import annotations

import logging
from collections import OrderedDict

from router.um.wire.errors import WireError
from router.um.wire.lbmc import LbmcMessage, decode_lbmc, encode_lbmc
from router.um.wire.lbmc_constants import LBMC_TYPE_CONTROL, LBMC_TYPE_RETRANS
from router.um.wire.lbmc_headers import Destination
from router.um.wire.lbmc_late_join import LjiRequest, UmeLjInfo, UmeRxReq

log = logging.getLogger(__name__)

MAX_REQUESTERS = 65_536          # requester addresses remembered (oldest forgotten first)


def is_late_join_request(message: LbmcMessage) -> bool:
    return message.msg_type == LBMC_TYPE_CONTROL and bool(message.headers) \
        and all(isinstance(h, (LjiRequest, UmeRxReq)) for h in message.headers)


def is_late_join_answer(message: LbmcMessage) -> bool:
    """An answer addressed to a requester across the link (never a stream's data)."""
    if len(message.headers) < 1 or not isinstance(message.headers[0], Destination):
        return False
    if message.msg_type == LBMC_TYPE_RETRANS:
        return True
    return message.msg_type == LBMC_TYPE_CONTROL and len(message.headers) > 1 \
        and all(isinstance(h, UmeLjInfo) for h in message.headers[1:])


def _requester(header) -> tuple[str, int]:
    if isinstance(header, LjiRequest):
        return header.req_ip, header.req_port
    return header.rx_ip, header.rx_port


class PeerLateJoinRelay:
    """One peer portal's part: requests out over the link for the streams it brings in, requests
    in for the streams it sends, and the answers both ways."""

    def __init__(self, name: str, link, datapath, counters, log_event):
        self.name = name
        self.link = link
        self.datapath = datapath
        self.counters = counters
        self.log_event = log_event
        self.requesters: OrderedDict[tuple[str, int], int] = OrderedDict()    # (ip, port) -> portal index

    # -- a stream we bring in over the link: its requests go out ------------------------------------
    def request_out(self, egress: int, stream, message: bytes) -> None:
        """Requests a receiver behind portal `egress` sent for `stream` (ours from the link)."""
        self.counters.add("late_join_requests_rcvd")
        try:
            headers = decode_lbmc(message)[0].headers
        except WireError as err:
            headers = []
            log.info("portal %s: late-join requests not relayed: %s", self.name, err)
        requests = [h for h in headers if isinstance(h, (LjiRequest, UmeRxReq))]
        if stream is None or not stream.late_join or not requests or not self.link.is_up:
            self.counters.add("late_join_requests_not_relayed")
            return
        link_index = stream.advert.origin_index
        for header in requests:
            header.transport_idx = link_index
            self._remember(_requester(header), egress)
        if self.link.send_control(LbmcMessage(LBMC_TYPE_CONTROL, requests)):
            self.counters.add("late_join_requests_relayed")
        else:
            self.counters.add("late_join_requests_not_relayed")

    def _remember(self, requester: tuple[str, int], egress: int) -> None:
        self.requesters[requester] = egress
        self.requesters.move_to_end(requester)
        while len(self.requesters) > MAX_REQUESTERS:
            self.requesters.popitem(last=False)

    def answer_in(self, message: LbmcMessage) -> None:
        """An answer from the far side: to the portal its request came in by."""
        destination = message.headers[0]
        egress = self.requesters.get((destination.ipaddr, destination.port))
        if egress is None:
            self.counters.add("late_join_answers_unknown")
            return
        self.counters.add("late_join_answers_rcvd")
        inner = LbmcMessage(message.msg_type, message.headers[1:], message.payload, message.tidx, message.sqn,
                            message.has_data)
        self.datapath.late_join_answer(egress, destination.ipaddr, destination.port, encode_lbmc(inner))

    # -- a stream we send over the link: the far side's requests come in -----------------------------
    def request_in(self, message: LbmcMessage, stream_for_link_index) -> None:
        """Requests the far side relayed for a stream we send it: to that stream's ingress portal
        (found by the link topic index they carry), as from this portal."""
        self.counters.add("late_join_requests_rcvd")
        found = stream_for_link_index(message.headers[0].transport_idx)
        if found is None or any(h.transport_idx != message.headers[0].transport_idx for h in message.headers):
            self.counters.add("late_join_requests_not_relayed")
            return
        ring, stream_id = found
        self.datapath.late_join(ring, stream_id, encode_lbmc(message))
        self.counters.add("late_join_requests_relayed")

    def answer_out(self, ipaddr: str, port: int, frames: bytes) -> None:
        """An answer to a request that came over the link: back over it, addressed."""
        try:
            message = decode_lbmc(frames)[0]
            destination = Destination(0, ipaddr, port, 1, 0, "0.0.0.0", 0)
            data = encode_lbmc(LbmcMessage(message.msg_type, [destination, *message.headers], message.payload,
                                           message.tidx, message.sqn, message.has_data))
        except WireError as err:
            self.counters.add("late_join_requests_not_relayed")
            log.info("portal %s: a late-join answer cannot cross the link: %s", self.name, err)
            return
        sent = self.link.send_control(data) if message.msg_type == LBMC_TYPE_CONTROL else self.link.send_data(data, 1)
        if sent:
            self.counters.add("late_join_answers_sent")
