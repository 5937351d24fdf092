"""Per-portal counters: one int64 array per portal in shared memory, written only by its worker.

The names follow the DRO's statistics (spec/dro.md §3.2, the seed's web-monitor pages) so an
operator who knows the DRO reads them without a glossary. The supervisor, the admin socket, the
web monitor and the Parquet sink all read the same array; a worker restart keeps it (the segment
belongs to the supervisor), which is why `worker_restarts` can be reported next to the totals.
"""
from __future__ import annotations

import numpy as np

# Order is the layout of the shared array: append only (the Parquet schema is versioned with it).
ENDPOINT_COUNTERS = (
    # receive side: data arriving from this portal's domain for other portals
    "transport_topic_fragments_rcvd", "transport_topic_fragment_bytes_rcvd",
    "transport_topic_fragments_rcvd_unknown", "transport_topic_fragment_bytes_rcvd_unknown",
    # send side: data from other portals into this domain
    "transport_topic_fragments_forwarded", "transport_topic_fragment_bytes_forwarded",
    "transport_topic_fragments_sent", "transport_topic_fragment_bytes_sent",
    "transport_topic_fragments_dropped_would_block", "transport_topic_fragment_bytes_dropped_would_block",
    "transport_topic_fragments_dropped_error", "transport_topic_fragment_bytes_dropped_error",
    "transport_topic_fragments_dropped_size_error", "transport_topic_fragment_bytes_dropped_size_error",
    "transport_topic_fragments_dropped_queue_failure", "transport_topic_fragment_bytes_dropped_queue_failure",
    "data_bytes_enqueued", "data_bytes_enqueued_max", "data_bytes_enqueued_limit",
    # proxies and interest
    "proxy_receivers", "proxy_sources", "proxy_sources_created", "proxy_sources_deleted",
    "receiver_topics", "receiver_pcre_patterns", "receiver_regex_patterns",
    "local_interest_topics", "local_interest_pcre_patterns", "local_interest_regex_patterns",
    "remote_interest_topics", "remote_interest_pcre_patterns", "remote_interest_regex_patterns",
    "streams_in", "streams_out",
    # topic resolution and the router's own plumbing
    "lbmr_packets_rcvd", "lbmr_packets_sent", "lbmr_malformed",
    "use_queries_sent", "topic_resolution_requests_sent",
    "ring_full_events", "ring_records_malformed", "bus_messages_malformed",
    "heartbeat_ns", "worker_pid", "worker_started_ns",
)

PEER_COUNTERS = (
    "data_msgs_rcvd", "data_msg_bytes_rcvd", "gateway_cntl_msgs_rcvd", "gateway_cntl_msg_bytes_rcvd",
    "data_fragments_forwarded", "data_fragment_bytes_forwarded",
    "data_fragments_sent", "data_fragment_bytes_sent",
    "data_fragments_dropped_would_block", "data_fragment_bytes_dropped_would_block",
    "data_fragments_dropped_not_operational", "data_fragment_bytes_dropped_not_operational",
    "data_fragments_dropped_queue_failure", "data_fragment_bytes_dropped_queue_failure",
    "gateway_cntl_msgs", "gateway_cntl_msgs_sent",
    "batches", "data_bytes_enqueued", "data_bytes_enqueued_max", "data_bytes_enqueued_limit",
    "rtt_samples", "rtt_min", "rtt_mean", "rtt_max", "last_ka_time",
    "link_connects", "link_disconnects", "link_malformed",
)

# One layout for every portal (a peer's names follow the endpoint's) keeps the Parquet schema
# and the shared segments uniform; counters a kind never touches stay zero.
# Added with multi-hop routing (appended: earlier Parquet files keep their columns' positions).
ROUTING_COUNTERS = (
    "streams_dropped_hop_count",            # sources that crossed 255 routers: a routing loop
    "rtt_sum_us",                           # with rtt_samples: the exact mean over any interval
    "interest_msgs_sent", "interest_msgs_rcvd",
    "advertisements_sent", "advertisements_rcvd",
    "route_info_msgs_sent", "route_info_msgs_rcvd",
)

# Added with egress flow control (router.worker.datapath): how often an egress portal whose
# receivers were behind left records in the rings, and how often it stopped holding them back.
FLOW_CONTROL_COUNTERS = ("egress_backlog_holds", "egress_backlog_releases")

