"""Receivers and wildcard receivers: join the sources topic resolution finds, deliver their data.

A receiver joins, per OTID, the cheapest advertisement it knows (see source_cache). When that
source ends (its transport closes, or a final advertisement arrives) the receiver delivers EOS for
it and joins the next cheapest advertisement of the same OTID, if there is one. An `accept`
callable, if given, is asked first about each advertisement the receiver would join (a router
refuses sources its ACL keeps out, and its own proxy sources, without connecting to them).
"""
from __future__ import annotations

import re
from itertools import repeat
from typing import TYPE_CHECKING, Callable

from router.um.frame_stream import frame_payloads, run_payloads
from router.um.messages import BOS, EOS, UNRECOVERABLE_LOSS, Message, ReceiverEvent, RequestMessage
from router.um.sequence_numbers import MASK, distance
from router.um.source_cache import Candidate
from router.um.wildcard_patterns import compile_wildcard

if TYPE_CHECKING:
    from router.um.context import Context

OnMessage = Callable[[Message | RequestMessage], None]
OnEvent = Callable[[ReceiverEvent], None]
OnBatch = Callable[[list[Message | RequestMessage]], None]
Accept = Callable[[Candidate], bool]


class JoinedSource:
    """One joined source of one receiver; the transport delivers into it."""

    __slots__ = ("receiver", "candidate", "source", "topic", "ended", "raw", "forward", "forward_requests",
                 "forward_sequence_info", "client", "late_join", "late_join_floor", "otr", "_on_message", "_on_batch")

    def __init__(self, receiver: "Receiver", candidate: Candidate):
        self.receiver = receiver
        self.candidate = candidate
        self.source = candidate.source_string
        self.topic = receiver.topic
        self.ended = False
        self.raw = receiver.raw           # a router's proxy receiver: frames, fragments unassembled
        self.forward = None               # where a raw source's frames go (set by the router)
        self.forward_requests = None      # where its frames holding requests go (None: to forward)
        self.forward_sequence_info = None  # where what its TSNIs say goes (the source's last sqn)
        self.client = None                # the transport connection delivering it (pause/resume)
        self.late_join = None             # a LateJoinClient while what came before is fetched
        self.late_join_floor = None       # then: the highest sequence number it delivered
        self.otr = None                   # an OtrRecovery when lost messages can be asked of the source
        self._on_message = receiver.on_message
        self._on_batch = receiver.on_batch

    def on_frames(self, frames: bytes, count: int, longest: int) -> None:
        """A raw (router) source: whole LBMC frames, forwarded as they are."""
        if self.forward is not None:
            self.forward(frames, count, longest)

    def on_request_frames(self, frames: bytes, count: int, longest: int) -> None:
        """A raw source's frames, at least one of them a request (the router stands in for the
        requester: it rewrites them)."""
        forward = self.forward_requests if self.forward_requests is not None else self.forward
        if forward is not None:
            forward(frames, count, longest)

    def on_sequence_info(self, sqn: int) -> None:
        """A raw source's TSNI: the last sequence number it sent, passed on behind its frames."""
        if self.forward_sequence_info is not None:
            self.forward_sequence_info(sqn)

    def on_batch(self, messages: list[tuple]) -> None:
        if self.late_join is not None:    # live messages wait for the retransmitted ones before them
            self.late_join.hold("batch", messages)
            return
        floor = self.late_join_floor
        if floor is not None:
            messages = self._above(messages, floor)
            if not messages:
                return
        otr = self.otr
        if otr is not None and otr.holding:   # behind a loss being recovered: in order after it
            otr.hold(messages)
            return
        self.deliver_live(messages)

    def on_run(self, data: bytes, first: int, count: int, length: int) -> None:
        """`count` DATA frames of `length` bytes at the start of `data`, numbered from `first` (a
        busy stream's steady state): live, they become the application's messages in one pass."""
        otr = self.otr
        if self.late_join is not None or self.late_join_floor is not None or (otr is not None and otr.holding):
            self.on_batch(run_payloads(data, first, count, length))
            return
        # Each Message made in C (tuple.__new__ mapped over zip): no Python step per message, 150
        # ns a 64-byte message against 205 for a list comprehension.
        fields = zip(repeat(self.topic), repeat(self.source), range(first, first + count),
                     frame_payloads(data, count, length))
        self._hand(list(map(tuple.__new__, repeat(Message), fields)))

    def deliver_live(self, messages: list[tuple]) -> None:
        """Live messages ((sqn, payload)) to the application, in one batch."""
        # tuple.__new__ is namedtuple's _make without its Python frame (a quarter less per message).
        topic, source, new = self.topic, self.source, tuple.__new__
        self._hand([new(Message, (topic, source, sqn, payload)) for sqn, payload in messages])

    def _hand(self, messages: list) -> None:
        """The application's messages: one batch to on_batch, else each to on_message."""
        if self._on_batch is not None:
            self._on_batch(messages)
            return
        on_message = self._on_message
        for message in messages:
            on_message(message)

    def _above(self, messages: list[tuple], floor: int) -> list[tuple]:
        """The messages past what late join delivered; the floor goes once one is past it (the
        transport delivers in order)."""
        fresh = [m for m in messages if distance(floor, m[0]) > 0]
        if fresh:
            self.late_join_floor = None
        return fresh

    def on_gap(self, first: int, count: int) -> None:
        """The transport lost `count` messages from sequence number `first` on: recovered off
        the transport if it can be (router.um.otr), else reported lost. While late join fetches,
        in its place among the live messages it holds back; after, what it delivered is no loss."""
        if self.late_join is not None:
            self.late_join.gap(first, count)
            return
        floor = self.late_join_floor
        if floor is not None:
            delivered = distance(first, floor) + 1
            if delivered >= count:
                return
            if delivered > 0:
                first, count = (first + delivered) & MASK, count - delivered
        if self.otr is not None:
            self.otr.gap(first, count)
        else:
            self.report_loss(first, count)

    def report_loss(self, first: int, count: int) -> None:
        self.receiver._loss(self, first, count)

    def deliver_ready(self, messages: list) -> None:
        """Message objects made already (retransmitted, recovered) to the application."""
        if self._on_batch is not None:
            self._on_batch(messages)
            return
        for message in messages:
            self._on_message(message)

    def on_request(self, sqn: int, payload: bytes, origin) -> None:
        if self.late_join is not None:
            self.late_join.hold("request", (sqn, payload, origin))
            return
        if self.otr is not None and self.otr.holding:
            self.otr.hold([(sqn, payload, origin)])
            return
        self.deliver_request(sqn, payload, origin)

    def deliver_request(self, sqn: int, payload: bytes, origin, otr: bool = False) -> None:
        request = RequestMessage(self.topic, self.source, sqn, payload, origin, self.receiver.context, otr)
        if self._on_batch is not None:
            self._on_batch([request])
        else:
            self._on_message(request)

    def on_eos(self) -> None:
        if not self.ended:
            if self.late_join is not None:
                self.late_join.give_up()     # what was fetched and held back comes before the EOS
            if self.otr is not None:
                self.otr.give_up()
            self.ended = True
            self.receiver._source_ended(self)


