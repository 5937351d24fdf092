"""Late join and OTR across the router: requests relayed to the originating source.

The DRO's proxy sources keep nothing (spec/dro.md §2.1, §2.7): a receiver's late-join and OTR
requests to a proxy source travel to the originating source, and its answers come back. So a
proxy source whose stream's origin offers late join advertises it too (a LATEJOIN option naming
its portal context's request port). What a receiver sends there (LJI_REQ, UME_RXREQ) goes in a
LATE_JOIN ring record to the stream's ingress portal, which sends it on to the origin's request
port as its own (its request index and request port, the origin's transport and topic indexes),
remembering for whom. The answers come to the ingress portal's request port: a UME_LJ_INFO (found
by its request index) and RETRANS frames (by topic index and sequence number) go back in a
LATE_JOIN_ANSWER record to the egress portal, made what the requester asked for (its request
index, the proxy's topic index), and the egress portal sends them to the requester. Sequence
numbers cross unchanged: a proxy source sends the origin's.

A portal whose proxy sources retain (`source late_join 1`, `<late-join provide="always">`)
answers from its own retention instead. When the stream's ingress is a peer portal the requests
go on over the link, towards the origin, and the answers come back the same way
(router.portals.peer_late_join).
"""
from __future__ import annotations

import logging
import time
import weakref
from collections import OrderedDict

from router.um.requests import RequestPortUnavailable
from router.um.wire.errors import WireError
from router.um.wire.lbmc import (LBMC_TYPE_CONTROL, LBMC_TYPE_RETRANS, MESSAGE_HEADER, LbmcMessage, decode_lbmc,
                                 encode_lbmc)
from router.um.wire.lbmc_late_join import LjiRequest, UmeLjInfo, UmeRxReq

log = logging.getLogger(__name__)

MAX_RELAYED = 262_144          # requests remembered at once (oldest forgotten first, answers then unknown)
# A retransmission asked of an origin in the last quarter second is not asked again for another
# requester: several late receivers of one topic ask for the same messages at once, and each answer
# serves them all. A requester asking again (after its retransmit_request_interval, 500 ms by
# default, whatever that is set to) is asked for again at once: its first request or the answer
# may have been lost.
REASK_AFTER = 0.25


