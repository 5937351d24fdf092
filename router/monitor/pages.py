"""The web monitor's pages as data: one function per page, shared by the HTML and /json views.

Pages follow the DRO's web monitor (seed section 6, spec/dro.md §3.4): a main page with the map
sizes and unknown fragments, a portals page, one page per portal with its receive and send
statistics in two columns (fragments or messages | bytes), a topology page, a path-info page
(the path between two domains, hop by hop), the configuration.
Every figure comes from router/monitor/views.py, as `routerctl stats` does.
"""
from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from router.monitor import views

# (label as the DRO prints it, count counter, bytes counter or None)
# Multicast immediate messages arrive at either portal kind (from the domain, or over the link).
IMMEDIATE_RECEIVE = (
    ("Immediate topic messages/bytes received", "immediate_topic_fragments_rcvd",
     "immediate_topic_fragment_bytes_rcvd"),
    ("Immediate topicless messages/bytes received", "immediate_topicless_fragments_rcvd",
     "immediate_topicless_fragment_bytes_rcvd"),
    ("Immediate messages/bytes dropped as duplicates", "immediate_fragments_dropped_dup",
     "immediate_fragment_bytes_dropped_dup"),
)
ENDPOINT_RECEIVE = (
    ("Transport topic fragments/bytes received", "transport_topic_fragments_rcvd",
     "transport_topic_fragment_bytes_rcvd"),
    ("Transport topic fragments/bytes received from an unknown source", "transport_topic_fragments_rcvd_unknown",
     "transport_topic_fragment_bytes_rcvd_unknown"),
    ("Transport topic request fragments/bytes received", "transport_topic_req_fragments_rcvd",
     "transport_topic_req_fragment_bytes_rcvd"),
    ("Unicast data messages/bytes received", "unicast_data_msgs_rcvd", "unicast_data_msg_bytes_rcvd"),
    ("Unicast data messages/bytes received with unknown forwarding info", "unicast_data_msgs_rcvd_unknown_fwd",
     "unicast_data_msg_bytes_rcvd_unknown_fwd"),
    ("Unicast data messages/bytes dropped due to no route", "unicast_data_msgs_dropped_no_route",
     "unicast_data_msg_bytes_dropped_no_route"),
    *IMMEDIATE_RECEIVE,
)
ENDPOINT_SEND = (
    ("Transport topic fragments/bytes forwarded", "transport_topic_fragments_forwarded",
     "transport_topic_fragment_bytes_forwarded"),
    ("Transport topic fragments/bytes sent", "transport_topic_fragments_sent", "transport_topic_fragment_bytes_sent"),
    ("Transport topic fragments/bytes dropped due to blocking", "transport_topic_fragments_dropped_would_block",
     "transport_topic_fragment_bytes_dropped_would_block"),
    ("Transport topic fragments/bytes dropped due to error", "transport_topic_fragments_dropped_error",
     "transport_topic_fragment_bytes_dropped_error"),
    ("Transport topic fragments/bytes dropped due to fragment size error",
     "transport_topic_fragments_dropped_size_error", "transport_topic_fragment_bytes_dropped_size_error"),
    ("Transport topic fragments/bytes dropped due to queue failure", "transport_topic_fragments_dropped_queue_failure",
     "transport_topic_fragment_bytes_dropped_queue_failure"),
    ("Transport topic fragments/bytes dropped as duplicates", "transport_topic_fragments_dropped_duplicate",
     "transport_topic_fragment_bytes_dropped_duplicate"),
    ("Transport topic request fragments/bytes sent", "transport_topic_req_fragments_sent",
     "transport_topic_req_fragment_bytes_sent"),
    ("Unicast data messages/bytes forwarded", "unicast_data_msgs_forwarded", "unicast_data_msg_bytes_forwarded"),
    ("Unicast data messages/bytes sent", "unicast_data_msgs_sent", "unicast_data_msg_bytes_sent"),
    ("Immediate topic messages/bytes forwarded", "immediate_topic_fragments_forwarded",
     "immediate_topic_fragment_bytes_forwarded"),
    ("Immediate topic messages/bytes sent", "immediate_topic_fragments_sent", "immediate_topic_fragment_bytes_sent"),
    ("Immediate topic messages/bytes dropped due to error", "immediate_topic_fragments_dropped_error",
     "immediate_topic_fragment_bytes_dropped_error"),
    ("Immediate topic messages/bytes dropped due to fragment size error",
     "immediate_topic_fragments_dropped_size_error", "immediate_topic_fragment_bytes_dropped_size_error"),
    ("Immediate topicless messages/bytes forwarded", "immediate_topicless_fragments_forwarded",
     "immediate_topicless_fragment_bytes_forwarded"),
    ("Immediate topicless messages/bytes sent", "immediate_topicless_fragments_sent",
     "immediate_topicless_fragment_bytes_sent"),
    ("Immediate topicless messages/bytes dropped due to error", "immediate_topicless_fragments_dropped_error",
     "immediate_topicless_fragment_bytes_dropped_error"),
    ("Immediate topicless messages/bytes dropped due to fragment size error",
     "immediate_topicless_fragments_dropped_size_error", "immediate_topicless_fragment_bytes_dropped_size_error"),
)
PEER_RECEIVE = (
    ("Data messages/bytes received", "data_msgs_rcvd", "data_msg_bytes_rcvd"),
    ("Gateway control messages/bytes received", "gateway_cntl_msgs_rcvd", "gateway_cntl_msg_bytes_rcvd"),
    ("Unicast data messages/bytes received", "unicast_data_msgs_rcvd", "unicast_data_msg_bytes_rcvd"),
    ("Unicast data messages/bytes received with unknown forwarding info", "unicast_data_msgs_rcvd_unknown_fwd",
     "unicast_data_msg_bytes_rcvd_unknown_fwd"),
    ("Unicast data messages/bytes dropped due to no route", "unicast_data_msgs_dropped_no_route",
     "unicast_data_msg_bytes_dropped_no_route"),
    *IMMEDIATE_RECEIVE,
    ("UDP datagrams/bytes received", "udp_datagrams_rcvd", "udp_datagram_bytes_rcvd"),
    ("UDP NAKs sent", "udp_naks_sent", None),
    ("UDP retransmissions received", "udp_retransmissions_rcvd", None),
    ("UDP datagrams lost (not repaired)", "udp_datagrams_lost", None),
)
PEER_SEND = (
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
    ("Transport topic request fragments/bytes sent", "transport_topic_req_fragments_sent",
     "transport_topic_req_fragment_bytes_sent"),
    ("Unicast data messages/bytes forwarded", "unicast_data_msgs_forwarded", "unicast_data_msg_bytes_forwarded"),
    ("Unicast data messages/bytes sent", "unicast_data_msgs_sent", "unicast_data_msg_bytes_sent"),
    ("Unicast data messages/bytes dropped due to error", "unicast_data_msgs_dropped_error",
     "unicast_data_msg_bytes_dropped_error"),
    ("Gateway control messages sent", "gateway_cntl_msgs_sent", None),
    ("Batches", "batches", None),
    ("UDP datagrams/bytes sent", "udp_datagrams_sent", "udp_datagram_bytes_sent"),
    ("UDP NAKs received", "udp_naks_rcvd", None),
    ("UDP retransmissions sent", "udp_retransmissions_sent", None),
    ("UDP NAKs shed (retransmit rate spent)", "udp_naks_shed", None),
    ("Keepalive/RTT samples", "rtt_samples", None),
    ("Minimum RTT (microseconds)", "rtt_min", None),
    ("Mean RTT (microseconds)", "rtt_mean", None),
    ("Maximum RTT (microseconds)", "rtt_max", None),
    ("Immediate topic messages/bytes sent", "immediate_topic_fragments_sent", "immediate_topic_fragment_bytes_sent"),
    ("Immediate topicless messages/bytes sent", "immediate_topicless_fragments_sent",
     "immediate_topicless_fragment_bytes_sent"),
)
# Endpoint summary lines, as on the DRO's endpoint page: (label, counter)
ENDPOINT_INTEREST = (
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
)

