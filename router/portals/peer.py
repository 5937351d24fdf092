"""The peer portal: the router's link to a companion peer portal on another router.

The link itself (connect/accept, handshake, keepalive with RTT, batching, bounded queue) is
router.portals.peer_link. This module is what travels on it, all LBMC over the one TCP
connection (spec/wire.md §3 b):

- **Interest** — for each (topic or pattern, destination domain) this portal pulls in on behalf
  of the router's other portals (router.portals.forwarding), one CONTROL message
  ``TOPIC_INTEREST(domain_id) -> TOPICNAME(topic)`` or ``PATTERN_INTEREST(type, domain_id) ->
  TOPICNAME(pattern)``; CANCEL when it goes. Sent in full when the link comes up, then changes.
  Interest heard from the companion becomes this portal's interest on the router's bus; what was
  heard before the link went down, and not heard again since, is withdrawn with the next route
  table or when the link comes back.
- **Advertisements** — each stream the router sends over the link is announced before its data
  by ``ADVERTISEMENT(hop_count, cost, topic_idx, domain_id) -> TOPICNAME -> OTID``: the cost so
  far plus this portal's cost, one more hop, the origin domain, and the originating source's
  OTID so the far router's proxy sources keep the source's identity. EOS flag when it ends.
- **Data** — the source's LBMC frames as they are (sequence numbers, fragments), with the topic
  index set to the stream's ``topic_idx`` on this link (kept as the origin's index when free, so
  usually nothing is rewritten).
- **Route-info** — flooded by the supervisor (router.routing.service), passed through.
- **Requests and responses** — a request goes as data with its index replaced by one of this
  portal's proxy requests (router.portals.proxy_requests); its responses come back as unicast
  data messages (router.portals.peer_responses) and go to the portal the request came in by.
- **Sequence info** — an origin's TSNI (its last sequence number, said when it is idle) crosses as
  ``TSNI(topic_idx on the link, sqn)`` behind the stream's data, so the far router's proxy
  sources tell their receivers of a tail lost on the way, the link's own drops included.
- **Late join and OTR** — a stream whose origin offers late join is advertised with the LJ flag;
  receivers' requests for it cross towards the origin and the answers come back
  (router.portals.peer_late_join).

A stream's frames go into the far router's rings as they arrive; a full ring stops reading the
link, so TCP pushes back instead of anything being dropped inside the router.
"""
from __future__ import annotations

import itertools
import logging

from router.eventlog import RateLimitedEvents
from router.ipc import bus_messages as bm
from router.portals.acl import PortalAccess
from router.portals.egress_records import EgressRecords
from router.portals.forwarding import ForwardingView
from router.portals.immediate import ImmediateFlood, carried, is_immediate
from router.portals.interest import pattern_problem
from router.portals.once_per_turn import OncePerTurn
from router.portals.peer_dual_link import DualPeerLink
from router.portals.peer_late_join import PeerLateJoinRelay, is_late_join_answer, is_late_join_request
from router.portals.peer_link import PeerLink
from router.portals.peer_responses import (ResponsePieces, is_response, is_unicast, response_frames,
                                           response_piece)
from router.portals.proxy_requests import ProxyRequestTable, forward_response
from router.portals.sequence_window import SequenceWindow
from router.portals.streams import StreamTable
from router.portals.unicast_routing import UnicastRouting
from router.routing.route_info import is_route_info
from router.um.batching_session import with_topic_index
from router.um.expiry_timer import ExpiryTimer
from router.um.wire.lbmc import LBMC_TYPE_CONTROL, LbmcMessage, WireError, encode_lbmc
from router.um.wire.lbmc_constants import (ADV_EOS, AD_FLAG_LJ, INTEREST_CANCEL, NHDR_REQUEST,
                                           PATTERN_INTEREST_CANCEL)
from router.um.wire.lbmc_gateway import Advertisement, PatternInterest, TopicInterest
from router.um.wire.lbmc_headers import Otid, TopicName
from router.um.wire.lbmc_tsni import Tsni
from router.um.wire.lbmr_constants import PATTERN_PCRE, PATTERN_REGEX
from router.worker.records import StreamAdvert