class LateJoinRelay:
    """One endpoint portal's relay: as egress, for its proxy sources; as ingress, to the origins
    of the streams it feeds."""

    def __init__(self, name: str, context, datapath, streams, counters):
        self.name = name
        self.context = context
        self.datapath = datapath
        self.streams = streams                     # router.portals.streams.StreamTable (ingress)
        self.counters = counters
        # Ingress: our request index -> (egress portal, requester ip, port, its request index, origin);
        # egress None: our own LJI_REQ, asked only so its answer binds the origin's connection.
        # An origin is its context's request port (ip, port): one connection brings its answers.
        self.infos: OrderedDict[int, tuple] = OrderedDict()
        self.info_indexes: dict[tuple, int] = {}
        self.next_index = 1
        # Ingress: (origin, origin topic index, sequence number) -> [when last asked, (egress portal,
        # requester ip, port, proxy topic index)...]. A RETRANS names only a topic index and a
        # sequence number, and two origins may use the same index (each context numbers its own
        # from 1): the connection an answer comes on tells whose it is, bound by the LJ_INFO that
        # came first on it.
        self.retransmissions: OrderedDict[tuple, list] = OrderedDict()
        self.bound: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()     # connection -> origin
        context.uim_relay = self.answer_in

    # -- egress: a receiver asked one of our proxy sources -----------------------------------------
    def offer(self, proxy) -> None:
        """A proxy source of a stream whose origin offers late join: relay what is asked of it."""
        self.context.offer_relayed_late_join(proxy.source, lambda message: self._request_out(proxy, message))

    def _request_out(self, proxy, message: bytes) -> None:
        self.counters.add("late_join_requests_rcvd")
        if not proxy.streams:
            self.counters.add("late_join_requests_not_relayed")
            return
        ring, stream_id = min(proxy.streams)
        self.datapath.late_join(ring, stream_id, message)

    def answer_out(self, ipaddr: str, port: int, frames: bytes) -> None:
        """The origin's answers, made what our requester asked for: to it."""
        self.context.responder.send_frames((ipaddr, port), frames)
        self.counters.add("late_join_answers_sent")

    # -- ingress: ask the origin -------------------------------------------------------------------
    def request_in(self, egress: int, stream_id: int, message: bytes) -> None:
        """Requests a receiver behind portal `egress` sent for stream `stream_id` we feed."""
        stream = self.streams.streams.get(stream_id)
        option = getattr(stream, "late_join", None)
        try:
            headers = decode_lbmc(message)[0].headers
            reply_ip, reply_port = self.context.request_address()
        except (WireError, RequestPortUnavailable) as err:
            log.info("portal %s: late-join requests for stream %d not relayed: %s", self.name, stream_id, err)
            headers, option = [], None
        if option is None:
            self.counters.add("late_join_requests_not_relayed")
            return
        origin_tidx = stream.advert.origin_index
        origin = (option.src_ip, option.src_tcp_port)
        now = time.monotonic()
        out, asks_info = [], False
        for header in headers:
            if isinstance(header, LjiRequest):
                index = self._info_index((egress, header.req_ip, header.req_port, header.request_idx, origin))
                out.append(LjiRequest(index, option.transport_idx, origin_tidx, reply_ip, reply_port,
                                      header.tx_low_sqn, header.rx_req_max, header.rx_req_outstanding_max,
                                      header.flags))
                asks_info = True
            elif isinstance(header, UmeRxReq):
                waiting = self.retransmissions.get((origin, origin_tidx, header.seqnum))
                if waiting is None:
                    waiting = self.retransmissions[(origin, origin_tidx, header.seqnum)] = [now - REASK_AFTER]
                    self._trim(self.retransmissions)
                entry = (egress, header.rx_ip, header.rx_port, header.id_2)
                again = entry in waiting              # its own retry: asked again, whenever it comes
                if not again:
                    waiting.append(entry)
                if not again and now - waiting[0] < REASK_AFTER:
                    self.counters.add("late_join_requests_joined")   # one answer will serve both
                    continue
                waiting[0] = now
                out.append(UmeRxReq(0, option.transport_idx, origin_tidx, header.seqnum, reply_port, reply_ip))
        if out and not asks_info:
            # The origin answers in order on one connection: this LJ_INFO comes before the RETRANS
            # frames and binds that connection to it (the connection may be new each time).
            index = self._info_index((None, reply_ip, reply_port, 0, origin))
            out.insert(0, LjiRequest(index, option.transport_idx, origin_tidx, reply_ip, reply_port))
        if out:
            self.context.responder.send_frames((option.src_ip, option.src_tcp_port),
                                               encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, out)))
            self.counters.add("late_join_requests_relayed")

    def _info_index(self, key: tuple) -> int:
        index = self.info_indexes.get(key)
        if index is None:
            index = self.info_indexes[key] = self.next_index
            self.next_index = (self.next_index % 0xFFFFFFFF) + 1
            self.infos[index] = key
            if len(self.infos) > MAX_RELAYED:
                _, old = self.infos.popitem(last=False)
                self.info_indexes.pop(old, None)
        return index

    @staticmethod
    def _trim(table: OrderedDict) -> None:
        while len(table) > MAX_RELAYED:
            table.popitem(last=False)

    def answer_in(self, frame: bytes, connection) -> bool:
        """A frame at our request port on `connection` (the context's hook): an origin's answer to
        a request we relayed goes back to its egress portal; False if it is none of ours."""
        if frame[0] == LBMC_TYPE_RETRANS and len(frame) >= MESSAGE_HEADER.size:
            _, _, length, tidx, sqn = MESSAGE_HEADER.unpack_from(frame)
            origin = self.bound.get(connection)
            if origin is None:          # no LJ_INFO on it yet: only if one origin waits for it
                origins = [key[0] for key in self.retransmissions if key[1] == tidx and key[2] == sqn]
                origin = origins[0] if len(origins) == 1 else None
            waiting = self.retransmissions.pop((origin, tidx, sqn), None)
            if waiting is None:
                self.counters.add("late_join_answers_unknown")    # already answered, or forgotten
                return False
            self.counters.add("late_join_answers_rcvd")
            for egress, ip, port, proxy_tidx in waiting[1:]:
                copy = bytearray(frame[:length])
                copy[4:8] = proxy_tidx.to_bytes(4, "big")
                self.datapath.late_join_answer(egress, ip, port, copy)
            return True
        if frame[0] != LBMC_TYPE_CONTROL:
            return False
        try:
            headers = decode_lbmc(frame)[0].headers
        except WireError:
            return False
        infos = [h for h in headers if isinstance(h, UmeLjInfo) and h.qidx in self.infos]
        if not infos or len(infos) != len(headers):
            if any(isinstance(h, UmeLjInfo) for h in headers):
                self.counters.add("late_join_answers_unknown")
            return False
        for info in infos:
            self.counters.add("late_join_answers_rcvd")
            egress, ip, port, request_idx, origin = self.infos[info.qidx]
            self.bound[connection] = origin
            if egress is None:          # asked only to bind the connection
                continue
            answer = UmeLjInfo(info.low_seqnum, info.high_seqnum, request_idx, info.flags)
            self.datapath.late_join_answer(egress, ip, port, encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, [answer])))
        return True
