"""Delivery statistics for the example receivers: loss, duplicates, reordering, rate, latency.

The JSON summary this produces is how tests and benchmarks see delivery (DESIGN.md §4).
"""
from __future__ import annotations

import time
from array import array
from operator import attrgetter

import numpy as np

from router.cli.payload import HEADER
from router.um.frame_runs import strided_column
from router.um.messages import UNRECOVERABLE_LOSS

_unpack = HEADER.unpack_from
_MAX_LATENCY_SAMPLES = 5_000_000
# A jump longer than this is counted, not listed number by number: a payload that umsrc did not
# make can say any sequence number, and a set of billions of missing ones would take all memory.
_MAX_LISTED_GAP = 1_000_000
# From this many messages a batch is first tried as one in-line run (_in_line_batch): below it
# numpy's set-up (some 10 µs a batch) costs more than the loop saves (measured: even near 70).
_WHOLE_BATCH_RUN = 64
_SEQUENCE_LIMIT = 1 << 64               # payload sequence numbers are 64-bit
_data = attrgetter("data")
_topic = attrgetter("topic")


class _PerSource:
    __slots__ = ("received", "unique", "duplicates", "out_of_order", "next_expected", "missing",
                 "missing_unlisted", "first_seq", "last_seq", "topics", "gap_events")

    def __init__(self, seq: int):
        self.received = self.unique = self.duplicates = self.out_of_order = self.gap_events = 0
        self.next_expected = seq
        self.first_seq = seq
        self.last_seq = seq
        self.missing: set[int] = set()
        self.missing_unlisted = 0               # in jumps too long to list (never filled later)
        self.topics: set[str] = set()


