"""Plain-text tables and durations for routerctl's human output (never used with --json)."""
from __future__ import annotations


def table(headers: list[str], rows: list[list], right: set[int] | None = None) -> str:
    """Columns padded to their widest cell; numeric columns (indexes in `right`) right-aligned."""
    cells = [[str(h) for h in headers]] + [["-" if value is None else str(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    right = right if right is not None else _numeric_columns(rows)
    lines = []
    for row in cells:
        padded = [cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)


def _numeric_columns(rows: list[list]) -> set[int]:
    if not rows:
        return set()
    return {i for i in range(len(rows[0]))
            if all(isinstance(row[i], (int, float)) or row[i] is None for row in rows)}


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def rate(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}"


def key_values(pairs: list[tuple[str, object]]) -> str:
    width = max((len(key) for key, _ in pairs), default=0)
    return "\n".join(f"{key.ljust(width)}  {value}" for key, value in pairs)