# Added with access control (router.portals.acl): streams an ACL did not let in / out of a portal.
ACL_COUNTERS = ("acl_inbound_rejected", "acl_outbound_rejected")
# Endpoint checks that found due use queries held back by <rate-limit> (router/portals/rate_limit.py).
RATE_LIMIT_COUNTERS = ("use_queries_rate_limited",)
# Added with request/response forwarding (router/portals/proxy_requests.py), named after the
# seed's web-monitor rows: request fragments in and out, responses ("unicast data") received at
# the portal (those whose request index the portal never handed out or has forgotten: "with
# unknown forwarding info"), forwarded to the portal the request came in by, sent on to the
# requester, or dropped because they could not be sent ("due to error").
REQUEST_COUNTERS = (
    "transport_topic_req_fragments_rcvd", "transport_topic_req_fragment_bytes_rcvd",
    "transport_topic_req_fragments_sent", "transport_topic_req_fragment_bytes_sent",
    "unicast_data_msgs_rcvd", "unicast_data_msg_bytes_rcvd",
    "unicast_data_msgs_rcvd_unknown_fwd", "unicast_data_msg_bytes_rcvd_unknown_fwd",
    "unicast_data_msgs_forwarded", "unicast_data_msg_bytes_forwarded",
    "unicast_data_msgs_sent", "unicast_data_msg_bytes_sent",
    "unicast_data_msgs_dropped_error", "unicast_data_msg_bytes_dropped_error",
    "proxy_requests",
)

# Added with multicast immediate messages (router/portals/immediate.py), named as the DRO's
# Endpoint.Receive/Send and Peer.Receive statistics: MIMs heard in the domain (or over the link),
# flooded to the other portals ("forwarded"), sent into the domain (or over the link), dropped when
# they could not be sent or did not fit the egress datagram size, and copies delivery control
# recognised (another router, or another path, brought the same message already).
IMMEDIATE_COUNTERS = (
    "immediate_topic_fragments_rcvd", "immediate_topic_fragment_bytes_rcvd",
    "immediate_topicless_fragments_rcvd", "immediate_topicless_fragment_bytes_rcvd",
    "immediate_topic_fragments_forwarded", "immediate_topic_fragment_bytes_forwarded",
    "immediate_topicless_fragments_forwarded", "immediate_topicless_fragment_bytes_forwarded",
    "immediate_topic_fragments_sent", "immediate_topic_fragment_bytes_sent",
    "immediate_topicless_fragments_sent", "immediate_topicless_fragment_bytes_sent",
    "immediate_topic_fragments_dropped_error", "immediate_topic_fragment_bytes_dropped_error",
    "immediate_topicless_fragments_dropped_error", "immediate_topicless_fragment_bytes_dropped_error",
    "immediate_topic_fragments_dropped_size_error", "immediate_topic_fragment_bytes_dropped_size_error",
    "immediate_topicless_fragments_dropped_size_error", "immediate_topicless_fragment_bytes_dropped_size_error",
    "immediate_fragments_dropped_dup", "immediate_fragment_bytes_dropped_dup",
)

# Added with the peer link's UDP data path (router/portals/peer_udp.py), as the DRO's peer
# udp_send / udp_receive statistics: datagrams each way, loss repair each way, what was given up.
UDP_PEER_COUNTERS = (
    "udp_datagrams_sent", "udp_datagram_bytes_sent", "udp_retransmissions_sent", "udp_naks_rcvd",
    "udp_naks_shed", "udp_datagrams_rcvd", "udp_datagram_bytes_rcvd", "udp_naks_sent",
    "udp_retransmissions_rcvd", "udp_datagrams_lost",
)

# Added with late join and OTR relayed to the originating source (router/portals/late_join_relay.py):
# requests a receiver sent a proxy source (egress), relayed on to the origin (ingress), answers
# (UME_LJ_INFO, RETRANS frames) back from it and sent on to the requester, requests that could not
# be relayed (the stream or its origin gone, or a peer link between), answers nobody waited for;
# retransmission requests joined to one already asked of the origin (its answer serves both).
LATE_JOIN_COUNTERS = (
    "late_join_requests_rcvd", "late_join_requests_relayed", "late_join_answers_rcvd",
    "late_join_answers_sent", "late_join_requests_not_relayed", "late_join_answers_unknown",
    "late_join_requests_joined",
)

# Added with hostile-input tests: bad input a portal met and dropped, so none goes unseen. Wildcard
# patterns (from queries, use-query responses, other routers' interest) that do not compile; LBMC
# frames from a source's transport that do not parse; peer connections refused at the handshake;
# multicast immediate messages (and their fragments) that do not parse.
BAD_INPUT_COUNTERS = ("patterns_invalid", "transport_malformed", "link_handshakes_rejected", "immediate_malformed")

