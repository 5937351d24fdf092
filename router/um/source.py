"""Sources: a topic, a topic index on a transport session, and what its advertisements say.

`send()` may be called from any thread; messages are batched by the session. What a source
advertises (transport info, OTID, and for a router's proxy sources also cost, hop count and
originating domain) is built here once and refreshed only when something changes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from router.um.requests import PendingRequest, RequestOrigin, Response
from router.um.sequence_info import later
from router.um.source_cache import source_string
from router.um.wire.lbmc_properties import encode_properties
from router.um.wire.lbmr import COST_INFINITE, CostOption, DomainIdOption, LateJoinOption, OtidOption, Tir

if TYPE_CHECKING:
    from router.um.context import Context


class Source:
    def __init__(self, context: "Context", topic: str, session, index: int, *,
                 otid: bytes | None = None, cost: int | None = None, hop_count: int = 0,
                 domain_id: int | None = None, final_advertisements: int = 0):
        self.context = context
        self.topic = topic
        self.session = session
        self.index = index
        self.sequence_number = 0         # the next frame's (topic sequence numbers wrap at 2^32)
        self.sent_any = False            # whether a frame has been sent: after 2^32 of them the next is 0 again
        self.closed = False
        self.final_advertisements = final_advertisements
        self.transport_info = session.advertised_info()
        self.otid = otid if otid is not None else session.otid(index, context.context_id)
        self.cost = cost
        self.hop_count = hop_count
        self.domain_id = domain_id
        self.late_join = None            # (request port address, transport index, Retention) if offered
        # A router's proxy source: the last sequence number the origin's own TSNIs told (passed
        # on by the router, behind the frames they follow). What the way here dropped at the
        # end of a burst, its TSNIs tell the receivers too.
        self.upstream_last: int | None = None
        self.tir = self._build_tir(cost)

    def _build_tir(self, cost: int | None) -> Tir:
        options: list = []
        if cost is not None:
            options.append(CostOption(self.hop_count, cost))
        options.append(OtidOption(self.otid))
        if self.domain_id is not None:
            options.append(DomainIdOption(self.domain_id))
        return Tir(self.topic, self.transport_info, self.index, 0, options)

    def current_tir(self) -> Tir:
        """The TIR to send now: a late-join source's says what it retains at this moment."""
        if self.late_join is None:
            return self.tir
        (ip, port), transport_idx, retention = self.late_join
        # Low above high: nothing retained yet, or (None: a router relays requests to the origin)
        # not known here; receivers ask (LJI_REQ) in any case.
        low, high = (retention.bounds() if retention is not None else None) or (1, 0)
        tir = self.tir
        option = LateJoinOption(src_tcp_port=port, src_ip=ip, transport_idx=transport_idx, high_seqnum=high,
                                low_seqnum=low)
        return Tir(tir.topic, tir.transport, tir.index, tir.ttl, [*tir.options, option])

    def final_tir(self) -> Tir:
        """A final advertisement: the same TIR with cost 0xFFFFFFFF (receivers end it at once)."""
        tir = self._build_tir(COST_INFINITE)
        return tir

    def set_cost(self, cost: int, hop_count: int | None = None) -> None:
        """Advertise a new cost from now on (a router's proxy source after a cost change)."""
        self.cost = cost
        if hop_count is not None:
            self.hop_count = hop_count
        self.tir = self._build_tir(cost)
        self.context._readvertise(self)

    @property
    def source_string(self) -> str:
        return source_string(self.transport_info, self.index)

    @property
    def receiver_count(self) -> int | None:
        """Receivers joined (connection-oriented transports); None for a multicast transport,
        which cannot know (see interest_heard)."""
        return self.session.receiver_count

    @property
    def interest_heard(self) -> float | None:
        """When a receiver in the domain last asked for this topic (a TQR or a matching wildcard
        query; time.monotonic()), None if none has since the source was made."""
        return self.context.resolver.interest_heard.get(self.topic)

    def send(self, data, flush: bool = False) -> None:
        """Send one message (bytes-like). Batched unless `flush`; fragments above the datagram size."""
        if self.closed:
            raise RuntimeError(f"source for topic {self.topic!r} is closed")
        self.sequence_number = self.session.send(self.index, self.sequence_number, data, flush)
        self.sent_any = True

    def send_with_properties(self, data, properties: dict | None, flush: bool = False) -> None:
        """Send one message with UM message properties, ``{key: Property(kind, value)}``
        (lbm_src_send_ex with an lbm_msg_properties_t; router.um.wire.lbmc_properties); None: as
        send(). WireError if one cannot be sent. A method of its own, as in UM, so that send()
        pays nothing for them."""
        if properties is None:
            self.send(data, flush)
            return
        if self.closed:
            raise RuntimeError(f"source for topic {self.topic!r} is closed")
        self.sequence_number = self.session.send_with_properties(
            self.index, self.sequence_number, data, encode_properties(properties), flush)
        self.sent_any = True

    def send_request(self, data, on_response: Callable[[Response], None] | None = None) -> PendingRequest:
        """Send a request (lbm_send_request): a message of this source, in order with its others,
        whose receivers may answer it. Responses come to this context's request port and go to
        `on_response` on the context's thread until the returned PendingRequest is closed (close
        it: an open request is kept, and matched against, for as long as it is open).
        RequestPortUnavailable (an OSError) if the context cannot open a request port."""
        if self.closed:
            raise RuntimeError(f"source for topic {self.topic!r} is closed")
        ipaddr, port = self.context.request_address()
        pending = self.context.requests.open(on_response)      # before sending: answers can be quick
        try:
            self.sequence_number = self.session.send_request(self.index, self.sequence_number, data,
                                                             RequestOrigin(ipaddr, port, pending.qidx))
            self.sent_any = True
        except BaseException:
            pending.close()
            raise
        self.context._request_sent()
        return pending

    def send_many(self, messages) -> None:
        """Send each of `messages` (bytes-like), batched, in order: `send` without its per-call
        cost. Give messages that are ready: they are framed in runs that join the batch as they
        fill it (BatchingSession.send_many)."""
        if self.closed:
            raise RuntimeError(f"source for topic {self.topic!r} is closed")
        progress = [self.sequence_number, False]
        try:
            self.session.send_many(self.index, self.sequence_number, messages, progress)
        finally:
            # Also when `messages` raises midway: the next message must not reuse the numbers of
            # those that went out.
            self.sequence_number = progress[0]
            if progress[1]:
                self.sent_any = True

    def flush(self) -> None:
        self.session.flush()

    def last_sequence_number(self) -> int | None:
        """The sequence number of the last frame sent (None before the first; 2^32 - 1 when the
        next is 0 again): what its session's TSNIs say (router.um.sequence_info). A router's proxy
        source sends frames as they came, not through `send`: the later of the newest it retains,
        if it retains, and the origin's last."""
        if self.sent_any:
            return (self.sequence_number - 1) & 0xFFFFFFFF
        retained = None
        if self.late_join is not None and self.late_join[2] is not None:
            bounds = self.late_join[2].bounds()
            retained = bounds[1] if bounds is not None else None
        return later(retained, self.upstream_last)

    def close(self, final_advertisements: int | None = None) -> None:
        """Flush, stop advertising, send final advertisements if asked, release the session."""
        if self.closed:
            return
        self.closed = True
        count = self.final_advertisements if final_advertisements is None else final_advertisements
        self.context._close_source(self, count)

    def __enter__(self) -> "Source":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

