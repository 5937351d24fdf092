"""What the sending side of LBT-RM and LBT-RU share: datagrams, rate limits, a transmission window
and the answers to NAKs.

A session's batches (batching_session.BatchingSession) are cut at frame boundaries into datagrams
of at most `transport_*_datagram_max_size` bytes, header included, each with the next sequence
number. A subclass says what a datagram's header is and where datagrams go (a multicast group for
LBT-RM, each connected receiver for LBT-RU), and reads its socket.

- **Rate.** Data goes out within `transport_*_data_rate_limit`, retransmissions within
  `transport_*_retransmit_rate_limit` (router.um.rate_limiter). An application's sending thread
  waits for its turn; a router's proxy source (overflow "drop") queues what the rate holds back, up
  to its `max_queue`, and counts what does not fit as dropped (blocking), never sent half. The
  loop never waits for the rate: what an application's session sends from it (the batching
  timer's short batch, a TSNI) is queued too, and its thread's next send waits for it.
- **Repair.** Sent datagrams stay in a transmission window of `transport_*_transmission_window_size`
  bytes of datagrams and, if `transport_*_transmission_window_limit` is set (0: no limit), at most
  that many bytes counting what each kept datagram costs besides its bytes (WINDOW_ENTRY_OVERHEAD):
  the size bounds what can be repaired, the limit the memory it takes when datagrams are small.
  A NAK for one of them is answered with a retransmission unless it was retransmitted within
  `transport_*_ignore_interval` (NCF "ignored"). When the retransmit rate is spent, the
  retransmission waits for it (NCF "rx delay": it is coming), up to one second's worth, and beyond
  that is refused (NCF "shed": ask again later); one that left the window gets NCF "no retry", and
  the receiver stops asking.
- **Session messages.** After data, an SM {lead, trail} goes out after `transport_*_sm_minimum_interval`,
  then at doubling intervals up to `transport_*_sm_maximum_interval`: receivers learn of a lost
  tail, and that the session lives (they end it after their activity timeout without either).
"""
from __future__ import annotations

import collections
import errno
import logging
import os
import socket
import threading
import time

from router.um.batching_session import BatchingSession
from router.um.frame_runs import datagram_cuts
from router.um.rate_limiter import RateLimiter

log = logging.getLogger(__name__)

WRAP = 1 << 32
NCF_NO_RETRY, NCF_IGNORED, NCF_RX_DELAY, NCF_SHED = 0, 1, 2, 3    # the same in LBT-RM and LBT-RU
_NCF_LIST_MAX = 1024
_CLOSE_LINGER = 0.5                     # answer NAKs this long after closing, if any come
_NAK_LINGER = 1.5                       # and this long after the last NAK: a receiver whose
                                        # retransmission was lost asks again after its
                                        # nak_backoff_interval (200 ms by default), or after its
                                        # nak_suppress_interval (1 s) if we sent an NCF; a loaded
                                        # host delays both
_REFUSED_LINGER = 1.5                   # after an NCF "shed"/"ignored": the receiver asks again after
                                        # its nak_suppress_interval (1 s by default)
_CLOSE_LINGER_LIMIT = 5.0
_LOCK_RETRY = 0.005                     # s the loop waits to try again for a lock a sending thread holds
# What one datagram kept in the window costs besides its bytes: the bytes object's header, its
# sequence-number key and the ordered map's share (CPython 3.11, 64-bit: 170 bytes an entry over
# 100,000 entries, measured with tracemalloc).
WINDOW_ENTRY_OVERHEAD = 170


def bind_in_range(interface: str, low: int, high: int, what: str) -> socket.socket:
    """A UDP socket on the first free port of low..high."""
    for port in range(low, high + 1):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.bind((interface, port))
            return sock
        except OSError as err:
            sock.close()
            if err.errno != errno.EADDRINUSE:
                raise
    raise OSError(errno.EADDRINUSE, f"no free {what} port in {low}..{high} on {interface}")


