"""Late join and OTR across a peer link: requests travel on to the originating source, hop by hop.

A stream that comes over a link is advertised with ADVERTISEMENT's LJ flag (ad_flags) when its
origin offers late join, so the far router's proxy sources offer it too (spec/dro.md §2.7: "Late
Join / OTR: supported end-to-end; proxies don't retain"). What a receiver there asks of such a
proxy source reaches this router's peer portal as the stream's ingress (router.portals.late_join_relay,
a LATE_JOIN ring record), and crosses the link as a CONTROL message of the requester's own
headers, each with its transport index set to the stream's topic index on the link and its
address replaced by one this portal gives the requester (0.x.y.z, its port kept):

    CONTROL -> LJI_REQ(transport_idx = link topic index, the requester's index, its link address, ...)
    CONTROL -> UME_RXREQ(transport_idx = link topic index, the requester's topic index, sqn, link address)

Two LANs may use one private address: behind two portals of this router, two requesters can have
the same ip and port, so the answers find theirs by the link address, never by the real one.

The far peer portal finds the stream by that index and hands the request to the stream's ingress
portal there (a peer portal again, or the endpoint portal in the origin's domain, which asks the
origin and remembers for whom). The answers come back the way the request went; across each link
they are addressed to the requester's link address with a DESTINATION header (as responses are,
router.portals.peer_responses):

    CONTROL -> DESTINATION(link address) -> UME_LJ_INFO
    CONTROL -> DESTINATION(link address), then the origin's RETRANS frame as it is

A RETRANS frame may be as long as an LBMC message can be (a fragment at LBT-TCP's 65,535-byte
datagram size), so its address goes in a message of its own just ahead of it: the two are queued
as one piece, and the link keeps their order. A UDP path may take the address alone (its queue
full, or the RETRANS too large for a datagram): the answer is not counted sent, and the next
RETRANS comes with an address of its own. The portal that sent the request on finds the
requester (its portal, address) by the link address. Nothing else in the requests changes on the
way; the requester's topic index, which the RETRANS frames carry back, stays its own.
"""
from __future__ import annotations

import functools
import logging
from collections import OrderedDict

from router.um.wire.errors import WireError
from router.um.wire.lbmc import LbmcMessage, decode_lbmc, encode_lbmc
from router.um.wire.lbmc_constants import LBMC_TYPE_CONTROL, LBMC_TYPE_RETRANS
from router.um.wire.lbmc_headers import Destination
from router.um.wire.lbmc_late_join import LjiRequest, UmeLjInfo, UmeRxReq

log = logging.getLogger(__name__)

MAX_REQUESTERS = 65_536          # requester addresses remembered (oldest forgotten first)
_ADDRESS_SPACE = 1 << 24         # link addresses 0.0.0.1 .. 0.255.255.255 ("this network": no host's)


def _destination(ipaddr: str, port: int) -> Destination:
    return Destination(0, ipaddr, port, 1, 0, "0.0.0.0", 0)


@functools.lru_cache(maxsize=4096)
def _address_message(ipaddr: str, port: int) -> bytes:
    """The message addressing a RETRANS across the link. It is the same for every answer to one
    requester, hundreds in a row, and encoding it took four times as long as the RETRANS."""
    return encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, [_destination(ipaddr, port)]))


def is_late_join_request(message: LbmcMessage) -> bool:
    return message.msg_type == LBMC_TYPE_CONTROL and bool(message.headers) \
        and all(isinstance(h, (LjiRequest, UmeRxReq)) for h in message.headers)


def is_late_join_answer(message: LbmcMessage) -> bool:
    """An answer across the link: a RETRANS (never a stream's data), or its address, or an
    addressed UME_LJ_INFO."""
    if message.msg_type == LBMC_TYPE_RETRANS:
        return True
    return message.msg_type == LBMC_TYPE_CONTROL and bool(message.headers) \
        and isinstance(message.headers[0], Destination) \
        and all(isinstance(h, UmeLjInfo) for h in message.headers[1:])


def _requester(header) -> tuple[str, int]:
    if isinstance(header, LjiRequest):
        return header.req_ip, header.req_port
    return header.rx_ip, header.rx_port


def _readdress(header, ip: str) -> None:
    if isinstance(header, LjiRequest):
        header.req_ip = ip
    else:
        header.rx_ip = ip


class PeerLateJoinRelay:
    """One peer portal's part: requests out over the link for the streams it brings in, requests
    in for the streams it sends, and the answers both ways."""

    def __init__(self, name: str, link, datapath, counters):
        self.name = name
        self.link = link
        self.datapath = datapath
        self.counters = counters
        # link address (ip, port) -> (portal index, requester ip, port); and back.
        self.requesters: OrderedDict[tuple[str, int], tuple[int, str, int]] = OrderedDict()
        self.link_addresses: dict[tuple[int, str, int], tuple[str, int]] = {}
        self._next_address = 0
        self._retrans_for: tuple[str, int] | None = None    # the address of the RETRANS next on the link

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
            _readdress(header, self._link_address(egress, *_requester(header))[0])
        if self.link.send_control(LbmcMessage(LBMC_TYPE_CONTROL, requests)):
            self.counters.add("late_join_requests_relayed")
        else:
            self.counters.add("late_join_requests_not_relayed")

    def _link_address(self, egress: int, ip: str, port: int) -> tuple[str, int]:
        """The address a requester behind portal `egress` has on the link (kept while in use)."""
        key = (egress, ip, port)
        address = self.link_addresses.get(key)
        if address is None:
            self._next_address = self._next_address % (_ADDRESS_SPACE - 1) + 1
            n = self._next_address
            address = (f"0.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}", port)
            forgotten = self.requesters.pop(address, None)      # after 16 million: the oldest goes
            if forgotten is not None:
                self.link_addresses.pop(forgotten, None)
            self.link_addresses[key] = address
        self.requesters[address] = key
        self.requesters.move_to_end(address)
        while len(self.requesters) > MAX_REQUESTERS:
            _, old = self.requesters.popitem(last=False)
            self.link_addresses.pop(old, None)
        return address

    def answer_in(self, message: LbmcMessage) -> None:
        """An answer from the far side: to the requester, by the portal its request came in by."""
        if message.msg_type == LBMC_TYPE_RETRANS:
            address, self._retrans_for = self._retrans_for, None
            frames = encode_lbmc(message)
        else:
            destination = message.headers[0]
            address = (destination.ipaddr, destination.port)
            if len(message.headers) == 1:         # the address of the RETRANS that follows
                self._retrans_for = address
                return
            frames = encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, message.headers[1:]))
        requester = self.requesters.get(address) if address is not None else None
        if requester is None:
            self.counters.add("late_join_answers_unknown")
            return
        self.counters.add("late_join_answers_rcvd")
        self.datapath.late_join_answer(*requester, frames)

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
        if frames[0] == LBMC_TYPE_RETRANS:
            # Its address just ahead of it, one piece in the link's queue: nothing comes between.
            sent = self.link.send_data(_address_message(ipaddr, port) + bytes(frames), 2)   # True: both went
        else:
            try:
                message = decode_lbmc(frames)[0]
                sent = self.link.send_control(LbmcMessage(LBMC_TYPE_CONTROL, [_destination(ipaddr, port),
                                                                              *message.headers]))
            except WireError as err:
                log.info("portal %s: a late-join answer cannot cross the link: %s", self.name, err)
                sent = False
        if sent:
            self.counters.add("late_join_answers_sent")
