"""Hot Failover (UM's HF): sources that number their own messages, receivers that merge copies.

An HF source (`Context.hf_source`, UM's lbm_hf_src_create) sends each message with the 32-bit
sequence number its application gives (lbm_hf_src_send). The number is the frame's LBMC topic
sequence number: no header of its own, so TSNIs, late-join retention, OTR and routers treat it as
any source's. Numbers must increase (on the 32-bit circle); the application may skip some. A
message larger than a datagram is fragmented and its fragments take the numbers after the one
given, as UM numbers any source's fragments: the application leaves those free (the next number
it may give is `next_sequence_number`).

An HF receiver (`Context.hf_receiver`, UM's lbm_hf_rcv_create) joins every source of its topic
and delivers each number once, in order: the first copy to arrive. Later copies are discarded and
counted, or with `hf_duplicate_delivery` delivered flagged (HfDuplicateMessage). A number missing
from what arrived is waited for until every source joined on the topic has passed it (sent a
later one, or its transport declared it lost) or ended; then, if one of them declared it lost, the
run of missing numbers is one UNRECOVERABLE_LOSS event; if none did, the numbers were never sent
(the later fragments of a large message). A transport cannot tell a skipped number from a lost
one, so a number every source skipped is reported lost. At most
`delivery_control_maximum_total_map_entries` messages wait: past that the oldest gap is given up
(and reported lost), so a stalled source cannot hold the topic back. That bound counts messages: on
a quiet topic a source that has stopped (not ended: its connection still open) would hold a gap for
as long as it stays stopped, so with `delivery_control_loss_check_interval` (ms, UM's, default 0:
off) a gap that has not moved since the previous check is given up at the next.

An HF wildcard receiver (`Context.hf_wildcard_receiver`, UM's lbm_hf_wildcard_rcv_create) merges
each topic its pattern matches the same way, each on its own. An HFX receiver (HfxReceiver, UM's
lbm_hfx_create with an lbm_hfx_rcv_create per context) merges one topic across several contexts,
each on a network or domain of its own.
"""
from __future__ import annotations

import heapq
import threading
from typing import TYPE_CHECKING

from router.um.messages import BOS, EOS, UNRECOVERABLE_LOSS, HfDuplicateMessage, ReceiverEvent, RequestMessage
from router.um.receiver import OnBatch, OnEvent, OnMessage
from router.um.sequence_numbers import MASK, distance
from router.um.source import Source

if TYPE_CHECKING:
    from router.um.context import Context


_NOTHING_YET = float("-inf")


class HfSource(Source):
    """A source whose application numbers its messages (lbm_hf_src_send)."""

    def send(self, data, sequence_number: int, flush: bool = False) -> None:   # type: ignore[override]
        """Send `data` as number `sequence_number`, which must be past the last one sent
        (fragments of a large message take the numbers after it). ValueError if it is not."""
        if self.closed:
            raise RuntimeError(f"source for topic {self.topic!r} is closed")
        if not 0 <= sequence_number <= MASK:
            raise ValueError(f"hot failover sequence number {sequence_number} is not a 32-bit number")
        if self.sent_any and distance(self.sequence_number, sequence_number) < 0:
            last = (self.sequence_number - 1) & MASK
            raise ValueError(f"hot failover sequence number {sequence_number} does not increase: "
                             f"{last} was sent last on topic {self.topic!r}")
        self.sequence_number = self.session.send(self.index, sequence_number, data, flush)
        self.sent_any = True

    @property
    def next_sequence_number(self) -> int | None:
        """The lowest number the next message may have (None before the first)."""
        return self.sequence_number if self.sent_any else None

    def send_many(self, messages) -> None:
        raise TypeError("an HF source sends each message with its number: send(data, sequence_number)")

    def send_with_properties(self, data, properties, flush: bool = False) -> None:
        raise TypeError("an HF source sends each message with its number: send(data, sequence_number)")

    def send_request(self, data, on_response=None):
        raise TypeError("an HF source does not send requests")