class ReceiveStats:
    def __init__(self):
        self.sources: dict[int, _PerSource] = {}
        self.received = 0
        self.retransmitted = 0                  # late-join retransmissions among them
        self.otr_recovered = 0                  # and messages recovered off the transport (OTR)
        self.unrecoverable = 0                  # messages the receiver was told are lost for good
        self.malformed = 0
        self.eos = 0
        self.bos = 0
        self.first_time: float | None = None
        self.last_time: float | None = None
        # An array, not a list: the garbage collector walks every item of a list at each full
        # collection, and a receiver keeps millions of these.
        self.latencies_ns = array("q")
        self.um_sources: set[str] = set()

    def on_message(self, message) -> None:
        self.on_batch((message,))

    def on_batch(self, messages) -> None:
        """Account for messages that arrived together (one clock reading for the batch)."""
        now_ns = time.time_ns()
        if self.first_time is None:
            self.first_time = now_ns
        self.last_time = now_ns
        sources = self.sources
        latencies = self.latencies_ns
        sample = len(latencies) < _MAX_LATENCY_SAMPLES
        if len(messages) >= _WHOLE_BATCH_RUN and self._in_line_batch(messages, now_ns, sample):
            self._count_received(messages)
            return
        # A run of one source's messages in sequence is followed in locals (the common case; a
        # receiver's cost per message is what the benchmarks compare), its state written back
        # when the run ends.
        state = run_topic = None
        run_id = expected = run_count = -1
        for message in messages:
            data = message.data
            if len(data) < 20:
                self.malformed += 1
                continue
            source_id, seq, sent_ns = _unpack(data)
            if sample:
                latencies.append(now_ns - sent_ns)
            if source_id == run_id and seq == expected and message.topic is run_topic:
                expected += 1
                run_count += 1
                continue
            if state is not None:
                self._end_run(state, expected, run_count)
            state = sources.get(source_id)
            if state is None:
                state = sources[source_id] = _PerSource(seq)
                self.um_sources.add(message.source)
            state.received += 1
            run_count = 0
            if seq == state.next_expected:      # in line: a run may follow it
                state.unique += 1
                state.next_expected = expected = seq + 1
                state.last_seq = seq
                run_id = source_id
            else:
                self._out_of_line(state, seq)
                run_id = -1
            run_topic = message.topic
            if run_topic not in state.topics:
                state.topics.add(run_topic)
        if state is not None:
            self._end_run(state, expected, run_count)
        self._count_received(messages)

    def _in_line_batch(self, messages, now_ns: int, sample: bool) -> bool:
        """Account for a whole batch at once if it is one known source's messages on one topic,
        each the next expected, all of one length (a busy stream's reads, of tens to thousands of
        messages); False, with nothing counted, for any other batch (the loop takes it). numpy
        reads the payload headers as columns: 90 ns a 64-byte message in a batch of a thousand,
        against 280 in the loop."""
        payloads = list(map(_data, messages))
        lengths = set(map(len, payloads))
        topics = set(map(_topic, messages))
        if len(lengths) != 1 or len(topics) != 1:
            return False
        (length,), (topic,) = lengths, topics
        if length < HEADER.size:
            return False
        count, joined = len(payloads), b"".join(payloads)
        source_id = int.from_bytes(joined[:4], "big")
        state = self.sources.get(source_id)
        if state is None or state.next_expected + count > _SEQUENCE_LIMIT:
            return False
        first = state.next_expected
        source_ids = strided_column(joined, 0, count, length, ">u4")
        sequence_numbers = strided_column(joined, 4, count, length, ">u8")
        # Signed: a send time past 2^63 (umsrc makes none) is left to the loop, as any other oddity.
        sent_ns = strided_column(joined, 12, count, length, ">i8")
        # count_nonzero and min, not .all(): half numpy's set-up per call, which is what a batch of
        # a hundred messages pays most for here.
        if (np.count_nonzero(source_ids != source_id) or sent_ns.min() < 0 or
                np.count_nonzero(sequence_numbers != np.arange(first, first + count, dtype=np.uint64))):
            return False
        if sample:
            self.latencies_ns.frombytes(np.subtract(now_ns, sent_ns, dtype=np.int64).tobytes())
        state.received += count
        state.unique += count
        state.next_expected = first + count
        state.last_seq = first + count - 1
        state.topics.add(topic)
        return True

    def _count_received(self, messages) -> None:
        self.received += len(messages)
        # Late-join retransmissions and OTR-recovered messages come in batches of their own
        # (router.um.late_join, router.um.otr).
        if messages:
            if getattr(messages[0], "retransmit", False):
                self.retransmitted += len(messages)
            elif getattr(messages[0], "otr", False):
                self.otr_recovered += len(messages)

    @staticmethod
    def _end_run(state: "_PerSource", expected: int, count: int) -> None:
        """`count` messages after the one `state` last took, each the next expected (a topic
        string is one object for a subscription's messages, so `is` compares it)."""
        if count > 0:
            state.received += count
            state.unique += count
            state.next_expected = expected
            state.last_seq = expected - 1

    @staticmethod
    def _out_of_line(state: "_PerSource", seq: int) -> None:
        expected = state.next_expected
        if seq > expected:
            state.unique += 1
            state.gap_events += 1
            if seq - expected > _MAX_LISTED_GAP:
                state.missing_unlisted += seq - expected
            else:
                state.missing.update(range(expected, seq))
            state.next_expected = seq + 1
            state.last_seq = seq
        elif seq in state.missing:
            state.missing.discard(seq)
            state.unique += 1
            state.out_of_order += 1
        else:
            state.duplicates += 1

    def on_event(self, event) -> None:
        if event.kind == UNRECOVERABLE_LOSS:
            self.unrecoverable += event.count
        elif event.kind == "EOS":
            self.eos += 1
        elif event.kind == "BOS":
            self.bos += 1
            self.um_sources.add(event.source)

    @property
    def unique(self) -> int:
        return sum(s.unique for s in self.sources.values())

    def summary(self) -> dict:
        latencies = np.frombuffer(self.latencies_ns, dtype=np.int64) / 1000.0
        elapsed = ((self.last_time or 0) - (self.first_time or 0)) / 1e9
        rate = (self.received - 1) / elapsed if elapsed > 0 and self.received > 1 else 0.0
        per_source = {
            f"{source_id:08x}": {"received": s.received, "unique": s.unique, "duplicates": s.duplicates,
                                 "gaps": len(s.missing) + s.missing_unlisted, "gap_events": s.gap_events,
                                 "out_of_order": s.out_of_order, "first_seq": s.first_seq,
                                 "last_seq": s.last_seq, "topics": sorted(s.topics)}
            for source_id, s in self.sources.items()}
        return {
            "received": self.received,
            "retransmitted": self.retransmitted,
            "otr_recovered": self.otr_recovered,
            "unrecoverable_loss": self.unrecoverable,
            "unique": self.unique,
            "duplicates": sum(s.duplicates for s in self.sources.values()),
            "gaps": sum(len(s.missing) + s.missing_unlisted for s in self.sources.values()),
            "out_of_order": sum(s.out_of_order for s in self.sources.values()),
            "malformed": self.malformed,
            "rate_msgs_per_s": round(rate, 1),
            "latency_us": {
                "p50": round(float(np.percentile(latencies, 50)), 1) if latencies.size else None,
                "p99": round(float(np.percentile(latencies, 99)), 1) if latencies.size else None,
                "max": round(float(latencies.max()), 1) if latencies.size else None,
            },
            "per_source": per_source,
            "um_sources": sorted(self.um_sources),
            "bos": self.bos,
            "eos": self.eos,
        }
