"""A portal's statistics, as every view shows them: each counter a portal of each kind keeps,
labelled as the DRO's web monitor labels it (seed 001 §6.3 peer page, §6.4 endpoint page) where
the DRO has that row, and grouped in the sections of the portal page.

The web monitor's portal pages, `routerctl stats` and /metrics all take the counters of a kind
from here (`counters_of`), so a counter is either on its portal's page and in every view, or in
none: the Parquet files keep every counter whatever this says.
"""
from __future__ import annotations

from dataclasses import dataclass

# A row: (label, count counter, bytes counter or None).
Row = tuple[str, str, "str | None"]


@dataclass(frozen=True)
class Section:
    title: str
    rows: tuple[Row, ...]
    paired: bool = True          # a count and a bytes column (traffic); else a single count column


def _counts(*rows: tuple[str, str]) -> tuple[Row, ...]:
    return tuple((label, counter, None) for label, counter in rows)


# The DRO's endpoint page says "fragments" where its peer page says "fragment data messages".
def _immediate_receive(unit: str) -> tuple[Row, ...]:
    return (
        (f"Immediate topic {unit}/bytes received", "immediate_topic_fragments_rcvd",
         "immediate_topic_fragment_bytes_rcvd"),
        (f"Immediate topicless {unit}/bytes received", "immediate_topicless_fragments_rcvd",
         "immediate_topicless_fragment_bytes_rcvd"),
        ("Duplicate immediate fragments/bytes dropped", "immediate_fragments_dropped_dup",
         "immediate_fragment_bytes_dropped_dup"),
    )


IMMEDIATE_SEND = tuple(
    row for kind, label in (("topic", "Immediate topic"), ("topicless", "Immediate topicless")) for row in (
        (f"{label} fragments/bytes forwarded", f"immediate_{kind}_fragments_forwarded",
         f"immediate_{kind}_fragment_bytes_forwarded"),
        (f"{label} fragments/bytes sent", f"immediate_{kind}_fragments_sent", f"immediate_{kind}_fragment_bytes_sent"),
        (f"{label} fragments/bytes dropped due to error", f"immediate_{kind}_fragments_dropped_error",
         f"immediate_{kind}_fragment_bytes_dropped_error"),
        (f"{label} fragments/bytes dropped due to fragment size error",
         f"immediate_{kind}_fragments_dropped_size_error", f"immediate_{kind}_fragment_bytes_dropped_size_error"),
    ))

UNICAST_RECEIVE = (
    ("Unicast data messages/bytes received", "unicast_data_msgs_rcvd", "unicast_data_msg_bytes_rcvd"),
    ("Unicast data messages/bytes received with unknown forwarding info", "unicast_data_msgs_rcvd_unknown_fwd",
     "unicast_data_msg_bytes_rcvd_unknown_fwd"),
    ("Unicast data messages/bytes dropped due to no route", "unicast_data_msgs_dropped_no_route",
     "unicast_data_msg_bytes_dropped_no_route"),
)
UNICAST_SEND = (
    ("Unicast data messages/bytes forwarded", "unicast_data_msgs_forwarded", "unicast_data_msg_bytes_forwarded"),
    ("Unicast data messages/bytes sent", "unicast_data_msgs_sent", "unicast_data_msg_bytes_sent"),
    ("Unicast data messages/bytes dropped due to error", "unicast_data_msgs_dropped_error",
     "unicast_data_msg_bytes_dropped_error"),
)
REQUEST_SENT = (("Transport topic request fragments/bytes sent", "transport_topic_req_fragments_sent",
                 "transport_topic_req_fragment_bytes_sent"),)

