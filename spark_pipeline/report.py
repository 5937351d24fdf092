"""The one-page HTML report: the fleet summary inline, the charts, and links to every table.

Plain HTML with relative links, so the report directory can be copied, zipped or served as is.
"""
from __future__ import annotations

import datetime as dt
import html
import os
from pathlib import Path

STYLE = """body{font-family:sans-serif;margin:2em;max-width:1100px}
table{border-collapse:collapse;font-size:small}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#eee}td:first-child{text-align:left}img{max-width:100%;border:1px solid #ddd;margin:.5em 0}
.muted{color:#666;font-size:small}"""

FLEET_COLUMNS = (("router", "router"), ("portals", "portals"), ("hours", "hours"),
                 ("msgs_in", "msgs in"), ("msgs_out", "msgs out"), ("dropped", "dropped"),
                 ("drop_fraction", "drop %"), ("peak_msgs_out_per_s", "peak msgs/s"),
                 ("worker_restarts", "worker restarts"), ("counter_resets", "counter resets"),
                 ("peak_interest_topics", "peak topics"), ("worst_rtt_p99_us", "worst RTT p99 µs"))


def _cell(key: str, value) -> str:
    if value is None:
        return ""
    if key == "drop_fraction":
        return f"{100 * value:.4g}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return html.escape(str(value))


def fleet_table(fleet: list[dict]) -> str:
    head = "".join(f"<th>{html.escape(title)}</th>" for _, title in FLEET_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{_cell(k, row.get(k))}</td>" for k, _ in FLEET_COLUMNS) + "</tr>"
                   for row in fleet)
    return f"<table><tr>{head}</tr>{body}</table>"


def _link(path: Path, base: Path, text: str) -> str:
    return f'<a href="{html.escape(os.path.relpath(path, base))}">{html.escape(text)}</a>'


def write_report(output: Path, facts: dict, fleet: list[dict], charts: list[tuple[str, Path]],
                 tables: dict[str, tuple[Path | None, Path]], notes: list[str]) -> Path:
    """`tables`: name -> (csv path or None, parquet path); `charts`: (caption, png path)."""
    first = dt.datetime.fromtimestamp(facts["first_us"] / 1e6, dt.timezone.utc)
    last = dt.datetime.fromtimestamp(facts["last_us"] / 1e6, dt.timezone.utc)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>umrouter statistics</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>umrouter statistics</h1>",
        f"<p>{facts['rows']:,} rows from {facts['routers']} routers, {facts['portals']} portals, "
        f"{first:%Y-%m-%d %H:%M:%S} to {last:%Y-%m-%d %H:%M:%S} UTC; charts in {facts['bucket_s']} s buckets. "
        f"<span class='muted'>Input {html.escape(str(facts['input']))}, generated "
        f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M:%S} UTC.</span></p>",
        "<h2>Fleet</h2>", fleet_table(fleet),
        "<p class='muted'>Counters are cumulative; rates come from per-interval deltas. A worker restart "
        "keeps the totals (the counters live in the supervisor's shared memory), a counter reset starts "
        "them again: neither produces a negative or doubled rate.</p>",
    ]
    parts += [f"<p class='muted'>{html.escape(note)}</p>" for note in notes]
    for caption, png in charts:
        parts.append(f"<h3>{html.escape(caption)}</h3><img src='{html.escape(os.path.relpath(png, output))}' "
                     f"alt='{html.escape(caption)}'>")
    parts.append("<h2>Tables</h2><ul>")
    for name, (csv_file, parquet_dir) in tables.items():
        links = [_link(csv_file, output, "CSV")] if csv_file else []
        links.append(_link(parquet_dir, output, "Parquet"))
        parts.append(f"<li><b>{html.escape(name)}</b>: {' · '.join(links)}</li>")
    parts.append("</ul></body></html>")
    path = output / "index.html"
    path.write_text("\n".join(parts))
    return path