# Added with unicast immediate messages routed across domains (router/portals/unicast_routing.py):
# those dropped because no path led to their domain (before the first route calculation, none at
# all, or a loop), as the DRO's Endpoint.Receive/Peer.Receive statistics name them, and those that
# did not parse (unicast_malformed). The ones received, forwarded, sent and dropped for errors count
# with the responses (REQUEST_COUNTERS).
UNICAST_COUNTERS = ("unicast_data_msgs_dropped_no_route", "unicast_data_msg_bytes_dropped_no_route",
                    "unicast_malformed")

# Added with early wake-ups (router/worker/datapath.py): workers this portal's worker woke as data
# for them arrived, before it was in the ring, and early wake-ups of this one that waited for a
# record in vain (the data was for no one here: topic resolution, say).
EARLY_WAKE_COUNTERS = ("ring_early_wakeups_sent", "ring_early_wakeups_idle")

# Added with <sqn-window> (router/portals/sequence_window.py): a stream's frames an egress had sent
# already (they came again by another way, or from a source that repeated them), dropped as the
# DRO's Endpoint.Send and Peer.Send statistics count them, "dropped (duplicate)".
DUPLICATE_COUNTERS = ("transport_topic_fragments_dropped_duplicate", "transport_topic_fragment_bytes_dropped_duplicate",
                      "data_fragments_dropped_duplicate", "data_fragment_bytes_dropped_duplicate")

# Added with the DRO's batch figures of a peer link (its peer page, DROMonMsg Peer.Send): messages
# and bytes per batch, smallest, mean and largest over the portal's life, and the two totals the
# means come from (cumulative, so a reader can take the mean over any interval).
BATCH_COUNTERS = ("batch_msgs_min", "batch_msgs_mean", "batch_msgs_max", "batch_bytes_min", "batch_bytes_mean",
                  "batch_bytes_max", "batch_msgs_total", "batch_bytes_total")

# Added with ring-lapped events (router/worker/datapath.py): bytes of records a portal lost because
# a producer judged its worker dead and wrote over them; lapping was counted as malformed records.
LAPPED_COUNTERS = ("ring_laps", "ring_bytes_lapped")
# Route-info for another router on a shared domain dropped because it did not read what waited
# for it (router/portals/domain_routes.py); these were counted as data fragments dropped.
ROUTE_INFO_DROP_COUNTERS = ("route_info_msgs_dropped",)
# Late-join and OTR requests an ingress portal relayed to an origin that never answered them, forgotten
# once their requesters had given up (router/portals/late_join_relay.py); they were kept for good.
LATE_JOIN_UNANSWERED_COUNTERS = ("late_join_requests_unanswered",)
# Records addressed to a portal while no worker of it read them (it had died or was restarting),
# found by its restarted worker and not sent (router/worker/datapath.py); they were skipped unseen.
MISSED_WHILE_DOWN_COUNTERS = ("ring_records_missed_while_down", "ring_record_bytes_missed_while_down")
# Callbacks of the portal's worker loop (timers, sockets, the bus) that raised: each was logged, and
# what it was doing was cut short (router/worker/process.py). Portals sharing a worker show its figure.
INTERNAL_ERROR_COUNTERS = ("internal_errors",)
# Responses (and unicast immediate messages) an endpoint portal's request port refused, closing the
# connection they came on (router/um/request_port.py): larger than a request port takes, or a
# stream that breaks the framing. They were counted only in the portal's UM context.
REQUEST_PORT_REFUSED_COUNTERS = ("responses_too_large", "responses_malformed")
# Gaps in the numbers of the control bus's publications a portal's worker saw: it had fallen behind
# by more than ZeroMQ's high-water mark, which drops publications silently (router/ipc/bus.py); each
# gap made it take a fresh snapshot. Its interest and portals had diverged from the router's unseen.
BUS_GAP_COUNTERS = ("bus_update_gaps",)
# Messages a portal's worker meant for the supervisor and dropped: the supervisor had not read the
# control bus for so long that the worker's outbox for it overflowed (router/ipc/bus.py). A full
# queue made the sender raise, losing the message and cutting short what sent it.
BUS_DROP_COUNTERS = ("bus_messages_dropped",)
# Retransmission requests an ingress portal asked of the origin again for the same message (a
# requester repeating itself, or another asking after the joining window, router/portals/late_join_relay.py):
# the origin answers each, and the answers after the first find nobody waiting
# (late_join_answers_unknown), which looked like answers gone astray.
LATE_JOIN_REASKED_COUNTERS = ("late_join_requests_reasked",)
# A requester's retries of retransmissions still on their way, held back by the egress portal
# (router/portals/late_join_retries.py): each went to the origin, and its answer took the place of
# answers on every hop until receivers on a loaded host gave up.
LATE_JOIN_RETRY_COUNTERS = ("late_join_retries_held",)