LINKS = (("Main", "/"), ("Portals", "/portals"), ("Topology Info", "/topology"), ("Path Info", "/path"),
         ("UM Router Configuration", "/config"), ("Prometheus metrics", "/metrics"))


def portal_href(name: str) -> str:
    return f"/portal/{quote(name, safe='')}"


def main_page(supervisor) -> dict:
    stats = views.portal_stats(supervisor)
    status = supervisor.status()
    return {**views.identity(supervisor), "pid": status["pid"], "uptime_s": status["uptime_s"],
            "topic_map": views.map_sizes(supervisor), "unknown_fragments": views.unknown_fragments(stats),
            "portal_count": len(status["portals"]),
            "links": [{"title": title, "href": href} for title, href in LINKS]}


def portals_page(supervisor) -> dict:
    portals = [{"name": p["name"], "kind": p["kind"], "domain_id": p["domain_id"], "cost": p["cost"],
                "state": p["state"], "href": portal_href(p["name"])} for p in supervisor.status()["portals"]]
    return {"router": supervisor.name, "portals": portals}


def portal_page(supervisor, name: str, answer: dict | None) -> dict:
    """`answer` is the worker's reply to the "topics" query (None if it did not answer)."""
    config = supervisor.workers[name].config
    counters = views.portal_stats(supervisor, [name])[name]
    endpoint = config.kind == "endpoint"
    page = {"router": supervisor.name, "name": name, "kind": config.kind, "cost": config.cost,
            "domain_id": getattr(config, "domain_id", None),
            "receive": _rows(ENDPOINT_RECEIVE if endpoint else PEER_RECEIVE, counters),
            "send": _rows(ENDPOINT_SEND if endpoint else PEER_SEND, counters),
            "summary": [{"label": label, "counter": counter, "value": counters[counter]}
                        for label, counter in ENDPOINT_INTEREST if counter in counters],
            "enqueued": {key: counters.get(f"data_bytes_enqueued{suffix}", 0)
                         for key, suffix in (("current", ""), ("max", "_max"), ("limit", "_limit"))},
            "counters": counters, "topics": answer}
    return page


