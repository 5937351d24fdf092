"""Late join: a receiver that joins a source late gets, first, what the source still retains.

A source with `late_join` keeps what it sends (router.um.retention) and advertises it: its TIR
carries a LATEJOIN option naming its context's request port, its transport index, and the lowest
and highest sequence numbers it retains. The exchange, over UIM connections between the two
contexts' request ports (router.um.wire.lbmc_late_join):

    receiver -> source   LJI_REQ      for topic index T of transport X; answer to my request port
    source -> receiver   UME_LJ_INFO  I retain low..high
    receiver -> source   UME_RXREQ    send me sequence number n (one header each, a window at a time)
    source -> receiver   RETRANS      the frame as it was sent

The receiver (`use_late_join`, on by default) holds back the live messages that arrive meanwhile,
asks for what the source retains before the first of them (at most `retransmit_request_maximum`
of the newest when that is set, `retransmit_request_outstanding_maximum` at a time), delivers
those in order, flagged as retransmissions (RetransmittedMessage; a retained request comes back
as a request, in its place), then the live ones after them, without duplicates. An LJI_REQ
unanswered is sent again every `late_join_info_request_interval`, up to
`late_join_info_request_maximum` times; a retransmission that does not come is asked again every
`retransmit_request_interval` and given up after `retransmit_request_message_timeout` (counted).
Then live delivery simply goes on: late join never holds a receiver back for good, nor more than
MAX_HELD_BYTES of live messages (beyond that it stops fetching, delivers what it has, and says so).
"""
from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from dataclasses import dataclass

from router.um.messages import RetransmittedMessage
from router.um.retained_frames import Reassembly
from router.um.sequence_numbers import MASK, distance
from router.um.wire.lbmc import LBMC_TYPE_CONTROL, LBMC_TYPE_RETRANS, MESSAGE_HEADER, LbmcMessage, encode_lbmc
from router.um.wire.lbmc_late_join import (LJI_RX_REQ_MAX, LJI_RX_REQ_OUTSTANDING_MAX, LjiRequest, UmeLjInfo,
                                           UmeRxReq)
from router.um.wire.lbmr import LateJoinOption

log = logging.getLogger(__name__)

_RXREQS_PER_MESSAGE = 64            # UME_RXREQ headers in one CONTROL message (28 bytes each)
MAX_HELD_BYTES = 64 * 1024 * 1024   # live messages a receiver holds back while it fetches
_request_indexes = itertools.count(1)


def next_request_index() -> int:
    """A request index no other late-join or OTR exchange of this process uses (the source's
    UME_LJ_INFO answer names it)."""
    return next(_request_indexes)


@dataclass(frozen=True)
class LateJoinSettings:
    """A receiver's late-join options (UM's names; intervals in seconds)."""
    enabled: bool = True
    request_maximum: int = 0                 # 0: everything retained
    request_interval: float = 0.5
    message_timeout: float = 10.0
    outstanding_maximum: int = 200
    info_interval: float = 1.0
    info_maximum: int = 60

    @classmethod
    def from_config(cls, config) -> "LateJoinSettings":
        get = config.get
        return cls(bool(get("receiver", "use_late_join")), get("receiver", "retransmit_request_maximum"),
                   get("receiver", "retransmit_request_interval") / 1000,
                   get("receiver", "retransmit_request_message_timeout") / 1000,
                   max(1, get("receiver", "retransmit_request_outstanding_maximum")),
                   get("receiver", "late_join_info_request_interval") / 1000,
                   get("receiver", "late_join_info_request_maximum"))


def late_join_option(tir_options) -> LateJoinOption | None:
    for option in tir_options:
        if isinstance(option, LateJoinOption):
            return option
    return None