COUNTER_NAMES = (ENDPOINT_COUNTERS + tuple(n for n in PEER_COUNTERS if n not in ENDPOINT_COUNTERS)
                 + ROUTING_COUNTERS + FLOW_CONTROL_COUNTERS + ACL_COUNTERS + RATE_LIMIT_COUNTERS
                 + REQUEST_COUNTERS + IMMEDIATE_COUNTERS + UDP_PEER_COUNTERS + LATE_JOIN_COUNTERS
                 + BAD_INPUT_COUNTERS + EARLY_WAKE_COUNTERS + UNICAST_COUNTERS + DUPLICATE_COUNTERS
                 + BATCH_COUNTERS + LAPPED_COUNTERS + ROUTE_INFO_DROP_COUNTERS + LATE_JOIN_UNANSWERED_COUNTERS
                 + MISSED_WHILE_DOWN_COUNTERS + INTERNAL_ERROR_COUNTERS + REQUEST_PORT_REFUSED_COUNTERS
                 + BUS_GAP_COUNTERS + BUS_DROP_COUNTERS + LATE_JOIN_REASKED_COUNTERS + LATE_JOIN_RETRY_COUNTERS)
INDEX = {name: i for i, name in enumerate(COUNTER_NAMES)}
SIZE = len(COUNTER_NAMES)
SEGMENT_BYTES = SIZE * 8


class PortalCounters:
    """A view of one portal's counters over `buffer` (shared memory, or a private array)."""

    def __init__(self, buffer=None):
        self.values = np.ndarray((SIZE,), dtype=np.int64, buffer=buffer) if buffer is not None \
            else np.zeros(SIZE, dtype=np.int64)
        # The same int64 cells as a memoryview: an increment on the data path is then one C-level
        # item access, not a numpy scalar round trip (several times slower per message).
        self._cells = memoryview(self.values).cast("B").cast("q")

    def add(self, name: str, amount: int = 1) -> None:
        self._cells[INDEX[name]] += amount

    def add_pair(self, name: str, bytes_name: str, count: int, size: int) -> None:
        cells = self._cells
        cells[INDEX[name]] += count
        cells[INDEX[bytes_name]] += size

    def add_get(self, name: str, amount: int = 1) -> int:
        """Add, and return the new value."""
        cells, index = self._cells, INDEX[name]
        cells[index] += amount
        return cells[index]

    def set(self, name: str, value: int) -> None:
        self.values[INDEX[name]] = value

    def set_max(self, name: str, value: int) -> None:
        index = INDEX[name]
        if value > self.values[index]:
            self.values[index] = value

    def get(self, name: str) -> int:
        return int(self.values[INDEX[name]])

    def snapshot(self) -> dict[str, int]:
        return dict(zip(COUNTER_NAMES, self.values.tolist()))


class ContinuedTotals:
    """Figures first counted by objects that come and go, kept in a portal's counters as totals.

    A worker's resolver channel, its transport sessions and the like count from zero when they
    are made: a transport session is new after its last source closed, the channel with every
    worker process. Copying their figures into the shared counters would take a total back
    (a restarted worker, a closed session) or hold it still until the new objects passed the
    old figure, so what each object's figure grew by since the last look is added instead.
    """

    def __init__(self, counters: PortalCounters):
        self.counters = counters
        # counter -> id(object) -> (object, its figure last time). Holding the object keeps its
        # id from being reused by a new one while it is remembered.
        self.seen: dict[str, dict[int, tuple[object, int]]] = {}

    def grew(self, name: str, figures) -> list:
        """Of `figures` (as for `update`, called before it), the objects whose figure moved since
        the last update of `name`: which of them are counting now."""
        before = self.seen.get(name, {})
        return [source for source, figure in figures if figure and figure != before.get(id(source), (None, 0))[1]]

    def update(self, name: str, figures) -> int:
        """`figures`: (object, its running figure) for every object counting `name` now. Adds
        what they grew by (all of a figure that went down: a counter that started again) and
        returns it; objects no longer listed are forgotten, what they counted stays."""
        before = self.seen.get(name, {})
        now: dict[int, tuple[object, int]] = {}
        grown = 0
        for source, figure in figures:
            last = before.get(id(source), (None, 0))[1]
            grown += figure - last if figure >= last else figure
            now[id(source)] = (source, figure)
        self.seen[name] = now
        if grown:
            self.counters.add(name, grown)
        return grown