def _rows(definitions, counters: dict) -> list[dict]:
    return [{"label": label, "count_counter": count, "count": counters.get(count, 0),
             "bytes_counter": size, "bytes": counters.get(size, 0) if size else None}
            for label, count, size in definitions]


def topology_page(supervisor) -> dict:
    return views.topology(supervisor)


def path_page(supervisor, query: dict[str, list[str]]) -> dict:
    """`query` is the parsed query string (`from` and `to` domain ids). Without both, the page
    is the form alone; otherwise it also carries the path, or the error saying why there is none."""
    routing = getattr(supervisor, "routing", None)
    domains = list(routing.routes.domains) if routing is not None else []
    source, destination = (query.get(key, [""])[0].strip() for key in ("from", "to"))
    page = {"router": supervisor.name, "domains": domains, "from": source or None, "to": destination or None,
            "path": None, "error": None}
    if source and destination:
        page.update(views.path_info(supervisor, source, destination))
    elif source or destination:
        page["error"] = "choose both a source (from) and a destination (to) domain"
    return page


class ConfigText:
    """The configuration the router runs, as text: read again only when a reload swapped the
    configuration, so an edited-but-not-reloaded file is not shown as if it were running."""

    def __init__(self):
        self.config = None
        self.text = ""

    def page(self, supervisor) -> dict:
        if supervisor.config is not self.config:
            self.config = supervisor.config
            try:
                self.text = Path(supervisor.config.path).read_text(errors="replace")
            except OSError as err:
                self.text = f"<!-- cannot read {supervisor.config.path}: {err.strerror} -->"
        return {"router": supervisor.name, "path": str(supervisor.config.path), "xml": self.text}
