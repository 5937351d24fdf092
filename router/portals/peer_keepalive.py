"""DRO keepalives on a peer link: when to send a query, RTT from responses, when the link is dead.

`<gateway-keepalive interval timeout idle>` (spec/dro.md §1.6, §2.4). A query (TNWG_KA 0x4F,
flag Q) carries an index and our send time; the companion answers at once with a response (flag
R) echoing both, so the RTT is measured on our own clock only. The timestamp is monotonic time
(seconds + microseconds): it never leaves this process's meaning, so a wall-clock step cannot
make an RTT negative.

Liveness is "nothing received for ``timeout``": any message counts, not only keepalives.

``idle = yes`` is read as: skip the keepalive while the link carried traffic in *both*
directions during the last interval. The literal "no traffic sent/received" reading lets a
router that only sends data (and so never sends a keepalive) time the link out, because its
companion, which only receives, would not send either; querying whenever one direction was idle
keeps the link alive at the cost of a few bytes. ``interval = 0`` disables keepalives and, with
them, the silence timeout (an idle link would otherwise be dropped for being quiet).
"""
from __future__ import annotations

import time
from typing import Callable

from router.um.wire.lbmc import KA_QUERY, KA_RESPONSE, LBMC_TYPE_CONTROL, LbmcMessage, TnwgKeepalive

_NS_PER_MS = 1_000_000
_NS_PER_US = 1_000
MAX_PLAUSIBLE_RTT_US = 3_600_000_000       # a "response" claiming more than an hour is not ours


class KeepaliveMonitor:
    """Keepalive timing and RTT statistics of one peer link (the counters outlive connections)."""

    def __init__(self, interval_ms: int, timeout_ms: int, idle: bool, counters,
                 clock_ns: Callable[[], int] = time.monotonic_ns,
                 wall_clock: Callable[[], float] = time.time):
        self.interval_ns = interval_ms * _NS_PER_MS
        self.timeout_ns = timeout_ms * _NS_PER_MS
        self.idle = idle
        self.counters = counters
        self._clock_ns = clock_ns
        self._wall_clock = wall_clock
        self._index = 0
        # Counters may outlive this object (shared memory across a worker restart): resume the sum
        # itself. The running mean is whole µs: mean × samples would take the total back by up to
        # a µs per sample, which a reader of the cumulative rtt_sum_us takes for a counter reset.
        self._rtt_sum_us = counters.get("rtt_sum_us")
        self.reset()

    @property
    def enabled(self) -> bool:
        return self.interval_ns > 0

    def reset(self) -> None:
        """A new connection: everything is fresh as of now."""
        now = self._clock_ns()
        self.last_received_ns = self.last_sent_ns = self.last_query_ns = now

    # -- traffic --------------------------------------------------------------------------------
    def note_received(self) -> None:
        self.last_received_ns = self._clock_ns()

    def note_sent(self) -> None:
        self.last_sent_ns = self._clock_ns()

    # -- decisions ------------------------------------------------------------------------------
    def query_due(self) -> bool:
        if not self.enabled:
            return False
        now = self._clock_ns()
        if now - self.last_query_ns < self.interval_ns:
            return False
        if not self.idle:
            return True
        return now - self.last_received_ns >= self.interval_ns or now - self.last_sent_ns >= self.interval_ns

    def silent_ms(self) -> float:
        return (self._clock_ns() - self.last_received_ns) / _NS_PER_MS

    def is_dead(self) -> bool:
        """Nothing received for ``timeout``: the caller drops the connection."""
        return self.enabled and self._clock_ns() - self.last_received_ns >= self.timeout_ns

    def check_interval_s(self) -> float:
        """How often the owner should ask query_due()/is_dead(): fine enough for both."""
        if not self.enabled:
            return 1.0
        return max(0.005, min(self.interval_ns, self.timeout_ns) / 10 / 1e9)

    # -- messages -------------------------------------------------------------------------------
    def make_query(self) -> LbmcMessage:
        now = self._clock_ns()
        self.last_query_ns = now
        self._index = (self._index + 1) & 0xFFFF_FFFF
        micros = now // _NS_PER_US
        header = TnwgKeepalive(flags=KA_QUERY, idx=self._index, ts_seconds=micros // 1_000_000,
                               ts_microseconds=micros % 1_000_000)
        return LbmcMessage(LBMC_TYPE_CONTROL, [header])

    @staticmethod
    def make_response(query: TnwgKeepalive) -> LbmcMessage:
        header = TnwgKeepalive(flags=KA_RESPONSE, idx=query.idx, ts_seconds=query.ts_seconds,
                               ts_microseconds=query.ts_microseconds)
        return LbmcMessage(LBMC_TYPE_CONTROL, [header])

    def on_response(self, response: TnwgKeepalive) -> int | None:
        """Record the RTT sample a response gives; returns it in µs, None if implausible."""
        sent_us = response.ts_seconds * 1_000_000 + response.ts_microseconds
        rtt_us = self._clock_ns() // _NS_PER_US - sent_us
        if not 0 <= rtt_us <= MAX_PLAUSIBLE_RTT_US:
            return None
        counters = self.counters
        samples = counters.get("rtt_samples") + 1
        self._rtt_sum_us += rtt_us
        counters.set("rtt_samples", samples)
        counters.set("rtt_min", rtt_us if samples == 1 else min(rtt_us, counters.get("rtt_min")))
        counters.set_max("rtt_max", rtt_us)
        counters.set("rtt_mean", self._rtt_sum_us // samples)
        counters.set("rtt_sum_us", self._rtt_sum_us)
        counters.set("last_ka_time", int(self._wall_clock()))      # seconds since the epoch
        return rtt_us


def keepalive_header(message: LbmcMessage) -> TnwgKeepalive | None:
    """The TNWG_KA header of a keepalive message, None for any other message."""
    if message.msg_type == LBMC_TYPE_CONTROL and len(message.headers) == 1 \
            and isinstance(message.headers[0], TnwgKeepalive):
        return message.headers[0]
    return None
