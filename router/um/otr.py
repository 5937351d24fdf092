"""Off-transport recovery (OTR): a receiver gets what its transport lost from the source's retention.

A transport can lose messages for good: LBT-RM or LBT-RU give up what they could not repair in
time, and a router drops what a slow receiver's portal queue cannot hold. The receiving stream sees
the jump in a topic's sequence numbers, or a TSNI past the last one it got (router.um.frame_stream,
router.um.sequence_info), and tells the joined source. If the source offers late join (its
advertisement names its context's request port; router.um.late_join) and the receiver has
`use_otr`, this recovers the lost messages the way late join fetches the old ones: UME_RXREQs to
that request port, answered by RETRANS frames from the source's retention. An LJI_REQ goes with
the first requests: its answer (what the source still retains) comes over the connection the
RETRANS frames use, which ties that connection to this recovery (a RETRANS names only a topic
index and a sequence number, and two sources may share a topic index), and lets what the source
no longer has be given up at once.

Timing is UM's: the first request waits `otr_request_initial_delay` (the transport may still be
repairing); a message not yet recovered is asked again after `otr_request_minimum_interval`, the
interval doubling up to `otr_request_maximum_interval`; `otr_request_outstanding_maximum` are asked
at a time; what has not come `otr_request_duration` after the loss was seen is given up and
reported (UNRECOVERABLE_LOSS). Delivery stays in order: the live messages after a loss wait (at
most `otr_message_caching_threshold` of them; beyond that the oldest losses are given up) and are
delivered after what was recovered before them. A recovered message is flagged `otr`.

Sequence numbers are 32 bits and wrap; inside, each is extended to a plain integer relative to
the newest one seen, so order holds across the wrap.
"""
from __future__ import annotations

import logging
import time
from bisect import bisect_left, insort
from dataclasses import dataclass
from heapq import merge
from operator import itemgetter

from router.um.late_join import next_request_index
from router.um.messages import OtrMessage
from router.um.retained_frames import Reassembly, RetainedPiece
from router.um.wire.lbmc import LBMC_TYPE_CONTROL, MESSAGE_HEADER, LbmcMessage, encode_lbmc
from router.um.wire.lbmc_late_join import LjiRequest, UmeLjInfo, UmeRxReq
from router.um.wire.lbmr import LateJoinOption

log = logging.getLogger(__name__)

_RXREQS_PER_MESSAGE = 64            # UME_RXREQ headers in one CONTROL message
MAX_GAP = 1_000_000                 # a loss larger than this is given up beyond its newest messages
_MASK, _HALF, _WRAP = 0xFFFFFFFF, 0x80000000, 0x100000000
_key = itemgetter(0)
_LIVE, _RECOVERED, _LOSS = range(3)


@dataclass(frozen=True)
class OtrSettings:
    """A receiver's OTR options (UM's names; intervals in seconds)."""
    enabled: bool = False
    initial_delay: float = 10.0
    minimum_interval: float = 1.0
    maximum_interval: float = 10.0
    duration: float = 20.0
    outstanding_maximum: int = 200          # 0: no maximum
    log_alert_cooldown: float = 300.0
    caching_threshold: int = 10000

    @classmethod
    def from_config(cls, config) -> "OtrSettings":
        get = config.get
        return cls(bool(get("receiver", "use_otr")), get("receiver", "otr_request_initial_delay") / 1000,
                   get("receiver", "otr_request_minimum_interval") / 1000,
                   get("receiver", "otr_request_maximum_interval") / 1000,
                   get("receiver", "otr_request_duration") / 1000,
                   get("receiver", "otr_request_outstanding_maximum"),
                   get("receiver", "otr_request_log_alert_cooldown"),
                   get("receiver", "otr_message_caching_threshold"))


class _Missing:
    """One lost message being recovered."""
    __slots__ = ("seen", "next_ask", "interval", "asked")

    def __init__(self, seen: float, first_ask: float, interval: float):
        self.seen = seen
        self.next_ask = first_ask
        self.interval = interval
        self.asked = False


