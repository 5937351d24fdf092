"""Topic sequence number info (TSNI): an idle transport session says where each topic's stream is.

A receiver sees a lost message when the next one arrives with a later sequence number; the last
messages of a burst (a router dropped them for a receiver that was behind, LBT-RM gave them up)
have no next one. So a source's session that has sent nothing for
`transport_topic_sequence_number_info_interval`, sends, per topic, the sequence number of the last
message it sent (an LBMC CONTROL message with TSNI records; router.um.wire.lbmc_tsni), again each
interval, for `transport_topic_sequence_number_info_active_threshold` seconds after the topic last
sent (0: as long as it lives). A receiver that expected an earlier one reports the rest lost, or
recovers it (router.um.otr).

For a router's proxy source the last message is the last one it was given: the newest it retains,
or the newest it dropped (what a slow receiver missed at the end).
"""
from __future__ import annotations

import time

from router.um.wire.lbmc import LBMC_TYPE_CONTROL, LbmcMessage, encode_lbmc
from router.um.wire.lbmc_tsni import Tsni, tsni_messages

_HALF = 0x80000000


def later(a: int | None, b: int | None) -> int | None:
    """The later of two 32-bit sequence numbers (either may be None)."""
    if a is None:
        return b
    if b is None:
        return a
    return b if (b - a) & 0xFFFFFFFF < _HALF else a


class SequenceInfo:
    """One session's TSNI: the topics on it, and the timer that speaks for them when it is idle."""

    def __init__(self, session, interval: float, active_threshold: float):
        self.session = session
        self.interval = interval
        self.active_threshold = active_threshold
        self.topics: dict[int, object] = {}             # topic index -> its Source
        self.changed: dict[int, tuple[int, float]] = {}  # topic index -> (last sqn, when first seen)
        self.batches_seen = -1
        self.timer = None

    def add(self, tidx: int, source) -> None:
        self.topics[tidx] = source
        if self.timer is None:
            self.timer = self.session.loop.call_every(self.interval, self.tick)

    def remove(self, tidx: int) -> None:
        self.topics.pop(tidx, None)
        self.changed.pop(tidx, None)
        # The index may be given to a new source (a router's proxy source keeps its origin's, and a
        # restarted origin starts again from 0): the tail dropped of this one is not its.
        self.session.dropped_last.pop(tidx, None)
        if not self.topics and self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def tick(self) -> None:
        session = self.session
        if session.closed:
            self.remove_all()
            return
        if not session.lock.acquire(blocking=False):
            return      # a sending thread has it (data flowing, or waiting for a slow receiver)
        try:
            batches = session.counters["batches"]
            busy = batches != self.batches_seen or bool(session.batch)
            self.batches_seen = batches
            if busy or session.queued_bytes():
                # Data flowing: the next message shows any gap. Data waiting (a receiver behind):
                # the TSNI would wait (or, for a router, be dropped) behind it; the next tick after
                # it drained says it.
                return
            records = self.records(time.monotonic())
            for group in tsni_messages(records):
                session.send_control(encode_lbmc(LbmcMessage(LBMC_TYPE_CONTROL, [Tsni(group)])))
                session.counters["tsni_sent"] += 1
        finally:
            session.lock.release()

    def records(self, now: float) -> list[tuple[int, int]]:
        """(topic index, last sequence number) of each topic still within the active threshold."""
        records = []
        dropped = self.session.dropped_last
        for tidx, source in self.topics.items():
            last = later(source.last_sequence_number(), dropped.get(tidx))
            if last is None:
                continue
            seen = self.changed.get(tidx)
            if seen is None or seen[0] != last:
                seen = self.changed[tidx] = (last, now)
            if self.active_threshold and now - seen[1] > self.active_threshold:
                continue
            records.append((tidx, last))
        return records

    def remove_all(self) -> None:
        for tidx in list(self.topics):
            self.remove(tidx)