class RepairingSourceSession(BatchingSession):
    """One transport session that repairs loss. Thread-safe like every session: applications send
    from their threads; the context's loop reads the socket, retransmits and sends session messages.

    Subclasses set `header_size` (what a DATA packet adds to its LBMC bytes), `retransmission_flag`
    (byte offset and bit of the RETRANSMISSION flag in a DATA packet) and `kind` (for logs), and
    implement `_data_header`, `_send_data`, `_send_retransmission`, `_send_ncf`, `_send_sm` and
    `_readable`; `_answer` takes the NAKs they read."""

    header_size = 0
    retransmission_flag = (0, 0)
    kind = "?"
    rate_limit_option = ""              # the UM option that sets `data_rate` (for what is logged)

    def __init__(self, loop, sock: socket.socket, *, datagram_max_size: int, data_rate_limit: int,
                 retransmit_rate_limit: int, rate_interval: float, window_size: int, ignore_interval: float,
                 sm_minimum_interval: float, sm_maximum_interval: float, batching_minimum_length: int,
                 batching_interval: float, overflow: str, max_queue: int, window_limit: int = 0):
        # What the batching layer may put in one datagram: the transport's header takes the rest.
        payload_max = datagram_max_size - self.header_size
        super().__init__(loop, datagram_max_size=payload_max,
                         batching_minimum_length=min(batching_minimum_length, payload_max),
                         batching_interval=batching_interval, overflow=overflow, max_queue=max_queue)
        self.session_id = int.from_bytes(os.urandom(4), "big") or 1
        self.sock = sock
        self.port = sock.getsockname()[1]
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 1024 * 1024)
        except OSError:
            pass
        self.next_sqn = 0
        self.data_rate = RateLimiter(data_rate_limit, rate_interval, datagram_max_size)
        self.rx_rate = RateLimiter(retransmit_rate_limit, rate_interval, datagram_max_size)
        self.ignore_interval = ignore_interval
        # The transmission window: sqn -> datagram, oldest first; the loop reads it for NAKs
        # while a sending thread adds to it, hence its own lock (the session's is held across
        # rate-limit waits).
        self.window: collections.OrderedDict[int, bytes] = collections.OrderedDict()
        self.window_bytes = 0
        self.window_size = window_size
        self.window_limit = window_limit              # 0: none
        self.window_lock = threading.Lock()
        self.retransmitted: dict[tuple, float] = {}          # (sqn, receiver) -> when, for the ignore interval
        # Retransmissions the retransmit rate holds back (NCF "rx delay"): up to one second of
        # that rate, so a burst of NAKs is answered late rather than refused.
        self.rx_delayed: collections.deque[tuple[int, int, tuple]] = collections.deque()  # (sqn, bytes, to)
        self.rx_delayed_bytes = 0
        self.rx_delay_limit = max(retransmit_rate_limit // 8, 8 * datagram_max_size)
        self.rx_pump = None
        self.pending: collections.deque = collections.deque()  # datagram payloads the rate holds back
        self.pending_bytes = 0
        self.pump_armed = False
        self.sm_minimum, self.sm_maximum = sm_minimum_interval, sm_maximum_interval
        self.sm_interval = sm_minimum_interval
        self.sm_sqn = 0
        self.last_sm = time.monotonic()
        self.data_since_sm = False
        self.last_nak = 0.0
        self.last_refusal = 0.0                   # an NCF that told a receiver to ask again later
        self.counters.update({"msgs_sent": 0, "nak_pckts_rcved": 0, "naks_rcved": 0, "naks_ignored": 0,
                              "naks_shed": 0, "naks_rx_delay_ignored": 0, "naks_unrecoverable": 0, "rxs_delayed": 0,
                              "rxs_sent": 0, "rx_bytes_sent": 0, "sms_sent": 0, "malformed": 0,
                              "dropped_oversize": 0, "send_errors": 0})
        loop.call_soon_threadsafe(self._start)

    @property
    def description(self) -> str:
        return f"{self.kind} session {self.session_id:08X}"

    def _start(self) -> None:
        if self.sock.fileno() < 0:
            return                  # closed before the loop got to it
        self.loop.add_reader(self.sock.fileno(), self._readable)
        self._sm_timer = self.loop.call_every(self.sm_minimum, self._sm_tick)

    # -- what a subclass provides ----------------------------------------------------------------
    def _data_header(self, sqn: int, trail: int) -> bytes:
        raise NotImplementedError

    def _send_data(self, sqn: int, datagram) -> None:
        """Send a new DATA datagram to every receiver."""
        raise NotImplementedError

    def _send_retransmission(self, datagram, to) -> bool:
        """Send a retransmission asked for by the receiver at `to`."""
        raise NotImplementedError

    def _send_ncf(self, to, trail: int, reason: int, sqns: list[int]) -> None:
        raise NotImplementedError

    def _send_sm(self, now: float) -> None:
        """Send a session message {sm_sqn, lead, trail} to every receiver (`_lead_trail`)."""
        raise NotImplementedError

    def _readable(self) -> None:
        raise NotImplementedError

    def _data_cost(self, size: int) -> int:
        """The bytes a new datagram of `size` bytes costs the data rate."""
        return size

    # -- sending ---------------------------------------------------------------------------------
    def _deliver(self, data, force: bool = False) -> None:
        """Cut a batch of whole frames into datagrams; send each within the data rate (lock held).
        `force`: each is queued whatever the queue holds (`_queue`). A frame too large for a
        datagram (a router forwarding a larger transport's fragment is stopped before here) is
        never sent half; a torn one cannot come from our batches: both are counted."""
        view = memoryview(data)
        spans, oversize, broken = datagram_cuts(view, self.datagram_max_size)
        for start, stop in spans:
            self._queue(view[start:stop], force)
        if oversize:
            self.counters["dropped_oversize"] += oversize
        if broken:
            self.counters["malformed"] += 1

    def _queue(self, payload, force: bool = False) -> None:
        """Send one datagram's payload now if the data rate allows, else queue it behind what
        waits; with overflow "drop", one that would take the queue beyond `max_queue` is dropped
        (counted) unless `force`d: a peer link's control messages are queued whatever the queue
        holds (they are few and small, and losing one loses the link's order). An application's
        thread (overflow "block") sleeps for the rate instead, after sending what waits."""
        size = len(payload)
        cost = self._data_cost(size + self.header_size)
        if self.overflow == "block" and not self.loop.in_loop_thread():
            # An application's thread waits for the rate; what the loop queued goes first.
            while self.pending:
                head = self.pending.popleft()
                self.pending_bytes -= len(head)
                self._wait_for_rate(self._data_cost(len(head) + self.header_size))
                self._send_new(head)
            self._wait_for_rate(cost)
            self._send_new(payload)
            return
        if not self.pending and self.data_rate.take(cost):
            self._send_new(payload)
            return
        # The loop's thread (a router's proxy, or an application's batching timer or TSNI) never
        # waits for the rate: it queues. An application's session never drops: past max_queue
        # too, its short batch is queued, and the application's next send waits for it.
        if self.pending_bytes + size > self.max_queue and not force and self.overflow == "drop":
            self.count_dropped(payload)
            return
        self.pending.append(bytes(payload))
        self.pending_bytes += size
        self._arm_pump()

    def _wait_for_rate(self, cost: int) -> None:
        """Sleep until the data rate allows `cost` bytes, and spend them (an application's
        thread, never the loop's)."""
        wait = self.data_rate.wait(cost)
        while wait > 0:
            time.sleep(wait)
            wait = self.data_rate.wait(cost)
        self.data_rate.take(cost)

    def _arm_pump(self) -> None:
        if not self.pump_armed:
            self.pump_armed = True
            self.loop.call_soon_threadsafe(self._schedule_pump)

    def _schedule_pump(self) -> None:
        if not self.lock.acquire(blocking=False):
            # An application's thread holds the lock (it may sleep for the rate): the loop does
            # not wait for it; the pump looks again shortly (that thread sends what waits first).
            self.loop.call_later(_LOCK_RETRY, self._pump)
            return
        try:
            delay = (self.data_rate.wait(self._data_cost(len(self.pending[0]) + self.header_size))
                     if self.pending else 0.0)
        finally:
            self.lock.release()
        self.loop.call_later(delay, self._pump)

    def _pump(self) -> None:
        """Send what the rate held back, as the rate allows (loop thread)."""
        if not self.lock.acquire(blocking=False):
            self.loop.call_later(_LOCK_RETRY, self._pump)      # as in _schedule_pump
            return
        try:
            self.pump_armed = False
            pending = self.pending
            while pending and self.data_rate.take(self._data_cost(len(pending[0]) + self.header_size)):
                payload = pending.popleft()
                self.pending_bytes -= len(payload)
                self._send_new(payload)
        finally:
            # Even after a send that raised (the loop counts and logs it; the datagram had its
            # sequence number, so receivers NAK it or learn it is lost): the rest must not wait
            # for the application's next send, which may never come.
            if self.pending:
                self._arm_pump()
            self.lock.release()

    def _send_new(self, payload) -> None:
        sqn = self.next_sqn
        self.next_sqn = (sqn + 1) % WRAP
        with self.window_lock:
            trail = next(iter(self.window)) if self.window else sqn
            datagram = self._data_header(sqn, trail) + payload
            self.window[sqn] = datagram
            self.window_bytes += len(datagram)
            while len(self.window) > 1 and (
                    self.window_bytes > self.window_size
                    or self.window_limit and self.window_footprint() > self.window_limit):
                _, old = self.window.popitem(last=False)
                self.window_bytes -= len(old)
        self._send_data(sqn, datagram)
        self.counters["msgs_sent"] += 1
        self.data_since_sm = True

    def _sendto(self, datagram, address) -> bool:
        try:
            self.sock.sendto(datagram, address)
            return True
        except OSError as err:
            count = self.counters["send_errors"] = self.counters["send_errors"] + 1
            if not count & (count - 1):
                log.warning("%s: send to %s:%d failed: %s (%d so far)", self.description, *address[:2], err, count)
            return False

    # -- session messages ------------------------------------------------------------------------
    def _lead_trail(self) -> tuple[int, int]:
        with self.window_lock:
            lead = (self.next_sqn - 1) % WRAP
            trail = next(iter(self.window)) if self.window else self.next_sqn
        return lead, trail

    def _sm_tick(self) -> None:
        now = time.monotonic()
        if self.data_since_sm:
            self.data_since_sm = False
            self.sm_interval = self.sm_minimum
        elif now - self.last_sm < self.sm_interval:
            return
        else:
            self.sm_interval = min(self.sm_interval * 2, self.sm_maximum)
        self._send_sm(now)
        self.sm_sqn = (self.sm_sqn + 1) % WRAP
        self.last_sm = now

    # -- NAKs ------------------------------------------------------------------------------------
    def _malformed(self, address, what: str) -> None:
        count = self.counters["malformed"] = self.counters["malformed"] + 1
        if not count & (count - 1):
            log.warning("%s: unexpected datagram from %s:%d (%s); dropped (%d so far)",
                        self.description, address[0], address[1], what, count)

    def _answer(self, sqns, to, now: float) -> None:
        """Answer the NAK of the receiver at `to` for `sqns`."""
        self.counters["nak_pckts_rcved"] += 1
        self.counters["naks_rcved"] += len(sqns)
        self.last_nak = now
        refused: dict[int, list[int]] = {}
        retransmitted = self.retransmitted
        if len(retransmitted) > 4096:
            for key in [k for k, when in retransmitted.items() if now - when >= self.ignore_interval]:
                del retransmitted[key]
        for sqn in sqns:
            with self.window_lock:
                datagram = self.window.get(sqn)
            key = (sqn, self._retransmission_scope(to))
            if datagram is None:
                self.counters["naks_unrecoverable"] += 1
                refused.setdefault(NCF_NO_RETRY, []).append(sqn)
            elif now - retransmitted.get(key, -1e9) < self.ignore_interval:
                self.counters["naks_ignored"] += 1
                refused.setdefault(NCF_IGNORED, []).append(sqn)
            elif not self.rx_delayed and self.rx_rate.take(len(datagram), now):
                self._retransmit(datagram, to)
                retransmitted[key] = now
            elif self.rx_delayed_bytes + len(datagram) <= self.rx_delay_limit:
                # The retransmit rate is spent for now: it goes as the rate allows, and the NCF
                # tells the receiver it is coming (rather than to ask again).
                self.rx_delayed.append((sqn, len(datagram), to))
                self.rx_delayed_bytes += len(datagram)
                retransmitted[key] = now
                self.counters["rxs_delayed"] += 1
                refused.setdefault(NCF_RX_DELAY, []).append(sqn)
                self._arm_rx_pump(now)
            else:
                self.counters["naks_shed"] += 1
                refused.setdefault(NCF_SHED, []).append(sqn)
        if refused:
            if refused.keys() - {NCF_NO_RETRY}:
                self.last_refusal = now
            _, trail = self._lead_trail()
            for reason, refused_sqns in refused.items():
                for start in range(0, len(refused_sqns), _NCF_LIST_MAX):
                    self._send_ncf(to, trail, reason, refused_sqns[start:start + _NCF_LIST_MAX])

    def _retransmission_scope(self, to):
        """Who a retransmission reaches: everyone (multicast: None) or the receiver at `to`."""
        return None

    def _retransmit(self, datagram: bytes, to) -> None:
        copy = bytearray(datagram)
        offset, bit = self.retransmission_flag
        copy[offset] |= bit
        if self._send_retransmission(copy, to):
            self.counters["rxs_sent"] += 1
            self.counters["rx_bytes_sent"] += len(copy)

    def _arm_rx_pump(self, now: float) -> None:
        if self.rx_pump is None and self.rx_delayed and self.sock.fileno() >= 0:
            self.rx_pump = self.loop.call_later(self.rx_rate.wait(self.rx_delayed[0][1], now), self._rx_pump)

    def _rx_pump(self) -> None:
        """Send delayed retransmissions as the retransmit rate allows (loop thread)."""
        self.rx_pump = None
        now = time.monotonic()
        delayed = self.rx_delayed
        try:
            while delayed and self.rx_rate.take(delayed[0][1], now):
                sqn, size, to = delayed.popleft()
                self.rx_delayed_bytes -= size
                with self.window_lock:
                    datagram = self.window.get(sqn)
                if datagram is not None:             # else it left the window: the next NAK hears so
                    self._retransmit(datagram, to)
                    self.retransmitted[(sqn, self._retransmission_scope(to))] = now
        finally:
            # Even after one that raised (the loop counts and logs it; its receiver asks again
            # once its NCF's suppress interval is over): the rest were promised ("rx delay"), and
            # held back they would also fill the delay queue, shedding every NAK after.
            self._arm_rx_pump(now)

    # -- state -----------------------------------------------------------------------------------
    def queued_bytes(self) -> int:
        """What the data rate holds back (the transmission window is sent already)."""
        return self.pending_bytes

    # All that waits is the rate's: datagrams go whether receivers keep up or not.
    queued_for_receivers = queued_bytes

    def window_footprint(self) -> int:
        """The transmission window's bytes with each datagram's bookkeeping: what
        `transport_*_transmission_window_limit` bounds (window_lock held)."""
        return self.window_bytes + len(self.window) * WINDOW_ENTRY_OVERHEAD

    def backlog(self) -> float | None:
        return None

    def wait_drained(self, limit: int, only=None, timeout: float | None = None) -> bool:
        if self.loop.in_loop_thread():
            return self.pending_bytes <= limit      # the loop drains the queue: it cannot wait for it
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.pending_bytes > limit:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def _last_sm(self, now: float) -> None:
        self._send_sm(now)
        self.sm_sqn = (self.sm_sqn + 1) % WRAP
        self.last_sm = now

    def close(self) -> None:
        """Send what is batched and held back, a last session message, then answer NAKs a moment
        longer if receivers are still repairing (they see EOS after their activity timeout, or at
        once from the final advertisements the context may send)."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self._flush_locked()
        if self.loop.in_loop_thread():
            # A router closing a proxy source: its loop must not wait; what the rate holds back
            # goes as the rate allows, then the socket lingers for late NAKs.
            self._pump()
            if not self.pending:
                self._last_sm(time.monotonic())      # receivers learn the lead now
            self.loop.call_later(0.1, self._linger, time.monotonic())
            return
        self.wait_drained(0, timeout=5.0)
        self.loop.call_and_wait(self._last_sm, time.monotonic())
        started = time.monotonic()
        while not self._lingered(started):
            time.sleep(0.05)
        self.loop.call_and_wait(self._close_socket)

    def _lingered(self, started: float) -> bool:
        """Closing: receivers had _CLOSE_LINGER since the last SM to ask for a lost tail, those
        still repairing had _NAK_LINGER since their last NAK to ask again for a retransmission
        that was lost too, and those told to ask again later had the time to (at most
        _CLOSE_LINGER_LIMIT in all)."""
        now = time.monotonic()
        quiet = (now - started >= _CLOSE_LINGER and now - self.last_nak >= _NAK_LINGER
                 and now - self.last_refusal >= _REFUSED_LINGER)
        return (quiet and not self.pending and not self.rx_delayed) or now - started >= _CLOSE_LINGER_LIMIT

    def _linger(self, started: float) -> None:
        if not self._lingered(started):
            self.loop.call_later(0.1, self._linger, started)
            return
        self._close_socket()

    def _close_socket(self) -> None:
        if self.sock.fileno() < 0:
            return
        for timer in (getattr(self, "_sm_timer", None), self.rx_pump):
            if timer is not None:
                timer.cancel()
        self.rx_pump = None
        self.loop.remove_reader(self.sock.fileno())
        self.sock.close()