log = logging.getLogger(__name__)

_PATTERN_TYPE_OF_KIND = {bm.INTEREST_PCRE: PATTERN_PCRE, bm.INTEREST_REGEX: PATTERN_REGEX}
_KIND_OF_PATTERN_TYPE = {v: k for k, v in _PATTERN_TYPE_OF_KIND.items()}
_NO_INDEX = bytes(8)


class _Outbound:
    __slots__ = ("advert", "link_index", "rewrite", "window")

    def __init__(self, advert: StreamAdvert, link_index: int, window: SequenceWindow):
        self.advert, self.link_index = advert, link_index
        self.rewrite = None if link_index == advert.origin_index else link_index
        self.window = window          # the origin's numbers sent over the link, by any of its streams


class _LinkReader:
    """What the ring's flow control pauses when it is full: reading the link."""

    def __init__(self, link: PeerLink):
        self.link = link

    def pause(self) -> None:
        self.link.pause_reading()

    def resume(self) -> None:
        self.link.resume_reading()


class PeerPortal(EgressRecords):
    kind = "peer"
    DUPLICATE_COUNTERS = ("data_fragments_dropped_duplicate", "data_fragment_bytes_dropped_duplicate")

    def __init__(self, config, index: int, portal_indexes: dict[str, int], loop, node_id: int, router_name: str,
                 datapath, counters, log_event):
        self.config = config
        self.name = config.name
        self.index = index
        self.cost = config.cost
        self.loop = loop
        self.bus = None
        self.datapath = datapath
        self.counters = counters
        self.log_event = log_event
        self._rate_limited = RateLimitedEvents(log_event)
        self.access = PortalAccess(config.acl, counters, log_event)
        self.rejected_inbound: set[int] = set()                    # link topic indexes an ACL kept out
        self.view = ForwardingView(self.name, portal_indexes)
        self._follow_interest = OncePerTurn(loop, self._interest_changed)
        self.streams = StreamTable(self.name, self.view, datapath, counters, log_event)
        self.immediates = ImmediateFlood(index, portal_indexes, datapath, counters, log_event)
        link_class = DualPeerLink if config.link.dual else PeerLink
        self.link = link_class(config, loop, router_name, node_id, self._link_up, self._link_down, self._control,
                               counters, log_event, on_data=self._data, on_read_done=self._read_done)
        datapath.backlog = self.link.backlog
        self.reader = _LinkReader(self.link)
        self.outbound: dict[tuple[int, int], _Outbound] = {}      # (ring, stream id) -> stream on the link
        # Per originating source (OTID), what its streams sent over the link (<sqn-window>): while
        # a path change has the old stream draining, two streams share it.
        self.windows: dict[bytes, SequenceWindow] = {}
        self.link_indexes: dict[int, tuple[int, int]] = {}         # link topic index -> (ring, stream id)
        self._spare_indexes = itertools.count(0x40000000)
        self.inbound: dict[int, object] = {}                       # link topic index -> Stream
        self._arrived: dict[int, list] = {}     # link index -> [frames, count, longest, holds a request]
        self.requests = ProxyRequestTable()
        self._response_sqn = 0
        self.link_response_pieces = ResponsePieces(self._response_given_up)
        self._response_pieces_expiry = ExpiryTimer(loop, self.link_response_pieces)
        self.sent_interest: set[tuple[int, str, int]] = set()
        self.heard_interest: set[tuple[int, str, int]] = set()
        # Heard before the link last went down and not heard again since: the companion's previous
        # connection's, replaced by what it sends now. Interest heard while the link is not up yet
        # is the companion's new connection's: on a dual link (router.portals.peer_dual_link) the
        # companion's half may be up and sending before ours is, and it never sends that again.
        self._stale_interest: set[tuple[int, str, int]] = set()
        self.peer_name, self.peer_node_id = "", 0
        self._withdraw_pending = False
        self.late_join = PeerLateJoinRelay(self.name, self.link, datapath, counters)
        self.unicast = UnicastRouting(self.name, self.view, datapath, counters, self._rate_limited)
        self.counters.set("data_bytes_enqueued_limit", config.max_queue)
        self.link.start()

    # -- the link's life ---------------------------------------------------------------------------
    def _link_up(self, peer_name: str, peer_node_id: int) -> None:
        # Interest kept from the last connection is replaced by what the companion sends now.
        self._withdraw_stale_interest()
        self.peer_name, self.peer_node_id = peer_name, peer_node_id
        self.bus.send(bm.PeerState(self.name, 1, peer_name, peer_node_id))
        self.sent_interest.clear()
        self._send_interest()
        for outbound in self.outbound.values():
            self._send_advert(outbound)

    def _link_down(self, reason: str) -> None:
        self.bus.send(bm.PeerState(self.name, 0, self.peer_name, self.peer_node_id))
        # Until the routes are recalculated the router keeps sending this way, as the DRO does:
        # data for the down link is dropped and counted "not operational". The companion's
        # interest goes with the next route table (or when the link comes back).
        self._withdraw_pending = True
        self._stale_interest = set(self.heard_interest)
        for stream in list(self.inbound.values()):
            self.streams.end(stream)
        self.inbound.clear()
        self._arrived.clear()
        self.sent_interest.clear()
        self.link_response_pieces.give_up_all()   # the rest of their pieces went with the connection

    # -- interest ------------------------------------------------------------------------------------
    def _send_interest(self) -> None:
        """Bring the companion's view of what we want in line with what we pull in."""
        if not self.link.is_up:
            return
        wanted = self.view.emitted()
        for item in sorted(wanted - self.sent_interest):
            self.link.send_control(_interest_message(item, cancel=False))
            self.counters.add("interest_msgs_sent")
        for item in sorted(self.sent_interest - wanted):
            self.link.send_control(_interest_message(item, cancel=True))
            self.counters.add("interest_msgs_sent")
        self.sent_interest = wanted

    def _withdraw_stale_interest(self) -> None:
        self._withdraw_pending = False
        for kind, symbol, domain in sorted(self._stale_interest):
            self.bus.send(bm.Interest(self.name, domain, kind, symbol, bm.OP_CANCEL))
        self.heard_interest -= self._stale_interest
        self._stale_interest.clear()

    def _heard_interest(self, message: LbmcMessage) -> None:
        head = message.headers[0]
        names = [h.topic for h in message.headers if isinstance(h, TopicName)]
        if len(names) != 1:
            self._malformed("interest message without exactly one TOPICNAME")
            return
        if isinstance(head, TopicInterest):
            kind, cancel = bm.INTEREST_TOPIC, bool(head.flags & INTEREST_CANCEL)
        else:
            kind = _KIND_OF_PATTERN_TYPE.get(head.pattern_type)
            cancel = bool(head.flags & PATTERN_INTEREST_CANCEL)
            if kind is None:
                self._malformed(f"pattern interest of unknown type {head.pattern_type}")
                return
        self.counters.add("interest_msgs_rcvd")
        if not self.access.interest_allowed(kind == bm.INTEREST_TOPIC, names[0]):
            return
        if kind != bm.INTEREST_TOPIC and (problem := pattern_problem(names[0])) is not None:
            self.counters.add("patterns_invalid")
            self._rate_limited("pattern-invalid", f"peer link {self.name}: pattern {names[0]!r} is not a valid "
                                                  f"regular expression ({problem}); ignored")
            return
        item = (kind, names[0], head.domain_id)
        if cancel and item in self.heard_interest:
            self.heard_interest.discard(item)
            self._stale_interest.discard(item)
            self.bus.send(bm.Interest(self.name, head.domain_id, kind, names[0], bm.OP_CANCEL))
        elif not cancel and item not in self.heard_interest:
            self.heard_interest.add(item)
            self.bus.send(bm.Interest(self.name, head.domain_id, kind, names[0], bm.OP_ADD))
        elif not cancel:
            self._stale_interest.discard(item)        # the companion still wants it

    # -- messages from the companion -----------------------------------------------------------------
    def _control(self, message: LbmcMessage) -> None:
        if is_late_join_answer(message):       # a RETRANS may have no header but DATA
            self.late_join.answer_in(message)
            return
        if not message.headers:
            self._malformed("control message without headers")
            return
        head = message.headers[0]
        if is_immediate(message):
            self._immediate_in(message)
        elif is_late_join_request(message):
            self.late_join.request_in(message, self.link_indexes.get)
        elif is_response(message):
            self._response_in(message)
        elif is_unicast(message):
            self._unicast_in(message)
        elif isinstance(head, (TopicInterest, PatternInterest)):
            self._heard_interest(message)
        elif isinstance(head, Advertisement):
            self._heard_advert(message)
        elif isinstance(head, Tsni):
            self._sequence_info_in(head)
        elif is_route_info(message):
            self.counters.add("route_info_msgs_rcvd")
            self.bus.send(bm.RouteInfoMessage(self.name, encode_lbmc(message)))
        else:
            log.debug("peer %s: ignored a control message starting with %s", self.name, type(head).__name__)

    def _heard_advert(self, message: LbmcMessage) -> None:
        advert: Advertisement = message.headers[0]
        topics = [h.topic for h in message.headers if isinstance(h, TopicName)]
        otids = [h.otid for h in message.headers if isinstance(h, Otid)]
        self.counters.add("advertisements_rcvd")
        previous = self.inbound.pop(advert.topic_idx, None)
        if previous is not None:
            self._deliver(advert.topic_idx)
            self.streams.end(previous)
        if advert.topic_idx in self.rejected_inbound:
            self.rejected_inbound.discard(advert.topic_idx)
            self._arrived.pop(advert.topic_idx, None)      # its data so far was kept out too
        if advert.flags & ADV_EOS:
            return
        if len(topics) != 1 or len(otids) != 1:
            self._malformed("advertisement without exactly one TOPICNAME and one OTID")
            return
        if not self.access.source_allowed(topics[0], None, f"#{advert.topic_idx} from {self.peer_name or 'peer'}"):
            self.rejected_inbound.add(advert.topic_idx)
            return
        stream = self.streams.begin(topics[0], otids[0], advert.cost, advert.hop_count, advert.domain_id,
                                    f"{self.peer_name or 'peer'} via {self.name} #{advert.topic_idx}",
                                    advert.topic_idx, self.reader,
                                    # its requests go back over the link (router.portals.peer_late_join)
                                    late_join=True if advert.ad_flags & AD_FLAG_LJ else None)
        if stream is not None:
            self.inbound[advert.topic_idx] = stream

    def _data(self, link_index: int, frames: bytes, count: int, longest: int) -> None:
        """A run of data messages for one stream (kept until the read is done: one ring record)."""
        # The link hands each request over on its own (never in a run of equal messages).
        request = count == 1 and frames[1] == NHDR_REQUEST
        pending = self._arrived.get(link_index)
        if pending is None:
            self._arrived[link_index] = [[frames], count, longest, request]
        else:
            pending[0].append(frames)
            pending[1] += count
            pending[2] = max(pending[2], longest)
            pending[3] |= request

    def _read_done(self) -> None:
        for link_index in list(self._arrived):
            self._deliver(link_index)

    def _deliver(self, link_index: int) -> None:
        pending = self._arrived.pop(link_index, None)
        if pending is None:
            return
        stream = self.inbound.get(link_index)
        if stream is None and link_index in self.rejected_inbound:
            return                  # an ACL kept this stream out (counted when it was advertised)
        # One run (the usual read) goes on as the link's view; several are joined, a copy.
        frames = pending[0][0] if len(pending[0]) == 1 else b"".join(pending[0])
        if stream is None:
            self.counters.add_pair("transport_topic_fragments_rcvd_unknown",
                                   "transport_topic_fragment_bytes_rcvd_unknown", pending[1], len(frames))
            return
        if pending[3]:
            self.streams.forward_requests(stream, frames, pending[1], pending[2])
        else:
            self.streams.forward(stream, frames, pending[1], pending[2])

    def _sequence_info_in(self, tsni: Tsni) -> None:
        """The origins' last sequence numbers of streams we bring in (their TSNIs, passed on by
        the far router): behind the frames that came before them, to the same portals."""
        for link_index, sqn in tsni.records:
            stream = self.inbound.get(link_index)
            if stream is not None:
                self._deliver(link_index)
                self.streams.sequence_info(stream, sqn)

    def _immediate_in(self, message: LbmcMessage) -> None:
        """A MIM the far router flooded to us: on to this router's other portals, once."""
        try:
            frame = encode_lbmc(message)
            _, origin_domain, origin, has_topic = carried(frame)
        except WireError as err:
            self._malformed(f"immediate message: {err}")
            return
        self.immediates.heard(origin_domain, origin, message.sqn, has_topic, frame)

    def _unicast_in(self, message: LbmcMessage) -> None:
        """A unicast immediate message the far router sent on toward its domain."""
        try:
            frame = encode_lbmc(message)
        except WireError as err:
            self._malformed(f"unicast immediate message: {err}")
            return
        self.unicast.route(frame, message.headers[0])

    def egress_unicast(self, ring: int, frame: bytes) -> None:
        """Over the link to the next router, as it is (the link counts what it could not take)."""
        if self.link.send_data(frame, 1):
            self.counters.add_pair("unicast_data_msgs_sent", "unicast_data_msg_bytes_sent", 1, len(frame))

    def egress_immediate(self, ring: int, origin_domain: int, has_topic: bool, frame: bytes) -> None:
        """Over the link to the next router (counted as not sent if the link is down or full)."""
        self.immediates.send(lambda data: self.link.send_data(data, 1), has_topic, frame)

    def _malformed(self, what: str) -> None:
        self.counters.add("link_malformed")
        self.log_event("malformed-input", f"peer link {self.name}: {what}; ignored")

    # -- records from the other portals' rings (what we send over the link) --------------------------
    def egress_frames(self, ring: int, stream_id: int, count: int, longest: int, frames, now: bool = False) -> bool:
        outbound = self.outbound.get((ring, stream_id))
        if outbound is None:
            return self.access.stream_rejected(ring, stream_id)     # not ours to send: not an error
        frames, count = self.without_duplicates(outbound.window, outbound.advert, frames, count, longest)
        if not count:
            return True
        data = frames if outbound.rewrite is None else with_topic_index(frames, outbound.rewrite, count)
        self.link.send_data(data, count, longest)       # the link counts what it could not take
        return True

    def egress_request_frames(self, ring: int, stream_id: int, count: int, longest: int, frames,
                              now: bool = False) -> bool:
        """Requests for the far side: each gets an index of this portal's proxy requests, so the
        far router's responses, which come back over the link by index, find their requester."""
        if (ring, stream_id) not in self.outbound:
            return self.egress_frames(ring, stream_id, count, longest, frames, now)
        frames, requests, size = self.requests.rewrite(frames, ring)
        self.counters.add_pair("transport_topic_req_fragments_sent", "transport_topic_req_fragment_bytes_sent",
                               requests, size)
        self.counters.set("proxy_requests", len(self.requests))
        return self.egress_frames(ring, stream_id, count, longest, frames, now)

    def _response_in(self, message: LbmcMessage) -> None:
        """A response from the far router to one of our proxy requests: to the portal its request
        came in by (whole: one in pieces once its last piece came)."""
        data = message.payload
        if response_piece(message) is not None:
            try:
                data = self.link_response_pieces.add_piece(message)
            except WireError as err:
                self._malformed(f"response piece: {err}")
                return
            if data is None:
                self._response_pieces_expiry.arm()
                return
        if not forward_response(self.requests, message.tidx, data, self.datapath, self.counters):
            self._rate_limited("response-no-proxy-request", f"peer link {self.name}: response to request index "
                                                            f"{message.tidx}, which has no proxy request here; dropped")

    def _response_given_up(self, received: int) -> None:
        """A response whose pieces stopped coming: received, and dropped."""
        self.counters.add_pair("unicast_data_msgs_rcvd", "unicast_data_msg_bytes_rcvd", 1, received)
        self.counters.add_pair("unicast_data_msgs_dropped_error", "unicast_data_msg_bytes_dropped_error", 1, received)
        self._rate_limited("response-incomplete", f"peer link {self.name}: a response in pieces stopped coming "
                                                  f"({received} bytes of it came); dropped")

    def egress_response(self, ring: int, ipaddr: str, port: int, qidx: int, data: bytes) -> None:
        """A response to a request that came over the link: back over the link, by the index the
        link carried (the far portal's proxy request), in pieces if it is larger than a message."""
        try:
            frames = response_frames(qidx, (self._response_sqn + 1) & 0xFFFFFFFF, ipaddr, port, data)
        except ValueError as err:
            self.counters.add_pair("unicast_data_msgs_dropped_error", "unicast_data_msg_bytes_dropped_error",
                                   1, len(data))
            self._rate_limited("drops-size-error", f"peer link {self.name}: {err}; dropped")
            return
        self._response_sqn = (self._response_sqn + len(frames)) & 0xFFFFFFFF
        if self.link.send_pieces(frames):       # the link counts the pieces it could not take
            self.counters.add_pair("unicast_data_msgs_sent", "unicast_data_msg_bytes_sent", 1, len(data))
        else:
            self.counters.add_pair("unicast_data_msgs_dropped_error", "unicast_data_msg_bytes_dropped_error",
                                   1, len(data))

    def late_join_request(self, ring: int, stream_id: int, message: bytes) -> None:
        """Requests a receiver behind portal `ring` sent for a stream we bring in: over the link."""
        self.late_join.request_out(ring, self.streams.streams.get(stream_id), message)

    def late_join_answer(self, ring: int, ipaddr: str, port: int, frames: bytes) -> None:
        """An answer to a request that came over the link: back over it."""
        self.late_join.answer_out(ipaddr, port, frames)

    def egress_advert(self, ring: int, advert: StreamAdvert) -> None:
        if self.access.stream_out_allowed(ring, advert.stream_id, advert.topic):
            self._stream_out(ring, advert)

    def egress_sequence_info(self, ring: int, stream_id: int, sqn: int) -> None:
        """The origin's last sequence number: over the link as a TSNI of the stream's link index,
        in order behind its data (what the link itself dropped is told beyond it too)."""
        outbound = self.outbound.get((ring, stream_id))
        if outbound is not None:
            self.link.send_control(LbmcMessage(LBMC_TYPE_CONTROL, [Tsni([(outbound.link_index, sqn)])]))

    def egress_eos(self, ring: int, stream_id: int) -> None:
        self.access.stream_ended(ring, stream_id)
        self._stream_end(ring, stream_id)

    def _stream_out(self, ring: int, advert: StreamAdvert) -> None:
        outbound = self.outbound.get((ring, advert.stream_id))
        if outbound is None:
            index = advert.origin_index
            while index in self.link_indexes:
                index = next(self._spare_indexes) & 0xFFFFFFFF
            self.link_indexes[index] = (ring, advert.stream_id)
            window = self.windows.get(advert.otid)
            if window is None:
                window = self.windows[advert.otid] = SequenceWindow.configured(self.config.sqn_window)
            outbound = self.outbound[(ring, advert.stream_id)] = _Outbound(advert, index, window)
            self.counters.add("streams_out")
        self._send_advert(outbound)

    def _stream_end(self, ring: int, stream_id: int) -> None:
        outbound = self.outbound.pop((ring, stream_id), None)
        if outbound is None:
            return
        self.link_indexes.pop(outbound.link_index, None)
        otid = outbound.advert.otid
        if all(other.advert.otid != otid for other in self.outbound.values()):
            self.windows.pop(otid, None)          # its last stream ended
        self._send_advert(outbound, eos=True)

    def _send_advert(self, outbound: _Outbound, eos: bool = False) -> None:
        advert = outbound.advert
        header = Advertisement(flags=ADV_EOS if eos else 0, hop_count=min(advert.hop_count + 1, 255),
                               ad_flags=AD_FLAG_LJ if advert.late_join else 0,
                               cost=min(advert.cost + self.cost, 0x7FFFFFFF), transport_idx=0,
                               topic_idx=outbound.link_index, low_seqno=0, high_seqno=0,
                               domain_id=advert.origin_domain_id, pat_idx=_NO_INDEX, ctxinst=_NO_INDEX)
        if self.link.send_control(LbmcMessage(LBMC_TYPE_CONTROL, [header, TopicName(advert.topic), Otid(advert.otid)])):
            self.counters.add("advertisements_sent")

    def flush(self) -> None:
        """The rings are drained: what was batched for the link goes now (smart batching)."""
        self.link.flush()

    # -- the router-wide view ------------------------------------------------------------------------
    def on_bus(self, message) -> None:
        changed = self.view.apply(message, self.datapath)
        if changed == "routes" and self._withdraw_pending and not self.link.is_up:
            self._withdraw_stale_interest()
        if changed == "snapshot":
            self._interest_changed()
        elif changed in ("interest", "routes"):
            self._follow_interest.request()        # a burst of updates: one pass
        elif changed == "portal-up":
            self.streams.remask()
            self.streams.readvertise_to(1 << message.index)
        elif isinstance(message, bm.RouteInfoMessage) and message.portal == self.name:
            if self.link.send_control(message.data):
                self.counters.add("route_info_msgs_sent")
        elif isinstance(message, bm.PortalDown):
            self._end_streams_of_ring(message.index)
        elif isinstance(message, bm.PortalRemoved):
            self.view.forget_portal(message.portal)
            self._end_streams_of_ring(message.index)
            self.datapath.detach(message.index)
            self._interest_changed()
        elif isinstance(message, bm.SetCost) and message.portal == self.name:
            self.cost = message.cost
            for outbound in self.outbound.values():
                self._send_advert(outbound)

    def _end_streams_of_ring(self, ring: int) -> None:
        for key in [k for k in self.outbound if k[0] == ring]:
            self._stream_end(*key)

    def _interest_changed(self) -> None:
        self.streams.remask()
        self._send_interest()
        remote = self.view.remote_counts()
        self.counters.set("remote_interest_topics", remote[bm.INTEREST_TOPIC])
        self.counters.set("remote_interest_pcre_patterns", remote[bm.INTEREST_PCRE])
        self.counters.set("remote_interest_regex_patterns", remote[bm.INTEREST_REGEX])

    def query(self, what: str) -> dict:
        if what == "topics":
            return {
                "link": {"state": self.link.state.value, "peer": self.peer_name, "peer_node_id": self.peer_node_id,
                         "udp": self.link.udp_path.stats() if self.link.udp_path is not None else None},
                "interest_sent": sorted(f"{k}:{s} for domain {d}" for k, s, d in self.sent_interest),
                "interest_heard": sorted(f"{k}:{s} for domain {d}" for k, s, d in self.heard_interest),
                "streams_out": sorted(({"topic": o.advert.topic, "source": o.advert.source, "link_index": o.link_index,
                                        "cost": o.advert.cost + self.cost, "hop_count": o.advert.hop_count + 1}
                                       for o in self.outbound.values()), key=lambda d: (d["topic"], d["source"])),
                "streams_in": sorted(({"topic": s.advert.topic, "source": s.advert.source,
                                       "origin_domain_id": s.advert.origin_domain_id, "hop_count": s.advert.hop_count,
                                       "to": bin(s.mask).count("1")}
                                      for s in self.inbound.values()), key=lambda d: (d["topic"], d["source"])),
            }
        return {"error": f"unknown query {what!r}"}

    def close(self) -> None:
        self._follow_interest.cancel()
        self._response_pieces_expiry.close()
        for key in list(self.outbound):
            self._stream_end(*key)
        self.link.flush()
        self.streams.close()
        self.inbound.clear()
        self.loop.call_later(0.2, self.link.stop)      # let the EOS advertisements leave first


def _interest_message(item: tuple[int, str, int], cancel: bool) -> LbmcMessage:
    kind, symbol, domain = item
    if kind == bm.INTEREST_TOPIC:
        head = TopicInterest(flags=INTEREST_CANCEL if cancel else 0, domain_id=domain)
    else:
        head = PatternInterest(flags=PATTERN_INTEREST_CANCEL if cancel else 0,
                               pattern_type=_PATTERN_TYPE_OF_KIND[kind], domain_id=domain, idx=_NO_INDEX)
    return LbmcMessage(LBMC_TYPE_CONTROL, [head, TopicName(symbol)])