class HfMerge:
    """The delivery logic of an HF receiver: copies from every joined source in, each number once
    and in order out. Numbers are kept unwrapped (past 2^32 they go on counting) so that the
    held messages can be ordered; what is delivered keeps its 32-bit number."""

    def __init__(self, topic: str, on_message: OnMessage | None, on_event: OnEvent | None,
                 on_batch: OnBatch | None, duplicate_delivery: bool, hold_limit: int):
        if on_message is None and on_batch is None:
            raise ValueError("an HF receiver needs on_message or on_batch")
        self.topic = topic
        self.on_message = on_message
        self.on_event = on_event
        self.on_batch = on_batch
        self.duplicate_delivery = duplicate_delivery
        self.hold_limit = hold_limit            # 0: no limit
        self.next: int | None = None            # unwrapped: the number to deliver next
        self.held: dict[int, object] = {}       # unwrapped number -> the first copy, waiting
        self.held_order: list[int] = []         # a heap of the held numbers
        # Per joined source: the last number it delivered or declared lost (-inf until its first:
        # a source just joined is waited for, its copy of a gap may be on the way).
        self.positions: dict[str, float] = {}
        self.declared_lost: list[tuple[int, int]] = []   # unwrapped [first, end) some source gave up
        self.counters = {"duplicates_discarded": 0, "duplicates_delivered": 0, "hold_limit_releases": 0,
                         "loss_check_releases": 0, "loss_events": 0, "messages_lost": 0}
        self._out: list = []
        self._waited_at: int | None = None      # the number a gap held at the previous loss check

    # -- in ------------------------------------------------------------------------------------
    def on_messages(self, messages) -> None:
        if self.next is None and messages:
            self.next = _serial_lowest(message.sequence_number for message in messages)
        for message in messages:
            self._arrive(message)
        self._advance()
        self._flush()

    def on_source_event(self, event: ReceiverEvent) -> None:
        if event.kind == UNRECOVERABLE_LOSS:
            if self.next is not None:
                first = self._unwrap(event.sequence_number)
                end = first + event.count
                self._passed(event.source, end - 1)
                if end > self.next:    # what the other sources filled meanwhile is no longer kept
                    self.declared_lost = [lost for lost in self.declared_lost if lost[1] > self.next]
                    self.declared_lost.append((max(first, self.next), end))
            self._advance()
        else:
            if event.kind == BOS:
                self.positions.setdefault(event.source, _NOTHING_YET)
            elif event.kind == EOS:
                self.positions.pop(event.source, None)  # no longer waited for
            self._flush()
            self._emit(event)
            if event.kind == EOS:
                self._advance()
        self._flush()

    # -- the merge -----------------------------------------------------------------------------
    def _unwrap(self, sqn: int) -> int:
        return self.next + distance(self.next & MASK, sqn)

    def _passed(self, source: str, number: int) -> None:
        position = self.positions.get(source)
        if position is None or number > position:
            self.positions[source] = number

    def _arrive(self, message) -> None:
        number = self._unwrap(message.sequence_number)
        self._passed(message.source, number)
        if number < self.next or number in self.held:
            self._duplicate(message)
        elif number == self.next:
            self._out.append(message)
            self.next += 1
        else:
            self.held[number] = message
            heapq.heappush(self.held_order, number)

    def _duplicate(self, message) -> None:
        if self.duplicate_delivery and not isinstance(message, RequestMessage):    # answered once
            self._out.append(HfDuplicateMessage(message.topic, message.source, message.sequence_number,
                                                message.data))
            self.counters["duplicates_delivered"] += 1
        else:
            self.counters["duplicates_discarded"] += 1

    def _advance(self) -> None:
        """Deliver what is in order; give up the numbers every source has passed; past the hold
        limit, give up the oldest gap."""
        held = self.held
        while held:
            lowest = self.held_order[0]
            if lowest == self.next:
                heapq.heappop(self.held_order)
                self._out.append(held.pop(lowest))
                self.next += 1
            elif self._all_passed(self.next):
                self._gone(min(lowest, min(self.positions.values()) + 1))
            elif self.hold_limit and len(held) > self.hold_limit:
                self.counters["hold_limit_releases"] += 1
                self._gone(lowest, forced=True)
            else:
                return
        if self.next is not None and self._all_passed(self.next):   # a lost tail, nothing after it yet
            self._gone(min(self.positions.values()) + 1)

    def check_loss(self) -> None:
        """A periodic loss check: a gap that held delivery at the previous check and still does
        is given up (its source stopped, or lost it without telling yet), and what waited goes."""
        waiting = self.next if self.held else None
        if waiting is not None and waiting == self._waited_at:
            self.counters["loss_check_releases"] += 1
            self._gone(self.held_order[0], forced=True)
            self._advance()
            self._flush()
            waiting = None
        self._waited_at = waiting

    def release_held(self) -> None:
        """No source is left to fill a gap (the last one is ending): what waits is delivered in
        order, each gap before it reported lost."""
        while self.held:
            self._gone(self.held_order[0], forced=True)
            self._advance()
        self._flush()

    def _all_passed(self, number: int) -> bool:
        positions = self.positions.values()
        return bool(positions) and all(position >= number for position in positions)

    def _gone(self, end: int, forced: bool = False) -> None:
        """Numbers next..end-1 will not come: one loss event if a source lost one of them (or the
        hold limit gave them up), nothing if none did (no source sent them)."""
        first = self.next
        lost = forced or any(start < end and first < stop for start, stop in self.declared_lost)
        self.declared_lost = [(max(start, end), stop) for start, stop in self.declared_lost if stop > end]
        self.next = end
        if lost:
            self.counters["loss_events"] += 1
            self.counters["messages_lost"] += end - first
            self._flush()
            self._emit(ReceiverEvent(UNRECOVERABLE_LOSS, self.topic, "", None, first & MASK, end - first))

    # -- out -----------------------------------------------------------------------------------
    def _flush(self) -> None:
        out = self._out
        if not out:
            return
        self._out = []
        if self.on_batch is not None:
            self.on_batch(out)
        else:
            for message in out:
                self.on_message(message)

    def _emit(self, event: ReceiverEvent) -> None:
        if self.on_event is not None:
            self.on_event(event)


