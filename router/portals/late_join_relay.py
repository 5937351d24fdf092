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
numbers cross unchanged: a proxy source sends the origin's. The egress portal holds back a
requester's retry of a retransmission whose answer is still on its way, for as long as the round
trip takes (router.portals.late_join_retries): on a loaded host, the retries and their answers
crowded out the answers themselves.

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

from router.portals.late_join_retries import RetryPacing
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
# A request nobody asked for again for as long as a requester waits (the longest of its give-up
# times and retry intervals, UM's receiver options) is forgotten: an origin that no longer retains
# a message sends nothing back, and its requesters have given up by then.
_REQUESTER_WAITS = ("retransmit_request_message_timeout", "otr_request_duration", "otr_request_maximum_interval",
                    "late_join_info_request_interval")


class _Asked:
    """A retransmission asked of an origin: when it was last asked of it, when a requester last
    asked for it, and who waits for it."""
    __slots__ = ("asked_at", "heard_at", "requesters")

    def __init__(self, now: float):
        self.asked_at: float | None = None         # not asked of the origin yet
        self.heard_at = now
        # (egress portal, requester ip, port, proxy topic index, its request index): two receivers
        # of one context share its request port and the topic index, not the request index.
        self.requesters: dict[tuple, None] = {}


class _InfoAsked:
    """An LJI_REQ relayed for one requester (or our own, egress None), by our request index."""
    __slots__ = ("key", "heard_at", "answered")

    def __init__(self, key: tuple, now: float):
        self.key = key              # (egress portal, requester ip, port, its request index, origin)
        self.heard_at = now
        self.answered = False


