"""The statistics dataset's schema, defined once: the Parquet sink writes it, spark_pipeline reads it.

One row per portal per `<monitor interval>`. Identity columns first, then one int64 column per
counter in `COUNTER_NAMES` order (append only: a new counter is a new column at the end and a new
`SCHEMA_VERSION`; readers fill a column an older file lacks with nulls, so old files stay readable).

Counters are cumulative since their shared segment was created, and that segment belongs to the
supervisor: a restarted worker *continues* its predecessor's totals (router/monitor/counters.py).
They start again from zero only when the segment is new (router restart, portal removed and
re-added by a reload). `counters_epoch` names the segment, so a reader can tell "continued" from
"started again" exactly instead of guessing from a counter that went down.
"""
from __future__ import annotations

from router.monitor.counters import COUNTER_NAMES

SCHEMA_VERSION = "20"           # 2: request/response counters (monitor/counters.py REQUEST_COUNTERS)
                                # 3: multicast immediate message counters (IMMEDIATE_COUNTERS)
                                # 4: a peer link's UDP data path (UDP_PEER_COUNTERS)
                                # 5: late join relayed to the origin (LATE_JOIN_COUNTERS)
                                # 6: late_join_requests_joined
                                # 7: bad input dropped (BAD_INPUT_COUNTERS)
                                # 8: early wake-ups between workers (EARLY_WAKE_COUNTERS)
                                # 9: unicast immediate messages with no route, malformed (UNICAST_COUNTERS)
                                # 10: frames dropped as duplicates by <sqn-window> (DUPLICATE_COUNTERS)
                                # 11: a peer link's messages and bytes per batch (BATCH_COUNTERS)
                                # 12: records lost to a producer writing past a dead-judged worker (LAPPED_COUNTERS),
                                #     route-info a router on a shared domain did not read (ROUTE_INFO_DROP_COUNTERS)
                                # 13: relayed late-join requests no origin answered (LATE_JOIN_UNANSWERED_COUNTERS)
                                # 14: records a restarted worker found addressed to it while it was down
                                #     (MISSED_WHILE_DOWN_COUNTERS)
                                # 15: failing callbacks of the worker's loop (INTERNAL_ERROR_COUNTERS)
                                # 16: responses an endpoint's request port refused (REQUEST_PORT_REFUSED_COUNTERS)
                                # 17: gaps in the control bus updates a worker saw (BUS_GAP_COUNTERS)
                                # 18: messages a worker dropped for the supervisor (BUS_DROP_COUNTERS)
                                # 19: retransmissions asked of an origin again (LATE_JOIN_REASKED_COUNTERS)
                                # 20: retries held back while their answers are on the way (LATE_JOIN_RETRY_COUNTERS)
METADATA_KEY = b"umrouter.stats.schema_version"
COUNTERS_METADATA_KEY = b"umrouter.stats.counters"

# (name, type, nullable). Types are the portable names both pyarrow and Spark map below.
IDENTITY_COLUMNS = (
    ("ts", "timestamp", False),             # UTC, microseconds: when the sink read the counters
    ("router", "string", False),            # <daemon><name>
    ("portal", "string", False),
    ("portal_kind", "string", False),       # endpoint | peer
    ("domain_id", "int64", True),           # endpoints only
    ("worker_pid", "int64", True),          # the process whose counters these are (null before any boot)
    ("worker_restarts", "int64", False),    # the portal's restart count when that process started
    # When this sink first saw the counter segment (UTC). Changes exactly when counters restart
    # from zero; equal to `ts` on the first row of a fresh segment.
    ("counters_epoch", "timestamp", False),
)

# `worker_pid` is also a counter (the worker writes it at boot); it is the identity column above.
COUNTER_COLUMNS = tuple(name for name in COUNTER_NAMES if name != "worker_pid")

COLUMNS = IDENTITY_COLUMNS + tuple((name, "int64", True) for name in COUNTER_COLUMNS)
COLUMN_NAMES = tuple(name for name, _, _ in COLUMNS)

# Counters that are a level, not a running total: their "delta" means nothing, a reader takes the
# value as it is. Everything else in COUNTER_COLUMNS only ever grows within one counters_epoch.
GAUGES = frozenset({
    "data_bytes_enqueued", "data_bytes_enqueued_max", "data_bytes_enqueued_limit",
    "proxy_receivers", "proxy_sources", "proxy_requests",
    "receiver_topics", "receiver_pcre_patterns", "receiver_regex_patterns",
    "local_interest_topics", "local_interest_pcre_patterns", "local_interest_regex_patterns",
    "remote_interest_topics", "remote_interest_pcre_patterns", "remote_interest_regex_patterns",
    "heartbeat_ns", "worker_started_ns",
    "rtt_min", "rtt_mean", "rtt_max", "last_ka_time",
    "batch_msgs_min", "batch_msgs_mean", "batch_msgs_max", "batch_bytes_min", "batch_bytes_mean", "batch_bytes_max",
})
CUMULATIVE = tuple(name for name in COUNTER_COLUMNS if name not in GAUGES)


def arrow_schema():
    """The pyarrow schema, with the version (and the counter list it was built from) as metadata."""
    import pyarrow as pa
    types = {"timestamp": pa.timestamp("us", tz="UTC"), "string": pa.string(), "int64": pa.int64()}
    fields = [pa.field(name, types[kind], nullable=nullable) for name, kind, nullable in COLUMNS]
    return pa.schema(fields, metadata={METADATA_KEY: SCHEMA_VERSION.encode(),
                                       COUNTERS_METADATA_KEY: ",".join(COUNTER_COLUMNS).encode()})
