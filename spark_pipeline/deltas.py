"""Per-interval counter deltas that stay right across worker restarts, counter resets and gaps.

The router's counters are cumulative (router/monitor/stats_schema.py). Their shared segment
belongs to the supervisor, so a restarted worker *continues* its predecessor's totals; counters
start again from zero only with a new segment, which the sink marks with a new `counters_epoch`.
The delta of a counter in the interval ending at row r (previous row p of the same portal):

  same epoch, value did not go down   r - p        also across a worker restart: counters continued
  same epoch, value went down         r            a writer whose restarted workers reset their
                                                   counters: r is everything since the reset
  new epoch, r is its first row       r            the segment was created at most one interval ago
  otherwise (no earlier row, or the   null         history before the data set is unknown; a null is
  epoch began before the data set)                 left out of totals, never guessed

So a rate is never negative (no subtraction across a reset) and never doubled (a restart that kept
the totals is not treated as a reset). A missing interval only makes `interval_s` longer: the delta
covers both intervals and the rate over them is their average, not a spike.

"Previous" is in the order the sink read the counters, not in wall-clock order: `ts` is the wall
clock, which NTP or an operator can step back (a VM resumed, a host synchronised after the router
started), and rows read after such a step carry earlier times than rows read before it. In `ts`
order their counters would seem to fall and rise again, and every fall would count the whole total
once more. So rows are ordered by epoch, then by `heartbeat_ns`, then by `ts`: `heartbeat_ns` is
the host's monotonic clock (never stepped), written by the worker at every beat and by the
supervisor when it starts one, so within an epoch it never goes back, restarts included. An interval
whose wall-clock length is not positive has no known length (its deltas still count in totals).

The expressions are SQL strings on purpose: built from Column objects, this frame took thousands
of Python→JVM calls (seconds per query on any input); as SQL it is one call per column.

A *segment* is a run of rows with one worker process and one counter epoch; `segment` numbers them
per portal and `began_with` says why each began (first, worker_restart, counters_reset).
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_pipeline.schemas import DROP_BYTES, DROP_REASONS, INTERVALS, MAP_GAUGES, MEASURES, STATS, conform

# Reading order (see above): data sets without heartbeats (zeros, nulls) fall back to `ts`.
BY_PORTAL = "PARTITION BY router, portal ORDER BY counters_epoch, heartbeat_ns, ts"
TRAFFIC_COUNTERS = tuple(dict.fromkeys(
    c for group in (*MEASURES.values(), *DROP_REASONS.values(), *DROP_BYTES.values()) for c in group))
# A running total of RTT: its delta over the samples' delta is the interval's mean. Exact when the
# peer counters keep a sum (`rtt_sum_us`, if a later schema adds it); otherwise mean × samples.
RTT_TOTAL = "rtt_total_us"
RTT_SUM = "rtt_sum_us"
_CARRIED = ("counters_epoch", "worker_pid", "worker_restarts")
_RTT_GAUGES = ("rtt_min", "rtt_max")
SAME_EPOCH = "prev_counters_epoch = counters_epoch"


def with_previous(stats: DataFrame, columns: tuple[str, ...]) -> DataFrame:
    """`stats` plus `prev_<c>`: the same portal's previous row's value, for `ts`, the segment
    identity and `columns`."""
    wanted = ("ts", *_CARRIED, *columns)
    return stats.selectExpr("*", *[f"lag({c}) OVER ({BY_PORTAL}) AS prev_{c}" for c in wanted])


def delta(counter: str, reset_by: str | None = None) -> str:
    """The table in the module docstring, as SQL. `reset_by` judges the reset on another counter
    (a derived total whose rounding may wobble follows its sample count)."""
    judge = reset_by or counter
    return (f"CASE WHEN {SAME_EPOCH} AND {judge} < prev_{judge} THEN {counter} "
            f"WHEN {SAME_EPOCH} THEN greatest({counter} - prev_{counter}, 0) "
            f"WHEN ts = counters_epoch THEN {counter} END")


def began_with(counters: tuple[str, ...]) -> str:
    """Why a segment starts at this row, or null when the row continues one."""
    went_down = " OR ".join(f"coalesce({c} < prev_{c}, false)" for c in counters)
    new_worker = "NOT (worker_pid <=> prev_worker_pid) OR worker_restarts != prev_worker_restarts"
    return (f"CASE WHEN prev_ts IS NULL THEN 'first' "
            f"WHEN NOT ({SAME_EPOCH}) OR {went_down} THEN 'counters_reset' "
            f"WHEN {new_worker} THEN 'worker_restart' END")


def total(parts) -> str:
    """Sum of counters where null means unknown: null only if every part is. Each measure adds
    the endpoint and the peer counter; a portal kind leaves the other's at zero."""
    parts = list(parts)
    if len(parts) == 1:
        return parts[0]
    return f"CASE WHEN coalesce({', '.join(parts)}) IS NULL THEN NULL " \
           f"ELSE {' + '.join(f'coalesce({p}, 0)' for p in parts)} END"