class OtrRecovery:
    """One joined source's recovery: what is missing, what came back, the live messages held.
    Everything here runs on the context's loop thread."""

    def __init__(self, context, joined, option: LateJoinOption, settings: OtrSettings, reply_to: tuple[str, int]):
        self.context, self.joined, self.option, self.settings = context, joined, option, settings
        self.reply_to = reply_to
        self.topic_idx = joined.candidate.index
        self.request_idx = next_request_index()
        self.bound = False                        # the source's answer connection is known (LJ_INFO came)
        self.newest: int | None = None            # the newest sequence number seen, extended
        self.missing: dict[int, _Missing] = {}    # extended sqn -> its state
        # Recovered messages by their first extended sqn: (sqn, payload) or (sqn, payload, origin)
        # for a request. The fragments of one not yet whole wait in `reassembly`; `fragments`
        # names them (extended sqn -> its message's first), so that none is asked for twice.
        self.recovered: dict[int, tuple] = {}
        self.fragments: dict[int, int] = {}
        self.held: list[tuple] = []               # (extended sqn, live (sqn, payload) or (sqn, payload, origin))
        self.losses: list[tuple[int, int]] = []   # given up, to report in sequence: (extended first, count)
        self.timer = None
        self.timer_at: float | None = None
        self.last_alert: float | None = None
        self.counters = context.otr_counters
        self.reassembly = Reassembly(self.counters, "otr_messages_incomplete", "otr_properties_malformed")
        self.paused = False                       # late join hands back what it held: wait for all of it
        self.done = False

    def _ext(self, sqn: int) -> int:
        """A 32-bit sequence number as a plain integer, the nearer to the newest one seen."""
        newest = self.newest
        if newest is None:
            self.newest = sqn
            return sqn
        ahead = (sqn - newest) & _MASK
        extended = newest + ahead if ahead < _HALF else newest + ahead - _WRAP
        if extended > newest:
            self.newest = extended
        return extended

    # -- the stream's side -------------------------------------------------------------------------
    def gap(self, first: int, count: int) -> None:
        """The transport lost `count` messages from sequence number `first` on."""
        first = self._ext(first)
        self._ext((first + count - 1) & _MASK)
        if count > MAX_GAP:
            self._lost(first, count - MAX_GAP)
            first, count = first + count - MAX_GAP, MAX_GAP
        now = time.monotonic()
        first_ask = now + self.settings.initial_delay
        for sqn in range(first, first + count):
            if sqn not in self.missing and sqn not in self.recovered and sqn not in self.fragments:
                self.missing[sqn] = _Missing(now, first_ask, self.settings.minimum_interval)
        self.counters["otr_messages_missing"] += count
        self._arm(first_ask)

    @property
    def holding(self) -> bool:
        """Whether live deliveries must go through here (something before them may come)."""
        return bool(self.missing or self.held or self.losses or self.recovered or self.fragments)

    def hold(self, entries: list[tuple]) -> None:
        """Live messages ((sqn, payload)) or a request ((sqn, payload, origin)) while something
        before them may be missing: in order behind it (what comes before the first loss goes now)."""
        ext = self._ext
        self.held.extend((ext(entry[0]), entry) for entry in entries)
        if len(self.held) > self.settings.caching_threshold and self.missing:
            log.warning("OTR for %s: %d messages held back behind %d lost ones, more than "
                        "otr_message_caching_threshold; the oldest losses are given up",
                        self.joined.source, len(self.held), len(self.missing))
            self.counters["otr_cache_overflows"] += 1
            self._give_up_until_held_fits()
        self._release()

    def pause(self) -> None:
        """Late join is handing back the live messages it held: deliver nothing until `resume`."""
        self.paused = True

    def resume(self) -> None:
        """Late join finished (what this recovered waited behind what it held): deliver."""
        self.paused = False
        self._release()

    # -- the exchange ------------------------------------------------------------------------------
    def _arm(self, when: float) -> None:
        if self.done or (self.timer is not None and self.timer_at is not None and self.timer_at <= when):
            return
        if self.timer is not None:
            self.timer.cancel()
        self.timer_at = when
        self.timer = self.context.loop.call_later(max(0.0, when - time.monotonic()), self._tick)

    def _tick(self) -> None:
        self.timer = self.timer_at = None
        if self.done:
            return
        try:
            now = time.monotonic()
            settings = self.settings
            expired = sorted(sqn for sqn, m in self.missing.items() if now - m.seen >= settings.duration)
            for sqn in expired:
                del self.missing[sqn]
            self._report_lost(expired)
            ask, again = self._due(now)
            if ask:
                self._request(ask, now, again)
            if expired:
                self._release()
        finally:
            # Whatever failed (the loop counts and logs it), the next request or give-up is armed:
            # otherwise the live messages held behind a loss would wait for good. What was asked
            # is not due again before its interval, so a fault that repeats does not spin.
            self._arm_next()

    def _due(self, now: float) -> tuple[list[int], bool]:
        """The missing messages to ask for now: those asked before whose interval is up, and new
        ones while fewer than the outstanding maximum are asked; and whether any is asked again."""
        settings = self.settings
        outstanding = sum(1 for m in self.missing.values() if m.asked)
        room = settings.outstanding_maximum - outstanding if settings.outstanding_maximum else len(self.missing)
        ask = []
        again = False
        for sqn in sorted(self.missing):
            state = self.missing[sqn]
            if state.next_ask > now:
                continue
            if not state.asked:
                if room <= 0:
                    continue
                room -= 1
                state.asked = True
            else:
                state.interval = min(state.interval * 2, settings.maximum_interval)
                again = True
            state.next_ask = now + state.interval
            ask.append(sqn)
        return ask, again

    def _arm_next(self) -> None:
        """The next time something is due: a re-ask, a first ask there is room for, a give-up. New
        asks waiting for room are not: a retransmission that makes room asks at once."""
        if not self.missing:
            return
        settings = self.settings
        asked = [m for m in self.missing.values() if m.asked]
        room = not settings.outstanding_maximum or len(asked) < settings.outstanding_maximum
        times = [m.next_ask for m in (self.missing.values() if room else asked)]
        times.append(min(m.seen for m in self.missing.values()) + settings.duration)
        self._arm(min(times))

    def _request(self, sqns: list[int], now: float, again: bool = False) -> None:
        option, (ip, port) = self.option, self.reply_to
        headers = [UmeRxReq(self.request_idx, option.transport_idx, self.topic_idx, sqn & _MASK, port, ip)
                   for sqn in sqns]
        if not self.bound or again:
            # What the source retains, answered over the connection its RETRANS frames will use;
            # asked again with each retry (that connection may have been replaced: the answer
            # binds the new one).
            headers.insert(0, LjiRequest(self.request_idx, option.transport_idx, self.topic_idx, ip, port))
        for start in range(0, len(headers), _RXREQS_PER_MESSAGE):
            request = LbmcMessage(LBMC_TYPE_CONTROL, headers[start:start + _RXREQS_PER_MESSAGE])
            self.context.responder.send_frames((option.src_ip, option.src_tcp_port), encode_lbmc(request))
        self.counters["otr_requests_sent"] += len(sqns)
        cooldown = self.settings.log_alert_cooldown
        if self.last_alert is None or now - self.last_alert >= cooldown:
            self.last_alert = now
            log.warning("OTR for %s: requesting %d lost messages from %s:%d", self.joined.source, len(sqns),
                        option.src_ip, option.src_tcp_port)
        else:
            log.info("OTR for %s: requesting %d lost messages", self.joined.source, len(sqns))

    def info(self, info: UmeLjInfo) -> None:
        """The source's answer to our LJI_REQ: what it retains. Its connection is ours now (the
        context bound it); what it no longer has will not come."""
        self.bound = True
        if self.done:
            return
        if (info.high_seqnum - info.low_seqnum) & _MASK >= _HALF:     # low past high: nothing retained
            gone = sorted(self.missing)
        else:
            low = self._ext(info.low_seqnum)
            gone = sorted(sqn for sqn in self.missing if sqn < low)
        for sqn in gone:
            del self.missing[sqn]
        if gone:
            self._report_lost(gone)
            self._release()

    def retransmission(self, frame) -> bool:
        """A RETRANS frame of our topic index; False if it is not one this recovery waits for."""
        if self.done:
            return False
        sqn = self._ext(MESSAGE_HEADER.unpack_from(frame)[4])
        if self.missing.pop(sqn, None) is None:
            return False
        self.counters["otr_frames_recovered"] += 1
        piece = self.reassembly.read(frame)
        if piece is None:
            self._lost(sqn, 1)                    # counted: what came cannot be delivered
        else:
            first = self._ext(piece.first)
            if not piece.whole:
                self.fragments[sqn] = first
                self._whole_message(sqn, piece)
            message = self.reassembly.add(first, piece)
            if message is not None:
                self._forget_fragments(first)
                self.recovered[first] = message
        self._release()
        if self.missing:
            self._arm(time.monotonic())           # room for the next ones
        return True

    def _forget_fragments(self, first: int) -> None:
        """The message from `first` is whole: its fragments, in sequence from it, are no more."""
        sqn = first
        while self.fragments.get(sqn) == first:
            del self.fragments[sqn]
            sqn += 1

    def _whole_message(self, sqn: int, piece: RetainedPiece) -> None:
        """A recovered fragment: its message's other fragments are needed too (the transport's
        copies of them went into a reassembly that can no longer complete)."""
        first = self._ext(piece.first)
        size = len(piece.piece)
        last = sqn if piece.offset + size >= piece.total else first + -(-piece.total // size) - 1
        now = time.monotonic()
        for other in range(first, min(last, first + MAX_GAP) + 1):
            if other not in self.missing and other not in self.recovered and other not in self.fragments:
                self.missing[other] = _Missing(now, now, self.settings.minimum_interval)

    # -- giving up ---------------------------------------------------------------------------------
    def _give_up_until_held_fits(self) -> None:
        """Too much held back: give up the losses before the held messages (the oldest first)."""
        while self.missing and len(self.held) > self.settings.caching_threshold:
            run = [min(self.missing)]
            while run[-1] + 1 in self.missing:
                run.append(run[-1] + 1)
            for sqn in run:
                del self.missing[sqn]
            self._report_lost(run)
            self._release()

    def give_up(self) -> None:
        """The source ended: deliver what came back and what was held, report the rest lost."""
        if self.missing:
            lost = sorted(self.missing)
            self.missing.clear()
            self._report_lost(lost)
        self._release(ending=True)
        self.close()

    def _report_lost(self, sqns: list[int]) -> None:
        """Note each run of consecutive lost (extended) sequence numbers."""
        start = previous = None
        for sqn in sqns:
            if start is None:
                start = previous = sqn
            elif sqn == previous + 1:
                previous = sqn
            else:
                self._lost(start, previous - start + 1)
                start = previous = sqn
        if start is not None:
            self._lost(start, previous - start + 1)

    def _lost(self, first: int, count: int) -> None:
        """Given up: reported to the receiver in sequence, when delivery gets there."""
        self.counters["otr_messages_unrecovered"] += count
        insort(self.losses, (first, count))

    # -- delivery, in order ------------------------------------------------------------------------
    def _release(self, ending: bool = False) -> None:
        """Deliver, in sequence order, what is recovered, held and given up before the first
        missing message. Not while late join still fetches: what it holds back comes first."""
        if (self.paused or self.joined.late_join is not None) and not ending:
            return
        floor = min(self.missing) if self.missing else None
        cut = len(self.held) if floor is None else bisect_left(self.held, floor, key=_key)
        live = self.held[:cut]
        del self.held[:cut]
        recovered = self._recovered_below(floor)
        cut = len(self.losses) if floor is None else bisect_left(self.losses, floor, key=_key)
        losses = self.losses[:cut]
        del self.losses[:cut]
        if not live and not recovered and not losses:
            return
        joined = self.joined
        run: list[tuple] = []
        run_kind = _LIVE
        for (_, entry), kind in merge(((e, _LIVE) for e in live), ((e, _RECOVERED) for e in recovered),
                                      (((first, (first & _MASK, count)), _LOSS) for first, count in losses),
                                      key=lambda pair: pair[0][0]):
            if joined.ended:
                return
            if kind == _LOSS or len(entry) == 3:    # a loss or a request: on its own, in place
                self._deliver_run(run, run_kind)
                run = []
                if kind == _LOSS:
                    joined.report_loss(*entry)
                else:
                    if kind == _RECOVERED:
                        self.counters["otr_messages_recovered"] += 1
                    joined.deliver_request(*entry, otr=kind == _RECOVERED)
                continue
            if kind != run_kind and run:
                self._deliver_run(run, run_kind)
                run = []
            run_kind = kind
            run.append(entry)
        self._deliver_run(run, run_kind)

    def _deliver_run(self, run: list[tuple], kind: int) -> None:
        if not run or self.joined.ended:
            return
        joined = self.joined
        if kind == _RECOVERED:
            self.counters["otr_messages_recovered"] += len(run)
            joined.deliver_ready([OtrMessage(joined.topic, joined.source, sqn, payload) for sqn, payload in run])
        else:
            joined.deliver_live(run)

    def _recovered_below(self, floor) -> list[tuple]:
        """The recovered messages before `floor` (all if None), taken out: (extended sqn, (sqn,
        payload)) or, for a request, (extended sqn, (sqn, payload, origin)). With nothing missing
        any more, a fragmented message not yet whole never will be: given up."""
        if floor is None:
            self.reassembly.drop_partial()
            self.fragments.clear()
        out = sorted((first, message) for first, message in self.recovered.items() if floor is None or first < floor)
        for first, _ in out:
            del self.recovered[first]
        return out

    def close(self) -> None:
        """Over (the source ended, or the receiver left): nothing is kept. The source context's
        connection to our request port still names this recovery until another answer on it
        replaces it, and lives as long as the source does."""
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = self.timer_at = None
        self.missing.clear()
        self.recovered.clear()
        self.fragments.clear()
        self.reassembly.forget()
        self.held.clear()
        self.losses.clear()