class LateJoinRelay:
    """One endpoint portal's relay: as egress, for its proxy sources; as ingress, to the origins
    of the streams it feeds."""

    def __init__(self, name: str, context, datapath, streams, counters):
        self.name = name
        self.context = context
        self.datapath = datapath
        self.streams = streams                     # router.portals.streams.StreamTable (ingress)
        self.counters = counters
        # Ingress: our request index -> the LJI_REQ relayed (its key: egress portal, requester ip,
        # port, its request index, origin); egress None: our own, asked only so its answer binds the
        # origin's connection. An origin is its context's request port (ip, port): one connection
        # brings its answers. Oldest asked first.
        self.infos: OrderedDict[int, _InfoAsked] = OrderedDict()
        self.info_indexes: dict[tuple, int] = {}
        self.next_index = 1
        # Ingress: (origin, origin topic index, sequence number) -> _Asked, the one a requester
        # asked for longest ago first. A RETRANS names only a topic index and a sequence number,
        # and two origins may use the same index (each context numbers its own from 1): the
        # connection an answer comes on tells whose it is, bound by the LJ_INFO that came first on
        # it; before that, the origins waiting for (topic index, sequence number) say whether one
        # alone can be meant.
        self.retransmissions: OrderedDict[tuple, _Asked] = OrderedDict()
        self.origins_waiting: dict[tuple[int, int], list[tuple]] = {}
        self.bound: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()     # connection -> origin
        self.bound_to: dict[tuple, weakref.ref] = {}                           # origin -> its last one
        self.forget_after = max(context.config.get("receiver", name) for name in _REQUESTER_WAITS) / 1000
        self.retries = RetryPacing(self.forget_after)             # egress: retries while answers are on their way
        context.uim_relay = self.answer_in

    # -- egress: a receiver asked one of our proxy sources -----------------------------------------
    def offer(self, proxy) -> None:
        """A proxy source of a stream whose origin offers late join: relay what is asked of it."""
        self.context.offer_relayed_late_join(proxy.source, lambda headers: self._request_out(proxy, headers))

    def _request_out(self, proxy, headers: list) -> None:
        """A receiver's LJI_REQ and UME_RXREQ headers for one of our proxy sources."""
        self.counters.add("late_join_requests_rcvd")
        if not proxy.streams:
            self.counters.add("late_join_requests_not_relayed")
            return
        now = time.monotonic()
        going = [header for header in headers if not isinstance(header, UmeRxReq)
                 or self.retries.admit(header.rx_ip, header.rx_port, header.id_2, header.seqnum, header.request_idx,
                                       now)]
        if len(going) < len(headers):
            self.counters.add("late_join_retries_held", len(headers) - len(going))
            if not going:
                return
        # The newest way: while a reroute's old way lingers (a failed link is noticed past it only
        # after the peer keepalive timeout), the data comes the new way, and so must the requests.
        ring, stream_id = next(reversed(proxy.streams))
        self.datapath.late_join(ring, stream_id, encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, going)))

    def answer_out(self, ipaddr: str, port: int, frames: bytes) -> None:
        """The origin's answers, made what our requester asked for: to it."""
        self.retries.answered(ipaddr, port, frames, time.monotonic())
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
        self._forget_given_up(now)
        out, asks_info, reasks = [], False, False
        for header in headers:
            if isinstance(header, LjiRequest):
                index = self._info_index((egress, header.req_ip, header.req_port, header.request_idx, origin), now)
                out.append(LjiRequest(index, option.transport_idx, origin_tidx, reply_ip, reply_port,
                                      header.tx_low_sqn, header.rx_req_max, header.rx_req_outstanding_max,
                                      header.flags))
                asks_info = True
            elif isinstance(header, UmeRxReq):
                asked = self._asked(origin, origin_tidx, header.seqnum, now)
                requester = (egress, header.rx_ip, header.rx_port, header.id_2, header.request_idx)
                again = requester in asked.requesters     # its own retry: asked again, whenever it comes
                if not again:
                    asked.requesters[requester] = None
                if not again and asked.asked_at is not None and now - asked.asked_at < REASK_AFTER:
                    self.counters.add("late_join_requests_joined")   # one answer will serve both
                    continue
                if asked.asked_at is not None:
                    # The origin answers this one too: an answer after the first finds nobody
                    # waiting (late_join_answers_unknown), each at most once for each asked again.
                    self.counters.add("late_join_requests_reasked")
                    reasks = True
                asked.asked_at = now
                out.append(UmeRxReq(0, option.transport_idx, origin_tidx, header.seqnum, reply_port, reply_ip))
        if out and not asks_info and (reasks or not self._bound_open(origin)):
            # The origin answers in order on one connection: this LJ_INFO comes before the RETRANS
            # frames and binds that connection to it. Asked only while no open connection is bound
            # to the origin, or when a requester asks again (an answer may have come on a new one
            # and found nobody): asked with every request, it doubled what the origin answered.
            index = self._info_index((None, reply_ip, reply_port, 0, origin), now)
            out.insert(0, LjiRequest(index, option.transport_idx, origin_tidx, reply_ip, reply_port))
        if out:
            self.context.responder.send_frames((option.src_ip, option.src_tcp_port),
                                               encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, out)))
            self.counters.add("late_join_requests_relayed")

    def _bound_open(self, origin: tuple) -> bool:
        """The origin's answers come on a connection already bound to it, still open."""
        ref = self.bound_to.get(origin)
        connection = ref() if ref is not None else None
        return connection is not None and connection.is_open

    def _unbind(self, origin: tuple):
        """Forgets the origin's connection once it is gone (over months origins come and go)."""
        def gone(ref) -> None:
            if self.bound_to.get(origin) is ref:
                del self.bound_to[origin]
        return gone

    def _info_index(self, key: tuple, now: float) -> int:
        index = self.info_indexes.get(key)
        if index is not None:
            asked = self.infos[index]
            asked.heard_at = now
            self.infos.move_to_end(index)
            return index
        index = self.info_indexes[key] = self.next_index
        self.next_index = (self.next_index % 0xFFFFFFFF) + 1
        self.infos[index] = _InfoAsked(key, now)
        while len(self.infos) > MAX_RELAYED:
            self._forget_info()
        return index

    def _asked(self, origin: tuple, tidx: int, sqn: int, now: float) -> _Asked:
        """The retransmission of `sqn` asked of `origin`, heard of now (made if new)."""
        key = (origin, tidx, sqn)
        asked = self.retransmissions.get(key)
        if asked is not None:
            asked.heard_at = now
            self.retransmissions.move_to_end(key)
            return asked
        asked = self.retransmissions[key] = _Asked(now)
        self.origins_waiting.setdefault((tidx, sqn), []).append(origin)
        while len(self.retransmissions) > MAX_RELAYED:
            self._forget_retransmission()
        return asked

    def _answered(self, origin: tuple | None, tidx: int, sqn: int) -> _Asked | None:
        """The retransmission a RETRANS answers, no longer waited for; None if none waits."""
        asked = self.retransmissions.pop((origin, tidx, sqn), None)
        if asked is not None:
            self._no_longer_waiting(origin, tidx, sqn)
        return asked

    def _no_longer_waiting(self, origin: tuple, tidx: int, sqn: int) -> None:
        origins = self.origins_waiting[(tidx, sqn)]
        origins.remove(origin)
        if not origins:
            del self.origins_waiting[(tidx, sqn)]

    def _forget_retransmission(self) -> None:
        """The one a requester asked for longest ago: no answer came, none is waited for now."""
        (origin, tidx, sqn), _ = self.retransmissions.popitem(last=False)
        self._no_longer_waiting(origin, tidx, sqn)
        self.counters.add("late_join_requests_unanswered")

    def _forget_info(self) -> None:
        _, asked = self.infos.popitem(last=False)
        del self.info_indexes[asked.key]
        if not asked.answered:
            self.counters.add("late_join_requests_unanswered")

    def _forget_given_up(self, now: float) -> None:
        """Forget what nobody asked for longer than a requester waits (its give-up time passed)."""
        given_up = now - self.forget_after
        while self.retransmissions and next(iter(self.retransmissions.values())).heard_at <= given_up:
            self._forget_retransmission()
        while self.infos and next(iter(self.infos.values())).heard_at <= given_up:
            self._forget_info()

    def answer_in(self, frame: bytes, connection) -> bool:
        """A frame at our request port on `connection` (the context's hook): an origin's answer to
        a request we relayed goes back to its egress portal; False if it is none of ours."""
        if frame[0] == LBMC_TYPE_RETRANS and len(frame) >= MESSAGE_HEADER.size:
            _, _, length, tidx, sqn = MESSAGE_HEADER.unpack_from(frame)
            origin = self.bound.get(connection)
            if origin is None:          # no LJ_INFO on it yet: only if one origin waits for it
                origins = self.origins_waiting.get((tidx, sqn), ())
                origin = origins[0] if len(origins) == 1 else None
            asked = self._answered(origin, tidx, sqn)
            if asked is None:
                self.counters.add("late_join_answers_unknown")    # already answered, or forgotten
                return False
            self.counters.add("late_join_answers_rcvd")
            for egress, ip, port, proxy_tidx, _ in asked.requesters:
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
            asked = self.infos[info.qidx]
            asked.answered = True
            egress, ip, port, request_idx, origin = asked.key
            self.bound[connection] = origin
            self.bound_to[origin] = weakref.ref(connection, self._unbind(origin))
            if egress is None:          # asked only to bind the connection
                continue
            answer = UmeLjInfo(info.low_seqnum, info.high_seqnum, request_idx, info.flags)
            self.datapath.late_join_answer(egress, ip, port, encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, [answer])))
        return True