class Receiver:
    """Receives one topic. Callbacks run on the context's thread."""

    def __init__(self, context: "Context", topic: str, on_message: OnMessage | None,
                 on_event: OnEvent | None = None, query: bool = True, on_batch: OnBatch | None = None,
                 raw: bool = False, accept: Accept | None = None):
        if on_message is None and on_batch is None and not raw:
            raise ValueError("a receiver needs on_message or on_batch")
        self.raw = raw
        self.accept = accept
        self.context = context
        self.topic = topic
        self.on_message = on_message
        self.on_batch = on_batch
        self.on_event = on_event
        self.query = query
        self.joined: dict[bytes, JoinedSource] = {}
        self.closed = False

    # Called by the context on its loop thread.
    def _join(self, candidate: Candidate) -> None:
        if self.closed or candidate.otid in self.joined:
            return
        if self.accept is not None and not self.accept(candidate):
            return           # refused before joining: no connection, nothing read
        joined = JoinedSource(self, candidate)
        if not self.context._attach(candidate, joined):
            return
        self.joined[candidate.otid] = joined
        self._event(BOS, joined.source, joined)

    def _source_ended(self, joined: JoinedSource) -> None:
        if self.joined.get(joined.candidate.otid) is joined:
            del self.joined[joined.candidate.otid]
        self._event(EOS, joined.source, joined)
        self.context._source_ended(self, joined)

    def _end(self, otid: bytes) -> None:
        """End one joined source (its final advertisement arrived): at once, or, on a transport
        that may still be repairing what the source sent last (LBT-RM), once that is done."""
        joined = self.joined.get(otid)
        if joined is None or joined.ended:
            return
        if joined.client is not None:
            joined.client.end_when_repaired(lambda: self._end_now(joined))
        else:
            self._end_now(joined)

    def _end_now(self, joined: JoinedSource) -> None:
        if not joined.ended:
            if joined.late_join is not None:
                joined.late_join.give_up()      # what was fetched and held back comes before the EOS
            if joined.otr is not None:
                joined.otr.give_up()
            self.context._detach(joined)
            joined.on_eos()

    def _event(self, kind: str, source: str, joined: "JoinedSource | None" = None) -> None:
        if self.on_event is not None:
            self.on_event(ReceiverEvent(kind, self.topic, source, joined))

    def _loss(self, joined: JoinedSource, first: int, count: int) -> None:
        self.context.loss_counters["unrecoverable_loss_events"] += 1
        self.context.loss_counters["unrecoverable_loss_messages"] += count
        if self.on_event is not None:
            self.on_event(ReceiverEvent(UNRECOVERABLE_LOSS, self.topic, joined.source, joined, first, count))

    @property
    def sources(self) -> list[str]:
        return [j.source for j in self.joined.values()]

    def close(self) -> None:
        """Stop receiving; other applications and routers in the domain are told we left."""
        if not self.closed:
            self.context._close_receiver(self)