class LateJoinServer:
    """The source side, for a context's late-join sources: answers LJI_REQs and UME_RXREQs."""

    def __init__(self, context):
        self.context = context
        self.retained: dict[tuple[int, int], object] = {}     # (transport index, topic index) -> Retention
        # A router's proxy sources that keep nothing but relay requests to the originating source
        # (router.portals.late_join_relay): (transport index, topic index) -> relay(headers).
        self.relayed: dict[tuple[int, int], object] = {}
        self.counters = {"lj_info_requests_rcved": 0, "lj_rx_requests_rcved": 0, "lj_retransmissions_sent": 0,
                         "lj_retransmissions_unavailable": 0, "lj_requests_unknown_source": 0}

    def add(self, transport_idx: int, topic_idx: int, retention) -> None:
        self.retained[(transport_idx, topic_idx)] = retention

    def remove(self, transport_idx: int, topic_idx: int) -> None:
        self.retained.pop((transport_idx, topic_idx), None)

    def relay(self, transport_idx: int, topic_idx: int, relay) -> None:
        """Requests for this (proxy) source go to `relay(message)` instead of a retention."""
        self.relayed[(transport_idx, topic_idx)] = relay

    def control(self, message: LbmcMessage) -> bool:
        """Handle the late-join requests in `message`; False if it held none. A source that both
        retains and relays (a router's proxy source with `forward`) relays LJI_REQs (what the
        origin retains is what can be had), answers UME_RXREQs from its retention and relays
        those it no longer has."""
        handled = False
        retransmissions: dict[tuple[str, int], bytearray] = {}
        relayed: dict[object, list] = {}
        for header in message.headers:
            if not isinstance(header, (LjiRequest, UmeRxReq)):
                continue
            handled = True
            key = (header.transport_idx, header.topic_idx if isinstance(header, LjiRequest) else header.id_2)
            relay = self.relayed.get(key)
            if relay is not None and (isinstance(header, LjiRequest) or key not in self.retained):
                relayed.setdefault(relay, []).append(header)
            elif isinstance(header, LjiRequest):
                self._info(header)
            elif not self._retransmit(header, retransmissions) and relay is not None:
                relayed.setdefault(relay, []).append(header)
        for relay, headers in relayed.items():
            relay(headers)
        for address, frames in retransmissions.items():
            self.context.responder.send_frames(address, bytes(frames))
        return handled

    def _info(self, request: LjiRequest) -> None:
        self.counters["lj_info_requests_rcved"] += 1
        retention = self.retained.get((request.transport_idx, request.topic_idx))
        if retention is None:
            self.counters["lj_requests_unknown_source"] += 1
            return
        bounds = retention.bounds()
        low, high = bounds if bounds is not None else (1, 0)       # low > high: nothing retained
        answer = encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, [UmeLjInfo(low, high, request.request_idx)]))
        self.context.responder.send_frames((request.req_ip, request.req_port), answer)

    def _retransmit(self, request: UmeRxReq, out: dict) -> bool:
        """Add the frame asked for to what goes to its requester; False if it is not retained."""
        self.counters["lj_rx_requests_rcved"] += 1
        retention = self.retained.get((request.transport_idx, request.id_2))
        frame = retention.get(request.seqnum) if retention is not None else None
        if frame is None:
            self.counters["lj_retransmissions_unavailable"] += 1
            return False
        copy = bytearray(frame)
        copy[0] = LBMC_TYPE_RETRANS
        out.setdefault((request.rx_ip, request.rx_port), bytearray()).extend(copy)
        self.counters["lj_retransmissions_sent"] += 1
        return True


