"""What the receiving side of LBT-RM and LBT-RU share: one joined session, repaired and in order.

A session's datagrams come from its SessionSocket (router.um.session_socket). Its ReceiveWindow
(router.um.lbtrm_receive_window) puts them in order, says which gaps to NAK and when, and gives up
what cannot be repaired (counted as lost). The stream ends (EOS) when neither data nor a session
message came for the transport's activity timeout while its socket was read (time paused by flow
control does not count: what the source sent meanwhile waits in the kernel). Repair stands still
while the socket is not read, for the same reason: no NAK goes (its answer would wait unread, and
each NAK more would only queue another copy behind it), and that time does not count towards
giving loss up, ending the stream after a final advertisement, or expiring a partial message.
A DATA or SM claiming a lead no source can have reached (lbtrm_receive_window.MAX_LEAD ahead) is
counted as malformed and dropped: believed, it would give up most of the sequence space.
A subclass reads its packet types into `_data`, `_sm` and `_ncf`, and sends NAKs its transport's way.
In the steady state (each DATA the next one, nothing missing) its socket reads a datagram's header
itself and hands the frames straight on (`in_order_data`); anything else goes the whole way.

The in-order datagrams one read of the socket brings (router.um.session_socket) are parsed at once
when the read ends (router.um.frame_batch): a router forwards them as one record of its ring, an
application gets them as one batch. A datagram that is not whole frames is parsed alone, after
those before it, and loses only the rest of itself. What repair gives back outside a read (a timer
giving loss up) is parsed at once, and what is gathered is parsed before a stream ends.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from router.um.frame_batch import FrameBatch
from router.um.frame_stream import FrameStream
from router.um.lbtrm_receive_window import ReceiveWindow

log = logging.getLogger(__name__)

NAKS_PER_PACKET = 1024
_FRAGMENT_GRACE = 1.0             # seconds past the NAK generation interval a partial message may wait


class RepairingStream(FrameStream):
    def __init__(self, loop, key: tuple, socket_, address: tuple, description: str,
                 on_closed: Callable[[FrameStream], None], *, activity_timeout: float, window: ReceiveWindow | None):
        super().__init__(loop, key, on_closed)
        self.socket = socket_
        self.address = address                    # the key its socket knows it by
        self.description = description
        self.window = window or ReceiveWindow()
        self.counters.update(self.window.counters)
        self.window.counters = self.counters          # one set of counters, UM's UDPReceive names
        self.counters.update({"nak_pckts_sent": 0, "sms_rcved": 0, "ncfs_rcved": 0})
        self.activity_timeout = activity_timeout
        self.last_heard = time.monotonic()
        self.nak_timer = None
        self.nak_due: float | None = None
        self.ending: list[Callable[[], None]] = []        # subscriptions to end once repair is done
        self.ending_since = 0.0
        self.sm_since_ending = False
        self.unread_since: float | None = None        # since when the socket is not read (flow control)
        self._batch = FrameBatch(self)                # in-order datagrams of this read, not yet parsed
        socket_.add(self)
        self._activity = loop.call_every(min(1.0, max(activity_timeout / 4, 0.05)), self._check_activity)
        if not self.listening():
            self.reading_changed(False)               # joined while the shared socket is held back

    def _send_naks(self, sqns: list[int]) -> bool:
        """Send one NAK packet for `sqns` to the source."""
        raise NotImplementedError

    # -- datagrams -------------------------------------------------------------------------------
    def _believable(self, packet) -> bool:
        """Whether what `packet` says of how far the source has sent (a DATA's sequence number, an
        SM's lead) can be true. One that cannot (a corrupt or forged datagram) is counted as
        malformed and dropped, and is no sign of the source's activity: a source that really
        jumped that far is heard no more, and its stream ends after the activity timeout."""
        lead = getattr(packet, "lead_sqn", getattr(packet, "sqn", None))
        if lead is None or self.window.believable(lead):
            return True
        count = self.counters["malformed"] = self.counters["malformed"] + 1
        if self.context_counters is not None:
            self.context_counters["transport_malformed"] += 1
        if not count & (count - 1):
            log.warning("%s: %s claiming sequence number %d, far beyond any the source can have sent; "
                        "dropped (%d malformed so far)", self.description, type(packet).__name__, lead, count)
        return False

    def in_order_data(self, sqn: int, payload, now: float) -> bool:
        """New DATA (not a retransmission) read straight from its header (the wire module's
        peek_new_data, router.um.session_socket): taken at once when the window takes it as the
        next one (ReceiveWindow.take_next) and the stream is not ending. Without a packet object,
        a payload copy and the repair bookkeeping that has nothing to do then, a busy session's
        datagram takes about half the CPU from the socket to the batch (BENCHMARKS.md, "LBT-RM
        receive path"). False: anything else, for the caller to decode and pass on the whole way."""
        if self.closed or self.ending or not self.window.take_next(sqn, len(payload)):
            return False
        self.last_heard = now
        self._frames(payload)
        if not self.socket.reading_batch:
            self.parse_batch()
        return True

    def _data(self, sqn: int, payload, now: float, retransmission: bool, trail: int) -> None:
        self._delivered(self.window.data(sqn, bytes(payload), now, retransmission, trail))

    def _sm(self, lead: int, trail: int, now: float) -> None:
        self.counters["sms_rcved"] += 1
        self.sm_since_ending = True
        self._delivered(self.window.sm(lead, trail, now))

    def _ncf(self, sqns, reason: int, trail: int, now: float) -> None:
        self.counters["ncfs_rcved"] += 1
        self._delivered(self.window.ncf(sqns, reason, trail, now))

    def _delivered(self, payloads) -> None:
        for payload in payloads:
            self._frames(payload)
        if self.ending or not self.socket.reading_batch:
            self.parse_batch()                          # no read to end, or the stream to end: now
        self._arm_naks()
        if self.ending:
            self._check_ending()

    def end_when_repaired(self, callback: Callable[[], None]) -> None:
        """Run `callback` (end a subscription: its source sent a final advertisement) once what the
        source sent last is here: a session message heard since (its lead tells of a lost tail)
        and nothing missing. At most nak_generation_interval later, as loss would be given up."""
        if not self.ending:
            self.ending_since = time.monotonic()
            self.sm_since_ending = False
            self.loop.call_later(self.window.nak_generation, self._check_ending)
        self.ending.append(callback)
        self._check_ending()

    def _check_ending(self) -> None:
        if not self.ending or self.closed:
            return
        window = self.window
        repaired = self.sm_since_ending and not window.missing and not window.buffered
        waited = self.unread_since is None and time.monotonic() - self.ending_since >= window.nak_generation
        if repaired or waited:
            callbacks, self.ending = self.ending, []
            for callback in callbacks:
                callback()

    def _frames(self, payload: bytes) -> None:
        first = not self._batch.size
        if self._batch.add(payload):
            if first and self.socket.reading_batch:
                self.socket.batched(self)               # parsed when the read ends
            return
        self._batch.parse()                             # in order: the datagrams before it first
        if self.closed:
            return
        self.counters["bytes"] += len(payload)
        payload = bytes(payload)                        # (a view of the datagram read, from in_order_data)
        if self._parse(payload) != len(payload):
            self._malformed("a datagram that is not whole frames", close=False)

    def close(self, notify: bool = True) -> None:
        if notify and not self.closed:
            self.parse_batch()                          # what came before the end is delivered first
        super().close(notify)

    def parse_batch(self) -> None:
        """Parse the datagrams gathered so far (the socket calls it when its read ends)."""
        self._batch.parse()

    def _malformed(self, what: str, close: bool = True) -> None:
        """Each datagram is framed on its own: one whose frames are broken (a faulty or foreign
        sender) loses what follows the break in it, never the session (which would end every
        receiver on it, and lose what the source sends until they join again, untold)."""
        super()._malformed(f"{what}, the rest of its datagram with it" if close else what, close=False)

    def _arm_naks(self) -> None:
        if self.unread_since is not None:
            return                                    # armed again once the socket is read
        due = self.window.next_deadline()
        if due is None or (self.nak_due is not None and self.nak_due <= due):
            return
        if self.nak_timer is not None:
            self.nak_timer.cancel()
        self.nak_due = due
        self.nak_timer = self.loop.call_later(max(0.0, due - time.monotonic()), self._naks_due)

    def _naks_due(self) -> None:
        self.nak_timer = self.nak_due = None
        if self.closed:
            return
        payloads = []
        try:
            naks, payloads = self.window.due(time.monotonic())
            for start in range(0, len(naks), NAKS_PER_PACKET):
                if self._send_naks(naks[start:start + NAKS_PER_PACKET]):
                    self.counters["nak_pckts_sent"] += 1
        finally:
            # Whatever failed (the loop counts and logs it), what the window gave back is
            # delivered (it holds it no more) and the next NAK or give-up is armed.
            self._delivered(payloads)

    def listening(self) -> bool:
        """Whether the source's datagrams are read now. Flow control (this stream's consumer
        paused, or another's on the same socket) leaves them waiting in the kernel: a silence
        then is ours, not the source's."""
        return not self.paused and getattr(self.socket, "reading", True)

    def _check_activity(self) -> None:
        if self.closed:
            return
        now = time.monotonic()
        if not self.listening():
            # The activity timeout measures the source's silence: it starts again once we read.
            self.last_heard = now
        elif now - self.last_heard >= self.activity_timeout:
            log.info("%s: nothing heard for %.1f s; ended", self.description, self.activity_timeout)
            self.close()
        elif self.fragments:
            # A message whose fragments straddle loss that was given up never completes: once
            # repair has had its whole NAK generation interval, what is still partial goes.
            self.expire_fragments(now - self.window.nak_generation - _FRAGMENT_GRACE)

    # -- flow control ----------------------------------------------------------------------------
    def reading_changed(self, reading: bool) -> None:
        """The socket stopped or started being read (flow control: this stream's consumer, or
        another's on the same socket). Repair waits meanwhile, its clock too."""
        if self.closed:
            return
        now = time.monotonic()
        if not reading:
            if self.unread_since is None:
                self.unread_since = now
                if self.nak_timer is not None:
                    self.nak_timer.cancel()
                    self.nak_timer = self.nak_due = None
            return
        if self.unread_since is None:
            return
        unread, self.unread_since = now - self.unread_since, None
        self.window.postpone(unread)
        for entry in self.fragments.values():
            entry[2] += unread                        # their expiry counts read time only
        if self.ending:
            self.ending_since += unread
            self.loop.call_later(max(0.0, self.ending_since + self.window.nak_generation - now), self._check_ending)
        self._arm_naks()

    def pause(self) -> None:
        if not self.paused and not self.closed:
            self.paused = True
            self.socket.pause(self)

    def resume(self) -> None:
        if self.paused and not self.closed:
            self.paused = False
            self.socket.resume(self)

    def _close_transport(self) -> None:
        self._activity.cancel()
        if self.nak_timer is not None:
            self.nak_timer.cancel()
        self.socket.remove(self)