ENDPOINT_RECEIVE = Section("Receive Statistics", (
    ("Transport topic fragments/bytes received", "transport_topic_fragments_rcvd",
     "transport_topic_fragment_bytes_rcvd"),
    ("Transport topic fragments/bytes received from an unknown source", "transport_topic_fragments_rcvd_unknown",
     "transport_topic_fragment_bytes_rcvd_unknown"),
    ("Transport topic request fragments/bytes received", "transport_topic_req_fragments_rcvd",
     "transport_topic_req_fragment_bytes_rcvd"),
    *_immediate_receive("fragments"),
    *UNICAST_RECEIVE,
))
ENDPOINT_SEND = Section("Send Statistics", (
    ("Transport topic fragments/bytes forwarded", "transport_topic_fragments_forwarded",
     "transport_topic_fragment_bytes_forwarded"),
    ("Transport topic fragments/bytes sent", "transport_topic_fragments_sent", "transport_topic_fragment_bytes_sent"),
    ("Duplicate transport topic fragments/bytes dropped", "transport_topic_fragments_dropped_duplicate",
     "transport_topic_fragment_bytes_dropped_duplicate"),
    ("Transport topic fragments/bytes dropped due to blocking", "transport_topic_fragments_dropped_would_block",
     "transport_topic_fragment_bytes_dropped_would_block"),
    ("Transport topic fragments/bytes dropped due to error", "transport_topic_fragments_dropped_error",
     "transport_topic_fragment_bytes_dropped_error"),
    ("Transport topic fragments/bytes dropped due to fragment size error",
     "transport_topic_fragments_dropped_size_error", "transport_topic_fragment_bytes_dropped_size_error"),
    ("Transport topic fragments/bytes dropped due to queue failure", "transport_topic_fragments_dropped_queue_failure",
     "transport_topic_fragment_bytes_dropped_queue_failure"),
    *REQUEST_SENT,
    *IMMEDIATE_SEND,
    *UNICAST_SEND,
))
PEER_RECEIVE = Section("Receive Statistics", (
    ("Data messages/bytes received", "data_msgs_rcvd", "data_msg_bytes_rcvd"),
    ("Transport topic fragment data messages/bytes received", "transport_topic_fragments_rcvd",
     "transport_topic_fragment_bytes_rcvd"),
    ("Transport topic fragment data messages/bytes forwarded to other portals", "transport_topic_fragments_forwarded",
     "transport_topic_fragment_bytes_forwarded"),
    ("Transport topic fragment data messages/bytes received with unknown source",
     "transport_topic_fragments_rcvd_unknown", "transport_topic_fragment_bytes_rcvd_unknown"),
    ("Transport topic request fragment data messages/bytes received", "transport_topic_req_fragments_rcvd",
     "transport_topic_req_fragment_bytes_rcvd"),
    *_immediate_receive("fragment data messages"),
    *UNICAST_RECEIVE,
    ("Gateway control messages/bytes received", "gateway_cntl_msgs_rcvd", "gateway_cntl_msg_bytes_rcvd"),
))
PEER_SEND = Section("Send Statistics", (
    ("Transport topic data fragments/bytes forwarded", "data_fragments_forwarded", "data_fragment_bytes_forwarded"),
    ("Transport topic data fragments/bytes sent", "data_fragments_sent", "data_fragment_bytes_sent"),
    ("Transport topic data fragments/bytes dropped (duplicate)", "data_fragments_dropped_duplicate",
     "data_fragment_bytes_dropped_duplicate"),
    ("Transport topic data fragments/bytes dropped (blocking)", "data_fragments_dropped_would_block",
     "data_fragment_bytes_dropped_would_block"),
    ("Transport topic data fragments/bytes dropped (not operational)", "data_fragments_dropped_not_operational",
     "data_fragment_bytes_dropped_not_operational"),
    ("Transport topic data fragments/bytes dropped (queue failure)", "data_fragments_dropped_queue_failure",
     "data_fragment_bytes_dropped_queue_failure"),
    *REQUEST_SENT,
    *UNICAST_SEND,
    *IMMEDIATE_SEND,
    *_counts(("Gateway control messages generated", "gateway_cntl_msgs"),
             ("Gateway control messages sent", "gateway_cntl_msgs_sent"),
             ("Batches", "batches")),
    ("Minimum messages/bytes per batch", "batch_msgs_min", "batch_bytes_min"),
    ("Average messages/bytes per batch", "batch_msgs_mean", "batch_bytes_mean"),
    ("Maximum messages/bytes per batch", "batch_msgs_max", "batch_bytes_max"),
    *_counts(
             ("Keepalive/RTT samples", "rtt_samples"),
             ("Minimum RTT (microseconds)", "rtt_min"),
             ("Mean RTT (microseconds)", "rtt_mean"),
             ("Maximum RTT (microseconds)", "rtt_max")),
))
# The peer link's UDP data path (<udp>), as the DRO's udp_send / udp_receive statistics.
PEER_UDP = Section("UDP data path", (
    ("UDP datagrams/bytes received", "udp_datagrams_rcvd", "udp_datagram_bytes_rcvd"),
    ("UDP datagrams/bytes sent", "udp_datagrams_sent", "udp_datagram_bytes_sent"),
    *_counts(("UDP NAKs sent", "udp_naks_sent"),
             ("UDP retransmissions received", "udp_retransmissions_rcvd"),
             ("UDP datagrams lost (not repaired)", "udp_datagrams_lost"),
             ("UDP NAKs received", "udp_naks_rcvd"),
             ("UDP retransmissions sent", "udp_retransmissions_sent"),
             ("UDP NAKs shed (retransmit rate spent)", "udp_naks_shed")),
))
PEER_LINK = Section("Peer link", _counts(
    ("Connections made", "link_connects"),
    ("Connections lost or closed", "link_disconnects"),
    ("Connections refused at the handshake", "link_handshakes_rejected"),
    ("Malformed messages received (ignored)", "link_malformed"),
    ("Last keepalive (seconds since the epoch)", "last_ka_time"),
), paired=False)
# Late join and OTR of proxy sources, relayed to the originating source (the DRO's
# "Retransmission requests/bytes ..." rows, counted in requests).
RETRANSMISSION = Section("Retransmission requests (late join, OTR)", _counts(
    ("Retransmission requests received", "late_join_requests_rcvd"),
    ("Retransmission requests forwarded to the originating source", "late_join_requests_relayed"),
    ("Retransmission requests joined to one already forwarded", "late_join_requests_joined"),
    ("Retransmission requests forwarded to the originating source again", "late_join_requests_reasked"),
    ("Retransmission requests repeated while the answer was on its way (held back)", "late_join_retries_held"),
    ("Retransmission requests for an unknown source", "late_join_requests_not_relayed"),
    ("Retransmissions received from the originating source", "late_join_answers_rcvd"),
    ("Retransmissions sent to the requesting receivers", "late_join_answers_sent"),
    ("Retransmissions nobody waited for", "late_join_answers_unknown"),
    ("Retransmission requests the originating source never answered (forgotten)", "late_join_requests_unanswered"),
), paired=False)
TOPIC_RESOLUTION = Section("Topic resolution", _counts(
    ("Topic resolution packets received", "lbmr_packets_rcvd"),
    ("Topic resolution packets sent", "lbmr_packets_sent"),
    ("Malformed topic resolution packets (ignored)", "lbmr_malformed"),
    ("Topic resolution requests sent", "topic_resolution_requests_sent"),
    ("Use queries sent", "use_queries_sent"),
    ("Use-query checks held back by the rate limit", "use_queries_rate_limited"),
    ("Patterns that do not compile (ignored)", "patterns_invalid"),
), paired=False)


