"""Synthetic router statistics in the sink's layout, for benchmarking and trying the pipeline.

Several routers × portals × intervals (default 1 000 000 rows), written exactly as the Parquet sink
writes them (`router=NAME/date=YYYY-MM-DD/part-NNNNN.parquet`, one file per UTC hour, the sink's
schema and metadata). The traffic has a daily shape; workers restart now and then (totals
continue, as the router's do); each router restarts once (new counters_epoch, totals from zero);
some portals drop in bursts; peer portals have keepalive RTT; interest maps grow; a few intervals
are missing. `truth` holds the messages each router really sent, for checking the pipeline.

    .venv/bin/python -m bench.make_synthetic_stats --output /tmp/stats [--rows 1000000]
"""
from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
from pathlib import Path

import numpy as np

from router.monitor import stats_schema

START = dt.datetime(2026, 1, 5, tzinfo=dt.timezone.utc)
INTERVAL_S = 5
PORTALS = ("LAN1", "LAN2", "LAN3", "DC1", "DC2", "PEER_EAST", "PEER_WEST", "WAN")


def plan(rows: int, routers: int) -> int:
    """Intervals per portal so that routers × portals × intervals ≈ rows."""
    return max(2, rows // (routers * len(PORTALS)))


def portal_columns(rng, intervals: int, restart_at: int, kind: str, base_pid: int) -> dict:
    """One portal's columns over the run (numpy arrays), plus its true messages sent."""
    seconds = np.arange(intervals) * INTERVAL_S
    shape = 1.2 + np.sin(2 * np.pi * seconds / 86400)                 # a day's rise and fall
    rate = rng.uniform(200, 5000) * shape
    sent = rng.poisson(rate * INTERVAL_S)
    received = rng.poisson(rate * INTERVAL_S * 0.8)
    burst = rng.random(intervals) < 0.002
    would_block = np.where(burst, rng.poisson(sent * 0.05), 0)
    queue_failure = np.where(rng.random(intervals) < 0.0005, rng.poisson(20, intervals), 0)
    deltas = {"sent": sent, "received": received, "would_block": would_block, "queue_failure": queue_failure}
    for values in deltas.values():
        values[0] = values[restart_at] = 0                             # each epoch's first row is its baseline
    epoch_of = (np.arange(intervals) >= restart_at).astype(np.int64)

    def cumulative(values):
        total = np.cumsum(values)
        return total - np.where(epoch_of == 1, total[restart_at - 1], 0)

    size = 64 if kind == "endpoint" else 512
    prefix = "transport_topic_fragment" if kind == "endpoint" else "data_fragment"
    columns = {
        f"{prefix}s_sent": cumulative(sent), f"{prefix}_bytes_sent": cumulative(sent * size),
        f"{prefix}s_dropped_would_block": cumulative(would_block),
        f"{prefix}_bytes_dropped_would_block": cumulative(would_block * size),
        f"{prefix}s_dropped_queue_failure": cumulative(queue_failure),
        f"{prefix}_bytes_dropped_queue_failure": cumulative(queue_failure * size),
    }
    received_name = ("transport_topic_fragments_rcvd", "transport_topic_fragment_bytes_rcvd") \
        if kind == "endpoint" else ("data_msgs_rcvd", "data_msg_bytes_rcvd")
    columns[received_name[0]], columns[received_name[1]] = cumulative(received), cumulative(received * size)
    topics = np.maximum(0, np.cumsum(rng.integers(-1, 3, intervals)) // 10)
    columns.update(local_interest_topics=topics, receiver_topics=topics // 2,
                   local_interest_pcre_patterns=topics // 50, proxy_sources=topics // 3)
    if kind == "peer":
        samples = cumulative(np.ones(intervals, dtype=np.int64))
        rtt = rng.gamma(4.0, 60.0, intervals).astype(np.int64) + 50
        running_mean = np.cumsum(rtt) / np.maximum(1, np.arange(1, intervals + 1))
        columns.update(rtt_samples=samples, rtt_mean=running_mean.astype(np.int64),
                       rtt_min=np.minimum.accumulate(rtt), rtt_max=np.maximum.accumulate(rtt))
    restarts = np.cumsum(rng.random(intervals) < 0.0003) * (epoch_of == 0)
    columns["worker_restarts"] = restarts
    columns["worker_pid"] = base_pid + restarts + 1000 * epoch_of
    columns["epoch_index"] = epoch_of
    return columns, int(sent.sum())


def kind_of(portal: str) -> str:
    return "peer" if portal.startswith("PEER") else "endpoint"


def router_table(rng, name: str, intervals: int):
    """One router's rows, ordered by time then portal, and the messages it truly sent."""
    import pyarrow as pa
    restart_at = int(rng.integers(intervals // 3, 2 * intervals // 3))
    count, width = intervals * len(PORTALS), len(PORTALS)
    # Row r is interval r // width of portal r % width: a portal's column is a stride of width.
    data = {column: np.zeros(count, dtype=np.int64) for column, kind, _ in stats_schema.COLUMNS if kind == "int64"}
    epoch_index, truth = np.zeros(count, dtype=np.int64), 0
    for index, portal in enumerate(PORTALS):
        columns, sent = portal_columns(rng, intervals, restart_at, kind_of(portal), 10_000 + 100 * index)
        truth += sent
        epoch_index[index::width] = columns.pop("epoch_index")
        for column, values in columns.items():
            data[column][index::width] = values
    start_us = int(START.timestamp() * 1e6)
    step_us = INTERVAL_S * 1_000_000
    data["ts"] = start_us + np.repeat(np.arange(intervals, dtype=np.int64) * step_us, width)
    data["counters_epoch"] = np.array([start_us, start_us + restart_at * step_us])[epoch_index]
    data["router"] = np.full(count, name)
    data["portal"] = np.tile(np.array(PORTALS), intervals)
    data["portal_kind"] = np.tile(np.array([kind_of(p) for p in PORTALS]), intervals)
    data["domain_id"] = np.tile(np.arange(1, width + 1, dtype=np.int64), intervals)
    schema = stats_schema.arrow_schema()
    table = pa.Table.from_arrays([pa.array(data[f.name], type=f.type) for f in schema], schema=schema)
    keep = rng.random(intervals) >= 0.001                   # a few missing intervals...
    keep[[0, restart_at, -1]] = True                        # ...but never an epoch's first row, nor the last
    return table.filter(pa.array(np.repeat(keep, width))), truth


def write_hourly(table, root: Path, router: str) -> int:
    """Split by UTC hour into part files, as the sink's rotation does."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    hours = pc.floor_temporal(table["ts"], unit="hour")
    files = 0
    for hour in pc.unique(hours).to_pylist():
        part = table.filter(pc.equal(hours, hour))
        directory = root / f"router={router}" / f"date={hour:%Y-%m-%d}"
        directory.mkdir(parents=True, exist_ok=True)
        files += 1
        pq.write_table(part, directory / f"part-{hour.hour + 1:05d}.parquet", compression="zstd")
    return files


def generate(output: Path, rows: int = 1_000_000, routers: int = 5, seed: int = 6) -> dict:
    if output.exists():
        shutil.rmtree(output)
    rng = np.random.default_rng(seed)
    intervals = plan(rows, routers)
    summary = {"rows": 0, "files": 0, "routers": routers, "portals": routers * len(PORTALS),
               "intervals": intervals, "hours": intervals * INTERVAL_S / 3600, "truth": {}}
    for number in range(routers):
        name = f"router{number + 1:02d}"
        table, sent = router_table(rng, name, intervals)
        summary["files"] += write_hourly(table, output, name)
        summary["rows"] += table.num_rows
        summary["truth"][name] = sent
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--routers", type=int, default=5)
    args = parser.parse_args(argv)
    summary = generate(args.output, args.rows, args.routers)
    print(f"{summary['rows']:,} rows in {summary['files']} files under {args.output} "
          f"({summary['routers']} routers, {summary['portals']} portals, {summary['hours']:.1f} h)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