class LateJoinClient:
    """The receiver side, for one joined source: holds live messages back until what the source
    retains from before them is delivered (or given up)."""

    def __init__(self, context, joined, option: LateJoinOption, settings: LateJoinSettings, reply_to: tuple[str, int]):
        self.context, self.joined, self.option, self.settings = context, joined, option, settings
        self.reply_to = reply_to
        self.request_idx = next_request_index()
        self.topic_idx = joined.candidate.index
        # Live deliveries held back, in the transport's order: ("batch", messages), ("request", ...)
        # and ("gap", (first, count)): what the transport lost among them.
        self.held: list[tuple] = []
        self.held_bytes = 0
        self.first_live: int | None = None
        self.info_attempts = 0
        self.requested: dict[int, float] = {}     # sqn -> when first asked (outstanding)
        self.asked_at: dict[int, float] = {}      # sqn -> when last asked
        self.to_ask: deque[int] = deque()
        self.frames: dict[int, bytes] = {}        # sqn -> the RETRANS frame
        self.base = 0                             # the first sequence number asked for (order is from it)
        self.last_asked: int | None = None        # the last one (all from base to it are asked)
        self.lost: list[int] = []                 # asked for and given up: told as lost, in their place
        self.done = False
        self.counters = context.late_join_counters
        self.timer = None
        self.refill_due = False                   # a refill of the window waits for this turn's end
        self._send_info()

    # -- live data, held back --------------------------------------------------------------------
    def hold(self, kind: str, item) -> None:
        if kind == "batch":
            first = item[0][0] if item else None
        else:
            first = item[0]
        if first is not None and self.first_live is None:
            self.first_live = first
        self.held.append((kind, item))
        self.held_bytes += sum(len(m[1]) for m in item) if kind == "batch" else len(item[1])
        if self.held_bytes > MAX_HELD_BYTES:
            log.warning("late join to %s: %d bytes of live messages held back while fetching what came "
                        "before; fetching stops and delivery goes on", self.joined.source, self.held_bytes)
            self.counters["lj_held_overflows"] += 1
            self.give_up()

    def gap(self, first: int, count: int) -> None:
        """The transport lost messages meanwhile. A young LBT-RM session's receiver repairs its
        first datagrams by NAK while late join fetches the same messages: one it gives up may be
        one late join brings, and is no loss. The rest is recovered (OTR orders it after what is
        held here) or told lost in its place among the held messages."""
        if self.last_asked is not None:
            first, count = self._not_asked(first, count)
            if count <= 0:
                return
        elif self.first_live is None or distance(self.first_live, first) < 0:
            self.held.append(("gap", (first, count)))     # late join may yet ask for them
            return
        if self.joined.otr is not None:
            self.joined.otr.gap(first, count)
        else:
            self.held.append(("gap", (first, count)))

    def _not_asked(self, first: int, count: int) -> tuple[int, int]:
        """The part of a gap past what late join asked for (what it asked it delivers, or tells lost)."""
        if self.last_asked is not None:
            asked = min(count, distance(first, self.last_asked) + 1)
            if asked > 0:
                first, count = (first + asked) & MASK, count - asked
        return first, count

    # -- the exchange ----------------------------------------------------------------------------
    def _send_info(self) -> None:
        if self.done:
            return
        if self.info_attempts >= self.settings.info_maximum:
            log.info("late join to %s: no answer to %d information requests; live delivery goes on",
                     self.joined.source, self.info_attempts)
            self.counters["lj_info_unanswered"] += 1
            self._finish()
            return
        self.info_attempts += 1
        try:
            self._send(LbmcMessage(LBMC_TYPE_CONTROL, [self._info_request()]))
        finally:
            # Armed whatever failed (the loop counts and logs it): the live messages held back
            # here must not wait for good for an answer nobody asks for again.
            self.timer = self.context.loop.call_later(self.settings.info_interval, self._send_info)

    def _info_request(self) -> LjiRequest:
        settings = self.settings
        flags = LJI_RX_REQ_OUTSTANDING_MAX | (LJI_RX_REQ_MAX if settings.request_maximum else 0)
        return LjiRequest(self.request_idx, self.option.transport_idx, self.topic_idx, self.reply_to[0],
                          self.reply_to[1], 0, settings.request_maximum, settings.outstanding_maximum, flags)

    def _send(self, message: LbmcMessage) -> None:
        self.context.responder.send_frames((self.option.src_ip, self.option.src_tcp_port), encode_lbmc(message))

    def info(self, info: UmeLjInfo) -> None:
        """The source's answer: what it retains."""
        if self.done or self.to_ask or self.requested:
            return                                # a repeated answer
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        # Sequence numbers wrap (router.um.sequence_numbers): all is measured from what is retained.
        start, end = info.low_seqnum, info.high_seqnum
        if distance(start, end) < 0:
            self._finish()                        # nothing retained (low past high: UM's 1, 0)
            return
        # What came before the first live message (none if that was the first ever sent).
        if self.first_live is not None and distance(self.first_live, end) >= 0:
            end = (self.first_live - 1) & MASK
        count = distance(start, end) + 1
        if self.settings.request_maximum and count > self.settings.request_maximum:
            start, count = (end - self.settings.request_maximum + 1) & MASK, self.settings.request_maximum
        if count <= 0:
            self._finish()
            return
        self.base = start
        self.last_asked = (start + count - 1) & MASK
        self.to_ask.extend((start + n) & MASK for n in range(count))
        self.counters["lj_retransmissions_requested"] += count
        self._ask()
        self.timer = self.context.loop.call_later(self.settings.request_interval, self._tick)

    def _ask(self) -> None:
        now = time.monotonic()
        headers = []
        while self.to_ask and len(self.requested) < self.settings.outstanding_maximum:
            sqn = self.to_ask.popleft()
            self.requested[sqn] = now
            headers.append(sqn)
        self._request(headers, now)

    def _request(self, sqns, now: float, again: bool = False) -> None:
        """Ask for `sqns`. Asked `again`, an LJI_REQ goes first: the RETRANS frames come on the
        connection the source's answer came on, which may have been replaced meanwhile (the
        context binds the one a new answer comes on; the repeated answer itself is ignored)."""
        option = self.option
        ip, port = self.reply_to
        headers = [self._info_request()] if again and sqns else []
        for sqn in sqns:
            self.asked_at[sqn] = now
            headers.append(UmeRxReq(self.request_idx, option.transport_idx, self.topic_idx, sqn, port, ip))
        for start in range(0, len(headers), _RXREQS_PER_MESSAGE):
            self._send(LbmcMessage(LBMC_TYPE_CONTROL, headers[start:start + _RXREQS_PER_MESSAGE]))

    def _tick(self) -> None:
        self.timer = None
        if self.done:
            return
        settings = self.settings
        try:
            now = time.monotonic()
            given_up = [sqn for sqn, first in self.requested.items() if now - first >= settings.message_timeout]
            for sqn in given_up:
                del self.requested[sqn]
            if given_up:
                # What the source no longer has will not come: nor will the rest asked of it.
                self._lose(given_up + list(self.to_ask))
                self.to_ask.clear()
            again = [sqn for sqn in self.requested if now - self.asked_at.get(sqn, 0) >= settings.request_interval]
            self._request(again, now, again=True)
            if not self.requested and not self.to_ask:
                self._finish()
        finally:
            # Armed whatever failed (the loop counts and logs it): the live messages held back
            # here must not wait for good for retransmissions nobody asks for again.
            if not self.done:
                self.timer = self.context.loop.call_later(settings.request_interval, self._tick)

    def retransmission(self, frame: bytes) -> bool:
        """A RETRANS frame for our topic index; False if it is not one this client waits for (two
        receivers of one context may be fetching the same source's messages)."""
        if self.done:
            return False
        _, _, _, _, sqn = MESSAGE_HEADER.unpack_from(frame)
        if self.requested.pop(sqn, None) is None:
            return False
        self.frames[sqn] = bytes(frame)
        if not self.requested and not self.to_ask:
            self._finish()
        elif self.to_ask and not self.refill_due:
            # The window is refilled once for all the answers this loop turn reads (one request
            # message for them, not one for each): every request is decoded and sent on by each
            # router on the way, and a message of one header costs them nearly what one of 64 does.
            self.refill_due = True
            self.context.loop.call_soon_threadsafe(self._refill)
        return True

    def _refill(self) -> None:
        self.refill_due = False
        if not self.done:
            self._ask()

    def give_up(self) -> None:
        """Stop fetching (the source ended first, or too much is held back): deliver what came,
        then what was held back."""
        if not self.done:
            self._lose(list(self.requested) + list(self.to_ask))
            self.requested.clear()
            self.to_ask.clear()
            self._finish()

    def _lose(self, sqns: list[int]) -> None:
        """Given up: counted, and told to the application as UNRECOVERABLE_LOSS where they were
        (UM reports a late-join retransmission that does not come as lost)."""
        self.counters["lj_retransmissions_given_up"] += len(sqns)
        self.lost += sqns

    # -- the end ---------------------------------------------------------------------------------
    def _finish(self) -> None:
        if self.done:
            return
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.context.late_join_clients.pop(self.request_idx, None)
        joined = self.joined
        joined.late_join = None
        messages = self._messages()
        self.counters["lj_messages_delivered"] += len(messages)
        if not joined.ended:
            self._deliver(messages)
        base = self.base
        highest = max(self.frames, key=lambda sqn: (sqn - base) & MASK) if self.frames else None
        if joined.otr is not None:
            joined.otr.pause()            # what it recovered meanwhile goes in place among them, after
        # Live messages at or below what was retransmitted are not delivered twice: those held
        # back here, and any the transport still delivers (an LBT-RM receiver recovering a young
        # session's first datagrams by NAK) until the first one past it.
        joined.late_join_floor = highest
        for kind, item in self.held:
            if joined.ended:
                break
            if kind == "batch":
                fresh = [m for m in item if highest is None or distance(highest, m[0]) > 0]
                if fresh:
                    joined.on_batch(fresh)
            elif kind == "gap":
                # What late join asked for it delivered or told lost already: only the rest is
                # told (or recovered), in its place.
                first, count = self._not_asked(*item)
                if count > 0:
                    joined.on_gap(first, count)
            elif highest is None or distance(highest, item[0]) > 0:
                joined.on_request(*item)
        self._forget()
        if joined.otr is not None and not joined.ended:
            joined.otr.resume()

    def _deliver(self, messages: list[tuple]) -> None:
        """The retransmitted messages and the runs of those given up, in sequence order."""
        joined, base = self.joined, self.base
        runs: list[list[int]] = []
        for offset in sorted((sqn - base) & MASK for sqn in self.lost):
            if runs and runs[-1][0] + runs[-1][1] == offset:
                runs[-1][1] += 1
            else:
                runs.append([offset, 1])
        self.lost.clear()
        position = 0
        for offset, count in runs + [[1 << 32, 0]]:
            before = []
            while position < len(messages) and (messages[position][0] - base) & MASK < offset:
                before.append(messages[position])
                position += 1
            self._deliver_retransmitted(before)
            if count:
                joined.report_loss((base + offset) & MASK, count)

    def _deliver_retransmitted(self, messages: list[tuple]) -> None:
        """Retransmitted messages in a batch, a request on its own in its place (as live)."""
        joined = self.joined
        batch: list[RetransmittedMessage] = []
        for message in messages:
            if len(message) == 3:
                if batch:
                    joined.deliver_ready(batch)
                    batch = []
                joined.deliver_request(*message)
            else:
                batch.append(RetransmittedMessage(joined.topic, joined.source, *message))
        if batch:
            joined.deliver_ready(batch)

    def _messages(self) -> list[tuple]:
        """The retransmitted frames as messages in order, (sqn, data) or, for a request, (sqn,
        data, origin); fragments put together. A frame that cannot be read is told lost in its
        place, a message not whole given up (both counted: lj_messages_incomplete)."""
        reassembly = Reassembly(self.counters, "lj_messages_incomplete", "lj_properties_malformed")
        messages: list[tuple] = []
        base = self.base

        def in_order(sqn: int) -> int:            # wrap-safe: the order from the first one asked
            return (sqn - base) & MASK
        for sqn in sorted(self.frames, key=in_order):
            piece = reassembly.read(self.frames[sqn])
            if piece is None:
                self.lost.append(sqn)
                continue
            message = reassembly.add(piece.first, piece)
            if message is not None:
                messages.append(message)
        reassembly.drop_partial()
        messages.sort(key=lambda message: in_order(message[0]))
        return messages

    def _forget(self) -> None:
        """Over: nothing kept per message. The source context's connection to our request port
        still names this client until another late join on it replaces it, and lives as long as
        the source does."""
        self.held.clear()
        self.held_bytes = 0
        self.frames.clear()
        self.requested.clear()
        self.asked_at.clear()
        self.to_ask.clear()
        self.lost.clear()

    def close(self) -> None:
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self._forget()