def _serial_lowest(numbers) -> int:
    """The earliest of 32-bit `numbers` on the circle (the run starts at the lowest first seen)."""
    numbers = iter(numbers)
    lowest = next(numbers)
    for number in numbers:
        if distance(lowest, number) < 0:
            lowest = number
    return lowest


class MergedReceiver:
    """A receiver whose messages go through a merge of copies (an HfMerge, or a hotlink
    receiver's merge per OTID); `counters` says what the merge did."""

    def __init__(self, context: "Context", topic: str, merge, receiver):
        self.merge = merge
        self.receiver = receiver
        self.context = context
        self.topic = topic
        self._loss_check = _every_loss_check(context, merge.check_loss)

    @property
    def counters(self) -> dict[str, int]:
        return dict(self.merge.counters)

    @property
    def sources(self) -> list[str]:
        return self.receiver.sources

    def close(self) -> None:
        if self._loss_check is not None:
            self._loss_check.cancel()
        self.receiver.close()


class HfReceiver(MergedReceiver):
    """A receiver on `topic` whose sources are merged (HfMerge)."""

    def __init__(self, context: "Context", topic: str, on_message: OnMessage | None = None,
                 on_event: OnEvent | None = None, on_batch: OnBatch | None = None):
        merge = HfMerge(topic, on_message, on_event, on_batch, *merge_options(context))
        super().__init__(context, topic, merge, context.receiver(topic, on_event=merge.on_source_event,
                                                                 on_batch=merge.on_messages))


