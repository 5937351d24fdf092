"""DRO Hotlinks, the receiving side: every path of a source joined, the first copy of each message kept.

Redundant routers whose datacenter-facing endpoints have the same `<hotlink-index>` all forward
every message of a source in that datacenter (router.portals.forwarding), each through a proxy
source of its own. In the receiver's domain one source so has several advertisements with one OTID
(several transports), and every copy keeps the origin's topic sequence numbers. A receiver whose
`use_hotlink` is 1 (`Context.receiver`) joins every advertised path of each OTID, not only the
cheapest, and merges the copies of each OTID as a hot failover receiver merges its sources
(router.um.hot_failover.HfMerge): each number once and in order, the first copy to arrive; a
number missing is waited for until every path has passed it or ended. So a router that dies
costs nothing while another path carries the source. Nothing of this is on the wire: the copies
are ordinary streams, the routers' configuration and this option make it work.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from router.um.hot_failover import HfMerge, MergedReceiver, merge_options
from router.um.messages import BOS, EOS, ReceiverEvent
from router.um.receiver import JoinedSource, OnBatch, OnEvent, OnMessage, Receiver
from router.um.source_cache import Candidate

if TYPE_CHECKING:
    from router.um.context import Context

COUNTED = ("duplicates_discarded", "hold_limit_releases", "loss_check_releases", "loss_events", "messages_lost")


def path_key(candidate: Candidate) -> tuple:
    """One path of one source: its OTID and the transport (and topic index) that carries it."""
    return (candidate.otid, candidate.session_key, candidate.index)


def joined_key(receiver: Receiver, candidate: Candidate):
    """What `receiver.joined` is keyed by for `candidate`'s path."""
    return path_key(candidate) if isinstance(receiver, EveryPathReceiver) else candidate.otid


class EveryPathReceiver(Receiver):
    """A receiver that joins every advertised path of each source (`joined` is keyed by
    path_key), where a plain one joins the cheapest path of each OTID."""

    def _join(self, candidate: Candidate) -> None:
        key = path_key(candidate)
        if self.closed or key in self.joined:
            return
        if self.accept is not None and not self.accept(candidate):
            return
        joined = JoinedSource(self, candidate)
        if not self.context._attach(candidate, joined):
            return
        self.joined[key] = joined
        self._event(BOS, joined.source, joined)

    def _source_ended(self, joined: JoinedSource) -> None:
        key = path_key(joined.candidate)
        if self.joined.get(key) is joined:
            del self.joined[key]
        self._event(EOS, joined.source, joined)
        self.context._source_ended(self, joined)


class HotlinkMerge:
    """The delivery logic of a hotlink receiver: per OTID, an HfMerge of the copies its paths
    bring. Sources of one topic number their messages each on its own, so each OTID is merged
    apart; a path's messages are told by their source string, learnt at its BOS."""

    def __init__(self, topic: str, on_message: OnMessage | None, on_event: OnEvent | None,
                 on_batch: OnBatch | None, hold_limit: int):
        if on_message is None and on_batch is None:
            raise ValueError("a hotlink receiver needs on_message or on_batch")
        self.topic = topic
        self.on_message, self.on_event, self.on_batch = on_message, on_event, on_batch
        self.hold_limit = hold_limit
        self.merges: dict[bytes, HfMerge] = {}
        self.otid_of_path: dict[str, bytes] = {}       # a joined path's source string -> its OTID
        self.ended_counters = dict.fromkeys(COUNTED, 0)     # of the OTIDs whose paths all ended

    @property
    def counters(self) -> dict[str, int]:
        total = dict(self.ended_counters)
        for merge in list(self.merges.values()):
            for name in COUNTED:
                total[name] += merge.counters[name]
        return total

    def on_messages(self, messages) -> None:
        if not messages:
            return
        otid = self.otid_of_path.get(messages[0].source)
        if otid is None:        # not a path's (an immediate message to the topic): as it came
            self._deliver(messages)
            return
        self.merges[otid].on_messages(messages)

    def on_source_event(self, event: ReceiverEvent) -> None:
        otid = event.joined.candidate.otid if event.joined is not None else None
        if event.kind == BOS and otid is not None:
            self.otid_of_path[event.source] = otid
            if otid not in self.merges:
                self.merges[otid] = HfMerge(self.topic, self.on_message, self.on_event, self.on_batch,
                                            False, self.hold_limit)
        merge = self.merges.get(otid)
        if merge is None:
            if self.on_event is not None:
                self.on_event(event)
            return
        last_path = event.kind == EOS and set(merge.positions) <= {event.source}
        if last_path:
            merge.release_held()        # no path is left to fill a gap: what waits goes first
        merge.on_source_event(event)
        if event.kind == EOS:
            self.otid_of_path.pop(event.source, None)
            if last_path:
                del self.merges[otid]
                for name in COUNTED:
                    self.ended_counters[name] += merge.counters[name]

    def check_loss(self) -> None:
        for merge in list(self.merges.values()):
            merge.check_loss()

    def _deliver(self, messages) -> None:
        if self.on_batch is not None:
            self.on_batch(list(messages))
        else:
            for message in messages:
                self.on_message(message)


class HotlinkReceiver(MergedReceiver):
    """A receiver on `topic` with `use_hotlink`: every path joined, copies merged per OTID
    (HotlinkMerge)."""

    def __init__(self, context: "Context", topic: str, on_message: OnMessage | None = None,
                 on_event: OnEvent | None = None, on_batch: OnBatch | None = None):
        _, hold_limit = merge_options(context)
        merge = HotlinkMerge(topic, on_message, on_event, on_batch, hold_limit)
        receiver = EveryPathReceiver(context, topic, None, merge.on_source_event, on_batch=merge.on_messages)
        context._add_receiver(receiver)
        super().__init__(context, topic, merge, receiver)
