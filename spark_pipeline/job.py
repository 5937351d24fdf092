"""The pipeline, stage by stage: extract → transforms → load, with a progress line per stage.

`run(spark, input, output)` is what `python -m spark_pipeline`, `spark-submit` and `run_report`
all call; it takes a session and never builds one. Each stage ends in a Spark action (a count or
a write), so its line's time is the time that stage really took, and a long run shows where it is.
The per-interval frame is cached: every table after it reads it instead of re-sorting the input.
"""
from __future__ import annotations

import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from spark_pipeline import charts, load
from spark_pipeline.deltas import interval_rows, intervals_table
from spark_pipeline.extract import describe, left_out, read_stats, statistics_rows
from spark_pipeline.fleet import fleet_summary
from spark_pipeline.gauges import map_sizes, router_map_sizes, rtt_percentiles
from spark_pipeline.report import write_report
from spark_pipeline.session import size_shuffles
from spark_pipeline.traffic import (choose_bucket_seconds, drops_by_reason, portal_rates, portal_totals,
                                    router_rates, segments)

STAGES = 12


@dataclass
class Result:
    report: Path
    facts: dict
    tables: dict[str, list[dict]] = field(default_factory=dict)   # the small tables' rows
    seconds: dict[str, float] = field(default_factory=dict)       # per stage


class Progress:
    def __init__(self, say):
        self.say, self.done, self.seconds = say, 0, {}
        self.started = time.monotonic()

    @contextmanager
    def stage(self, name: str):
        self.done += 1
        began = time.monotonic()
        self.say(f"[{self.done}/{STAGES}] {name} ...")
        yield
        took = self.seconds[name] = time.monotonic() - began
        self.say(f"[{self.done}/{STAGES}] {name} done in {took:.1f} s "
                 f"(total {time.monotonic() - self.started:.1f} s)")


def run(spark, input_path, output: Path, bucket_seconds: int | None = None, say=print, warn=None) -> Result:
    """`say`: progress lines; `warn`: what the input held that the report leaves out (default `say`)."""
    warn = warn or say
    output = Path(output).resolve()
    output.mkdir(parents=True, exist_ok=True)
    progress = Progress(say)
    with progress.stage("extract"):
        stats = read_stats(spark, input_path)
        facts = describe(stats, input_path)
        stats = statistics_rows(stats)
        for line in left_out(facts):
            warn(line)
        facts.update(input=str(input_path), bucket_s=bucket_seconds or choose_bucket_seconds(facts["span_s"]),
                     partitions=size_shuffles(spark, facts["rows"]))
        say(f"    {facts['rows']:,} rows, {facts['routers']} routers, {facts['portals']} portals, "
            f"{facts['span_s']:.0f} s span, {facts['bucket_s']} s chart buckets, "
            f"{facts['partitions']} shuffle partitions")
    bucket = facts["bucket_s"]
    with progress.stage("interval deltas"):
        rows = interval_rows(stats).persist()
        rows.count()
    result = Result(report=output / "index.html", facts=facts)
    try:
        with progress.stage("intervals table"):
            load.write_parquet(intervals_table(rows), output, "intervals")
        tables = result.tables
        with progress.stage("segments"):
            tables["segments"] = load.write_table(segments(rows), output, "segments")
        with progress.stage("portal rates"):
            rates_frame = portal_rates(rows, bucket)
            tables["portal_rates"] = load.write_table(rates_frame, output, "portal_rates")
            tables["router_rates"] = load.write_table(router_rates(rates_frame), output, "router_rates")
        with progress.stage("portal totals"):
            totals_frame = portal_totals(rows)
            tables["portal_totals"] = load.write_table(totals_frame, output, "portal_totals")
        with progress.stage("drops"):
            tables["drops"] = load.write_table(drops_by_reason(rows), output, "drops")
        with progress.stage("rtt"):
            rtt_frame = rtt_percentiles(rows)
            tables["rtt"] = load.write_table(rtt_frame, output, "rtt")
        with progress.stage("map sizes"):
            sizes = map_sizes(rows, bucket)
            tables["map_sizes"] = load.write_table(sizes, output, "map_sizes")
            tables["router_map_sizes"] = load.write_table(router_map_sizes(sizes), output, "router_map_sizes")
        with progress.stage("fleet summary"):
            fleet = fleet_summary(rows, totals_frame, router_rates(rates_frame), router_map_sizes(sizes), rtt_frame)
            tables["fleet_summary"] = load.write_table(fleet, output, "fleet_summary")
    finally:
        rows.unpersist()
    with progress.stage("charts"):
        drawn, notes = draw_charts(tables, output / "charts")
    with progress.stage("report"):
        links = {name: (load.csv_path(output, name), load.parquet_path(output, name)) for name in tables}
        links["intervals"] = (None, load.parquet_path(output, "intervals"))
        result.report = write_report(output, facts, tables["fleet_summary"], drawn, links, left_out(facts) + notes)
    result.seconds = progress.seconds
    say(f"report: {result.report}")
    return result


def draw_charts(tables: dict[str, list[dict]], directory: Path) -> tuple[list[tuple[str, Path]], list[str]]:
    drawn = [("Fleet: messages sent and dropped", charts.fleet_rates(tables["router_rates"],
                                                                   directory / "fleet_rates.png"))]
    busiest = charts.busiest_routers(tables["fleet_summary"])
    for rank, router in enumerate(busiest, 1):
        # Numbered: names that differ only in characters a file name cannot keep ("ny 1", "ny/1")
        # would otherwise share one file, and each caption would show the last router's chart.
        png = directory / f"rates_{rank:02d}_{re.sub(r'[^A-Za-z0-9_.-]', '_', router)}.png"
        drawn.append((f"Router {router}: rates by portal", charts.router_rates(tables["portal_rates"], router, png)))
    drawn.append(("Drops by reason", charts.drops(tables["drops"], directory / "drops.png")))
    drawn.append(("Keepalive RTT", charts.rtt(tables["rtt"], directory / "rtt.png")))
    drawn.append(("Interest maps over time", charts.interest(tables["router_map_sizes"], directory / "interest.png")))
    notes = []
    if len(tables["fleet_summary"]) > len(busiest):
        notes.append(f"Per-router rate charts show the {len(busiest)} busiest of {len(tables['fleet_summary'])} "
                     "routers; the tables have them all.")
    return drawn, notes
