"""Explicit Spark schemas: the statistics dataset read in, and every table the pipeline writes out.

The input schema is derived from router/monitor/stats_schema.py, the one definition the router's
sink writes with, so the two cannot drift. Output tables are declared here and every transform
ends with `conform(frame, SCHEMA)`, so a table's columns and types are what this file says.
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.types import (DoubleType, LongType, StringType, StructField, StructType,
                               TimestampType)

from router.monitor import stats_schema

_TYPES = {"timestamp": TimestampType(), "string": StringType(), "int64": LongType()}

STATS = StructType([StructField(name, _TYPES[kind], nullable) for name, kind, nullable in stats_schema.COLUMNS])

# Traffic measures: each sums the endpoint and the peer counter of the same meaning (a portal
# kind leaves the other's at zero). Order is the order of columns in the tables below.
MEASURES: dict[str, tuple[str, ...]] = {
    "msgs_in": ("transport_topic_fragments_rcvd", "data_msgs_rcvd"),
    "bytes_in": ("transport_topic_fragment_bytes_rcvd", "data_msg_bytes_rcvd"),
    "msgs_out": ("transport_topic_fragments_sent", "data_fragments_sent"),
    "bytes_out": ("transport_topic_fragment_bytes_sent", "data_fragment_bytes_sent"),
    # Frames <sqn-window> found sent already (another way brought them too): not lost, so not
    # among the drops below (their fraction is what was lost of what was offered).
    "duplicates_dropped": ("transport_topic_fragments_dropped_duplicate", "data_fragments_dropped_duplicate"),
}
# Immediate messages (MIM) a portal could not send count with the data drops of the same reason.
DROP_REASONS: dict[str, tuple[str, ...]] = {
    "would_block": ("transport_topic_fragments_dropped_would_block", "data_fragments_dropped_would_block"),
    "error": ("transport_topic_fragments_dropped_error", "immediate_topic_fragments_dropped_error",
              "immediate_topicless_fragments_dropped_error"),
    "size_error": ("transport_topic_fragments_dropped_size_error", "immediate_topic_fragments_dropped_size_error",
                   "immediate_topicless_fragments_dropped_size_error"),
    "queue_failure": ("transport_topic_fragments_dropped_queue_failure", "data_fragments_dropped_queue_failure"),
    "not_operational": ("data_fragments_dropped_not_operational",),
}
DROP_BYTES = {reason: tuple(c.replace("_fragments_", "_fragment_bytes_") for c in counters)
              for reason, counters in DROP_REASONS.items()}
# Interest and proxy gauges whose growth the report follows ("topic map" and "pattern map").
MAP_GAUGES = ("receiver_topics", "receiver_pcre_patterns", "receiver_regex_patterns",
              "local_interest_topics", "local_interest_pcre_patterns", "local_interest_regex_patterns",
              "remote_interest_topics", "remote_interest_pcre_patterns", "remote_interest_regex_patterns",
              "proxy_sources", "proxy_receivers")


def _struct(*fields: tuple[str, object, bool]) -> StructType:
    return StructType([StructField(name, kind, nullable) for name, kind, nullable in fields])


_S, _L, _D, _T = StringType(), LongType(), DoubleType(), TimestampType()
_KEY = (("router", _S, False), ("portal", _S, False), ("portal_kind", _S, False))
_DROP_COLUMNS = tuple((f"dropped_{r}", _L, True) for r in DROP_REASONS) + \
    tuple((f"dropped_bytes_{r}", _L, True) for r in DROP_REASONS)

# One row per stats row: what happened in the interval that ends at `ts`. Null deltas: unknown
# (the first row seen of a segment that began before the data set does).
INTERVALS = _struct(*_KEY, ("ts", _T, False), ("interval_s", _D, True), ("segment", _L, False),
                    *((m, _L, True) for m in MEASURES), ("dropped", _L, True), *_DROP_COLUMNS,
                    ("rtt_samples", _L, True), ("rtt_mean_us", _D, True),
                    *((g, _L, True) for g in MAP_GAUGES))

SEGMENTS = _struct(*_KEY, ("segment", _L, False), ("started", _T, False), ("ended", _T, False),
                   ("worker_pid", _L, True), ("worker_restarts", _L, False), ("counters_epoch", _T, False),
                   ("began_with", _S, False), ("rows", _L, False), ("msgs_in", _L, True), ("msgs_out", _L, True))

PORTAL_RATES = _struct(*_KEY, ("bucket_start", _T, False), ("seconds", _D, True),
                       *((m, _L, True) for m in MEASURES), ("dropped", _L, True),
                       ("msgs_in_per_s", _D, True), ("msgs_out_per_s", _D, True),
                       ("bytes_in_per_s", _D, True), ("bytes_out_per_s", _D, True))

ROUTER_RATES = _struct(("router", _S, False), ("bucket_start", _T, False), ("msgs_in_per_s", _D, True),
                       ("msgs_out_per_s", _D, True), ("bytes_out_per_s", _D, True), ("dropped", _L, True))

PORTAL_TOTALS = _struct(*_KEY, ("first_ts", _T, False), ("last_ts", _T, False), ("segments", _L, False),
                        *((m, _L, True) for m in MEASURES), ("dropped", _L, True),
                        ("peak_msgs_out_per_s", _D, True), ("peak_msgs_in_per_s", _D, True))

DROPS = _struct(*_KEY, ("reason", _S, False), ("msgs_dropped", _L, False), ("bytes_dropped", _L, False),
                ("msgs_offered", _L, False), ("fraction", _D, True))

RTT = _struct(("router", _S, False), ("portal", _S, False), ("samples", _L, False), ("intervals", _L, False),
              ("rtt_min_us", _L, True), ("rtt_p50_us", _D, True), ("rtt_p90_us", _D, True),
              ("rtt_p99_us", _D, True), ("rtt_max_us", _L, True))

MAP_SIZES = _struct(*_KEY, ("bucket_start", _T, False), *((g, _L, True) for g in MAP_GAUGES))

ROUTER_MAPS = _struct(("router", _S, False), ("bucket_start", _T, False), ("interest_topics", _L, True),
                      ("interest_patterns", _L, True), ("receiver_topics", _L, True), ("proxy_sources", _L, True))

FLEET = _struct(("router", _S, False), ("portals", _L, False), ("peer_portals", _L, False),
                ("first_ts", _T, False), ("last_ts", _T, False), ("hours", _D, False),
                ("worker_restarts", _L, False), ("counter_resets", _L, False),
                *((m, _L, True) for m in MEASURES), ("dropped", _L, True), ("drop_fraction", _D, True),
                ("peak_msgs_out_per_s", _D, True), ("peak_interest_topics", _L, True),
                ("peak_interest_patterns", _L, True), ("worst_rtt_p99_us", _D, True))


def conform(frame: DataFrame, schema: StructType) -> DataFrame:
    """Exactly `schema`'s columns, in its order, cast to its types (as SQL: one JVM call, not dozens)."""
    return frame.selectExpr(*[f"CAST({f.name} AS {f.dataType.simpleString()}) AS {f.name}" for f in schema.fields])