class WildcardReceiver:
    """Receives every topic whose name matches a PCRE or POSIX-extended pattern."""

    def __init__(self, context: "Context", pattern: str, on_message: OnMessage | None,
                 on_event: OnEvent | None = None, kind: str = "pcre", on_batch: OnBatch | None = None,
                 raw: bool = False, accept: Accept | None = None):
        if kind not in ("pcre", "regex"):
            raise ValueError(f"pattern kind must be 'pcre' or 'regex', not {kind!r}")
        try:
            self.compiled = compile_wildcard(pattern)        # as UM matches it (POSIX classes too)
        except re.error as err:
            raise ValueError(f"invalid {kind} pattern {pattern!r}: {err}") from None
        self.context = context
        self.pattern = pattern
        self.kind = kind
        self.on_message = on_message
        self.on_batch = on_batch
        self.on_event = on_event
        self.raw = raw
        self.accept = accept
        self.topics: dict[str, Receiver] = {}
        self.closed = False

    def matches(self, topic: str) -> bool:
        return self.compiled.search(topic) is not None

    def _receiver_for(self, topic: str) -> Receiver:
        receiver = self.topics.get(topic)
        if receiver is None:
            receiver = self.topics[topic] = Receiver(self.context, topic, self.on_message, self.on_event,
                                                     query=False, on_batch=self.on_batch, raw=self.raw,
                                                     accept=self.accept)
        return receiver

    def close(self) -> None:
        if not self.closed:
            self.context._close_wildcard(self)