def _routing(*more: tuple[str, str]) -> Section:
    return Section("Routing", _counts(
        ("Streams brought in", "streams_in"),
        ("Streams sent out", "streams_out"),
        *more,
        ("Streams dropped at 255 hops (a routing loop)", "streams_dropped_hop_count"),
        ("Interest messages sent", "interest_msgs_sent"),
        ("Interest messages received", "interest_msgs_rcvd"),
        ("Route information messages sent", "route_info_msgs_sent"),
        ("Route information messages received", "route_info_msgs_rcvd"),
        ("Route information messages dropped (another router on the domain not reading)", "route_info_msgs_dropped"),
        ("Streams rejected by the inbound ACL", "acl_inbound_rejected"),
        ("Streams rejected by the outbound ACL", "acl_outbound_rejected"),
    ), paired=False)


ENDPOINT_ROUTING = _routing(("Proxy sources created", "proxy_sources_created"),
                            ("Proxy sources deleted", "proxy_sources_deleted"))
PEER_ROUTING = _routing(("Stream advertisements sent", "advertisements_sent"),
                        ("Stream advertisements received", "advertisements_rcvd"),
                        ("Patterns that do not compile (ignored)", "patterns_invalid"))


def _worker(*more: tuple[str, str]) -> Section:
    return Section("Worker", _counts(
        ("Times the outbound ring was full", "ring_full_events"),
        ("Egress holds (receivers behind: records left in the rings)", "egress_backlog_holds"),
        ("Egress releases", "egress_backlog_releases"),
        ("Early wake-ups of other workers", "ring_early_wakeups_sent"),
        ("Early wake-ups that found no record", "ring_early_wakeups_idle"),
        ("Malformed ring records (ignored)", "ring_records_malformed"),
        ("Times the worker was lapped in a ring (records overwritten)", "ring_laps"),
        ("Bytes of records overwritten before they were sent", "ring_bytes_lapped"),
        ("Records for the portal while its worker was down (not sent)", "ring_records_missed_while_down"),
        ("Bytes of records for the portal while its worker was down", "ring_record_bytes_missed_while_down"),
        ("Malformed control bus messages (ignored)", "bus_messages_malformed"),
        ("Gaps in the control bus updates (the worker fell behind; it took a fresh snapshot)", "bus_update_gaps"),
        ("Control bus messages dropped (the supervisor did not read them for too long)", "bus_messages_dropped"),
        ("Internal errors (failing callbacks of the worker, logged)", "internal_errors"),
        *more,
    ), paired=False)