def interval_rows(stats: DataFrame) -> DataFrame:
    """The wide per-interval frame every later table is built from (cache it): INTERVALS' columns
    plus the segment identity (`worker_pid`, `worker_restarts`, `counters_epoch`, `began_with`)
    and the RTT extremes (`rtt_min`, `rtt_max`)."""
    from_mean = "CAST(rtt_mean AS DOUBLE) * rtt_samples"
    total_rtt = f"coalesce(CAST({RTT_SUM} AS DOUBLE), {from_mean})" if RTT_SUM in STATS.fieldNames() else from_mean
    derived = stats.withColumn(RTT_TOTAL, F.expr(total_rtt))
    staged = with_previous(derived, (*TRAFFIC_COUNTERS, "rtt_samples", RTT_TOTAL))
    kept = ("router", "portal", "portal_kind", "ts", "heartbeat_ns", *_CARRIED, *MAP_GAUGES, *_RTT_GAUGES)
    deltas = staged.selectExpr(
        *kept,
        f"CASE WHEN {SAME_EPOCH} AND ts > prev_ts THEN (unix_micros(ts) - unix_micros(prev_ts)) / 1e6 END "
        "AS interval_s",
        f"{began_with(TRAFFIC_COUNTERS)} AS began_with",
        *[f"{delta(c)} AS {c}" for c in (*TRAFFIC_COUNTERS, "rtt_samples")],
        f"{delta(RTT_TOTAL, reset_by='rtt_samples')} AS {RTT_TOTAL}")
    drops = {f"dropped_{reason}": total(counters) for reason, counters in DROP_REASONS.items()}
    drop_bytes = {f"dropped_bytes_{reason}": total(counters) for reason, counters in DROP_BYTES.items()}
    return deltas.selectExpr(
        *kept, "interval_s", "began_with",
        f"sum(CAST(began_with IS NOT NULL AS BIGINT)) OVER ({BY_PORTAL} "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS segment",
        *[f"{total(counters)} AS {measure}" for measure, counters in MEASURES.items()],
        f"{total(f'({e})' for e in drops.values())} AS dropped",
        *[f"{expression} AS {name}" for name, expression in {**drops, **drop_bytes}.items()],
        "rtt_samples", f"{interval_rtt()} AS rtt_mean_us")


def interval_rtt() -> str:
    """The interval's mean RTT. The counter's running mean is whole µs, so mean × samples carries a
    rounding error that grows with the sample count (after a few thousand samples an interval's
    mean is mostly the running mean: the percentiles narrow); no single sample lies outside the
    running min and max, so neither can the interval's mean: clamping there bounds that error."""
    mean = f"{RTT_TOTAL} / rtt_samples"
    return (f"CASE WHEN rtt_samples > 0 AND rtt_max > 0 "
            f"THEN least(greatest({mean}, CAST(rtt_min AS DOUBLE)), CAST(rtt_max AS DOUBLE)) "
            f"WHEN rtt_samples > 0 THEN {mean} END")


def intervals_table(rows: DataFrame) -> DataFrame:
    return conform(rows, INTERVALS)
