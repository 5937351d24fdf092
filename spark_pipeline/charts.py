"""PNG charts (matplotlib, no display needed) from the collected result tables.

Each function takes rows as `load.collect` returns them and writes one file; a chart with nothing
to show says so in the picture instead of being left out, so the report's layout never changes.
Per-router charts are drawn for the busiest routers only (MAX_ROUTER_CHARTS) to keep the report
one page; every router is still in the tables.

Router and portal names are the operator's free text: every chart draws them as written, never as
TeX (matplotlib reads `$...$` as math, and a name such as `a$_$b` would stop the whole job here),
and a legend keeps a name that starts with `_` (matplotlib leaves such labels out unless told).
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")        # before pyplot: a server or CI job has no display
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

MAX_ROUTER_CHARTS = 12
MAX_DROP_BARS = 25

# Each chart function draws under this: a decorator, so every Text it makes (tick labels too) is plain.
_plain_text = matplotlib.rc_context({"text.parse_math": False})


def _series(rows: list[dict], key, x: str, y: str) -> dict:
    lines = defaultdict(lambda: ([], []))
    for row in sorted(rows, key=lambda r: r[x]):
        if row[y] is not None:
            xs, ys = lines[key(row)]
            xs.append(row[x])
            ys.append(row[y])
    return lines


def _save(figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def _empty(axes, text: str) -> None:
    axes.text(0.5, 0.5, text, ha="center", va="center", transform=axes.transAxes, color="gray")
    axes.set_xticks([])
    axes.set_yticks([])


def _lines(axes, lines: dict, title: str, ylabel: str) -> None:
    axes.set_title(title)
    axes.set_ylabel(ylabel)
    if not lines:
        _empty(axes, "no data")
        return
    handles, labels = [], []
    for label, (xs, ys) in sorted(lines.items()):
        handles += axes.plot(xs, ys, linewidth=1)
        labels.append(label)
    axes.legend(handles, labels, fontsize="small", loc="upper left")
    locator = mdates.AutoDateLocator()
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))


@_plain_text
def fleet_rates(router_rates: list[dict], path: Path) -> Path:
    figure, (out, drops) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    _lines(out, _series(router_rates, lambda r: r["router"], "bucket_start", "msgs_out_per_s"),
           "Messages sent per second, by router (all portals)", "msgs/s")
    _lines(drops, _series(router_rates, lambda r: r["router"], "bucket_start", "dropped"),
           "Messages dropped per bucket, by router", "msgs")
    return _save(figure, path)


@_plain_text
def router_rates(portal_rates: list[dict], router: str, path: Path) -> Path:
    mine = [r for r in portal_rates if r["router"] == router]
    figure, (inbound, outbound) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    _lines(inbound, _series(mine, lambda r: r["portal"], "bucket_start", "msgs_in_per_s"),
           f"{router}: messages received per second, by portal", "msgs/s")
    _lines(outbound, _series(mine, lambda r: r["portal"], "bucket_start", "msgs_out_per_s"),
           f"{router}: messages sent per second, by portal", "msgs/s")
    return _save(figure, path)


@_plain_text
def drops(drop_rows: list[dict], path: Path) -> Path:
    worst = sorted(drop_rows, key=lambda r: r["msgs_dropped"], reverse=True)[:MAX_DROP_BARS]
    figure, axes = plt.subplots(figsize=(10, max(3, 0.35 * len(worst) + 1.5)))
    axes.set_title("Drops by reason (largest first; label: fraction of the portal's traffic)")
    if not worst:
        _empty(axes, "no drops")
        return _save(figure, path)
    labels = [f"{r['router']}/{r['portal']} {r['reason']}" for r in worst][::-1]
    counts = [r["msgs_dropped"] for r in worst][::-1]
    bars = axes.barh(labels, counts, color="tab:red")
    for bar, row in zip(bars, worst[::-1]):
        axes.annotate(f" {100 * (row['fraction'] or 0):.3g}%", (bar.get_width(), bar.get_y() + bar.get_height() / 2),
                      va="center", fontsize="small")
    axes.set_xlabel("messages dropped")
    return _save(figure, path)


@_plain_text
def rtt(rtt_rows: list[dict], path: Path) -> Path:
    figure, axes = plt.subplots(figsize=(10, 4))
    axes.set_title("Keepalive RTT per peer portal (percentiles of interval means)")
    if not rtt_rows:
        _empty(axes, "no peer portal has keepalive RTT samples")
        return _save(figure, path)
    rows = sorted(rtt_rows, key=lambda r: (r["router"], r["portal"]))
    labels = [f"{r['router']}/{r['portal']}" for r in rows]
    width = 0.25
    for offset, column in enumerate(("rtt_p50_us", "rtt_p90_us", "rtt_p99_us")):
        axes.bar([i + (offset - 1) * width for i in range(len(rows))], [r[column] or 0 for r in rows],
                 width, label=column.split("_")[1])
    axes.set_xticks(range(len(rows)), labels, rotation=30, ha="right", fontsize="small")
    axes.set_ylabel("µs")
    axes.legend(fontsize="small")
    return _save(figure, path)


@_plain_text
def interest(router_maps: list[dict], path: Path) -> Path:
    figure, (topics, patterns) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    _lines(topics, _series(router_maps, lambda r: r["router"], "bucket_start", "interest_topics"),
           "Topics with local interest, by router (all portals)", "topics")
    _lines(patterns, _series(router_maps, lambda r: r["router"], "bucket_start", "interest_patterns"),
           "Wildcard patterns (PCRE + regex) with local interest, by router", "patterns")
    return _save(figure, path)


def busiest_routers(fleet: list[dict]) -> list[str]:
    ranked = sorted(fleet, key=lambda r: r["msgs_out"] or 0, reverse=True)
    return [r["router"] for r in ranked[:MAX_ROUTER_CHARTS]]