class HfxReceiver:
    """Hot failover across contexts (UM's HFX): one topic received in each of several contexts
    (each on a network, an interface or a domain of its own) and merged as one HF receiver merges
    its sources, so a failed network, interface or router costs nothing while another path carries
    the stream. `add_context` (lbm_hfx_rcv_create) and `remove_context` (lbm_hfx_rcv_delete)
    change the contexts as it runs. Each context's receiver runs on that context's loop: the merge
    takes a lock, so the application's callbacks come one at a time. Duplicate delivery and the
    hold limit are the first context's receiver options, and its loop runs the loss check. Copies
    are told apart by their source strings: two contexts joined to the very same transport count as
    one source of copies (put each context on its own path)."""

    def __init__(self, contexts, topic: str, on_message: OnMessage | None = None, on_event: OnEvent | None = None,
                 *, on_batch: OnBatch | None = None):
        contexts = list(contexts)
        if not contexts:
            raise ValueError("an HFX receiver needs at least one context")
        self.topic = topic
        self.merge = HfMerge(topic, on_message, on_event, on_batch, *merge_options(contexts[0]))
        self._lock = threading.Lock()
        self.receivers: dict[int, tuple["Context", object]] = {}      # id(context) -> (context, receiver)
        self._loss_check = _every_loss_check(contexts[0], self._check_loss)
        for context in contexts:
            self.add_context(context)

    def add_context(self, context: "Context") -> None:
        if id(context) in self.receivers:
            raise ValueError(f"context {context.name} already receives {self.topic} for this HFX receiver")
        # A plain receiver: Hotlinks do not mix with hot failover (spec/dro.md).
        receiver = context.receiver(self.topic, on_event=self._event, on_batch=self._batch, use_hotlink=False)
        self.receivers[id(context)] = (context, receiver)

    def remove_context(self, context: "Context") -> None:
        _, receiver = self.receivers.pop(id(context))
        receiver.close()

    def _batch(self, messages) -> None:
        with self._lock:
            self.merge.on_messages(messages)

    def _event(self, event: ReceiverEvent) -> None:
        with self._lock:
            self.merge.on_source_event(event)

    def _check_loss(self) -> None:
        with self._lock:
            self.merge.check_loss()

    @property
    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self.merge.counters)

    @property
    def sources(self) -> list[str]:
        return [source for _, receiver in self.receivers.values() for source in receiver.sources]

    def close(self) -> None:
        if self._loss_check is not None:
            self._loss_check.cancel()
        for _, receiver in list(self.receivers.values()):
            receiver.close()
        self.receivers.clear()


class HfWildcardReceiver:
    """A wildcard receiver whose every matching topic's sources are merged (an HfMerge a topic);
    `counters` adds up what they did."""

    def __init__(self, context: "Context", pattern: str, on_message: OnMessage | None = None,
                 on_event: OnEvent | None = None, kind: str = "pcre", on_batch: OnBatch | None = None):
        if on_message is None and on_batch is None:
            raise ValueError("an HF receiver needs on_message or on_batch")
        self.callbacks = (on_message, on_event, on_batch)
        self.options = merge_options(context)
        self.merges: dict[str, HfMerge] = {}
        # Each matching topic has a receiver of its own: a batch, an event is one topic's.
        self.wildcard = context.wildcard_receiver(pattern, on_event=self._event, kind=kind, on_batch=self._batch)
        self.context = context
        self.pattern = pattern
        self._loss_check = _every_loss_check(context, self._check_loss)

    def _merge(self, topic: str) -> HfMerge:
        merge = self.merges.get(topic)
        if merge is None:
            merge = self.merges[topic] = HfMerge(topic, *self.callbacks, *self.options)
        return merge

    def _batch(self, messages) -> None:
        if messages:
            self._merge(messages[0].topic).on_messages(messages)

    def _event(self, event: ReceiverEvent) -> None:
        self._merge(event.topic).on_source_event(event)

    def _check_loss(self) -> None:
        for merge in list(self.merges.values()):
            merge.check_loss()

    @property
    def counters(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for merge in list(self.merges.values()):
            for name, value in merge.counters.items():
                total[name] = total.get(name, 0) + value
        return total

    def close(self) -> None:
        if self._loss_check is not None:
            self._loss_check.cancel()
        self.wildcard.close()


def merge_options(context: "Context") -> tuple[bool, int]:
    """HfMerge's duplicate_delivery and hold_limit, from the context's receiver options."""
    config = context.config
    return (config.get("receiver", "hf_duplicate_delivery"),
            config.get("receiver", "delivery_control_maximum_total_map_entries"))


def _every_loss_check(context: "Context", check):
    """`check` every delivery_control_loss_check_interval on the context's loop (None: off)."""
    interval = context.config.get("receiver", "delivery_control_loss_check_interval")
    return context._call(context.loop.call_every, interval / 1000, check) if interval else None