ENDPOINT_WORKER = _worker(("Malformed transport data (ignored)", "transport_malformed"),
                          ("Malformed immediate messages (ignored)", "immediate_malformed"),
                          ("Malformed unicast immediate messages (ignored)", "unicast_malformed"),
                          ("Responses refused: larger than a request port takes", "responses_too_large"),
                          ("Malformed response streams (connection closed)", "responses_malformed"))
PEER_WORKER = _worker()

# The lines above the statistics: (label, counter).
SUMMARY = {
    "endpoint": (
        ("Local interest: topics", "local_interest_topics"),
        ("Local interest: PCRE patterns", "local_interest_pcre_patterns"),
        ("Local interest: REGEX patterns", "local_interest_regex_patterns"),
        ("Remote interest: topics", "remote_interest_topics"),
        ("Remote interest: PCRE patterns", "remote_interest_pcre_patterns"),
        ("Remote interest: REGEX patterns", "remote_interest_regex_patterns"),
        ("Proxy receivers", "proxy_receivers"),
        ("Receiver topics", "receiver_topics"),
        ("Receiver PCRE patterns", "receiver_pcre_patterns"),
        ("Receiver REGEX patterns", "receiver_regex_patterns"),
        ("Proxy sources", "proxy_sources"),
        ("Proxy requests", "proxy_requests"),
    ),
    "peer": (
        ("Remote interest: topics", "remote_interest_topics"),
        ("Remote interest: PCRE patterns", "remote_interest_pcre_patterns"),
        ("Remote interest: REGEX patterns", "remote_interest_regex_patterns"),
        ("Proxy requests", "proxy_requests"),
    ),
}
ENQUEUED = ("data_bytes_enqueued", "data_bytes_enqueued_max", "data_bytes_enqueued_limit")
SECTIONS = {
    "endpoint": (ENDPOINT_RECEIVE, ENDPOINT_SEND, RETRANSMISSION, TOPIC_RESOLUTION, ENDPOINT_ROUTING,
                 ENDPOINT_WORKER),
    "peer": (PEER_RECEIVE, PEER_SEND, PEER_UDP, PEER_LINK, RETRANSMISSION, PEER_ROUTING, PEER_WORKER),
}
# In routerctl stats and /metrics, not a line of the page: the peer's RTT sum and batch totals,
# which with the samples and batches give exact means over any interval (the page shows the means).
EXPORTED_ONLY = {"endpoint": (), "peer": ("rtt_sum_us", "batch_msgs_total", "batch_bytes_total")}


def counters_of(kind: str) -> tuple[str, ...]:
    """Every counter a portal of `kind` shows, in page order (summary, queue, sections)."""
    names = [counter for _, counter in SUMMARY.get(kind, ())] + list(ENQUEUED)
    for section in SECTIONS.get(kind, ()):
        for _, count, size in section.rows:
            names += [count] + ([size] if size else [])
    names += EXPORTED_ONLY.get(kind, ())
    return tuple(dict.fromkeys(names))
