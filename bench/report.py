"""Writing benchmark results into BENCHMARKS.md: one `## Section` per benchmark, replaced whole."""
from __future__ import annotations

import datetime
import platform
import re
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def machine() -> str:
    import os
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def refuse_arguments(doc: str) -> None:
    """For a benchmark that takes no arguments, run as a program: any argument (`--help`, a typo)
    prints what the benchmark measures and exits 2, instead of a run of minutes that rewrites
    BENCHMARKS.md."""
    if sys.argv[1:]:
        print(doc, file=sys.stderr)
        sys.exit(2)


def write_section(title: str, body: str, command: str) -> None:
    """Replace (or append) the section `## title` with `body`, stamped with date and command."""
    stamp = (f"Measured {datetime.date.today().isoformat()} on {machine()} with:\n\n"
             f"```sh\n{command}\n```\n\n")
    section = f"## {title}\n\n{stamp}{body.rstrip()}\n"
    text = BENCHMARKS.read_text() if BENCHMARKS.exists() else "# Benchmarks\n\nRun them all with `make bench`.\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text)
    else:
        text = text.rstrip() + "\n\n" + section
    BENCHMARKS.write_text(text.rstrip() + "\n")


def table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
