"""The direct path: umsrc -> umrcv over LBT-TCP and LBT-IPC in one loopback domain.

This is the baseline the router is measured against: throughput at 64 B and 8 KB, and latency at
a paced rate. Run: `python -m bench.direct_bench` (or `make bench`).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.report import table, write_section

ROOT = Path(__file__).resolve().parents[1]
COMMAND = "python -m bench.direct_bench"


def domain_config(directory: str, extra: str = "") -> str:
    path = Path(directory) / "bench.cfg"
    port = 11000 + os.getpid() % 5000
    path.write_text(f"context resolver_multicast_address 239.199.1.{os.getpid() % 200 + 1}\n"
                    f"context resolver_multicast_port {port}\n"
                    "context resolver_multicast_interface 127.0.0.1\n"
                    "context transport_tcp_port_low 16371\ncontext transport_tcp_port_high 16390\n" + extra)
    return str(path)


def run_pair(config: str, count: int, length: int, source_args: tuple = (), timeout: float = 300) -> tuple[dict, dict]:
    """One receiver and one source, bounded in count and time; returns both JSON summaries."""
    python = sys.executable
    receiver = subprocess.Popen([python, "-m", "router.cli.umrcv", "-c", config, "--json", "-C", str(count),
                                 "--timeout", str(timeout), "bench.topic"], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    source = subprocess.Popen([python, "-m", "router.cli.umsrc", "-c", config, "--json", "-M", str(count),
                               "-l", str(length), *map(str, source_args), "bench.topic"],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        sent = json.loads(source.communicate(timeout=timeout)[0].splitlines()[-1])
        got = json.loads(receiver.communicate(timeout=timeout)[0].splitlines()[-1])
    finally:
        for proc in (source, receiver):
            if proc.poll() is None:
                proc.kill()
    return sent, got


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        config = domain_config(directory)
        for transport, length, count in (("tcp", 64, 1_000_000), ("tcp", 8192, 100_000),
                                         ("lbtipc", 64, 1_000_000), ("lbtipc", 8192, 100_000)):
            sent, got = run_pair(config, count, length, ("-T", transport))
            mb_s = got["rate_msgs_per_s"] * length / 1e6
            rows.append([f"{transport} throughput {length} B", count, f"{got['rate_msgs_per_s']:,.0f}", f"{mb_s:,.1f}",
                         f"{sent['rate_msgs_per_s']:,.0f}", got["gaps"] + got["duplicates"],
                         "", ""])
        for rate in (1000, 10000):
            sent, got = run_pair(config, rate * 5, 64, ("-P", rate, "-F"))
            rows.append([f"tcp latency at {rate} msgs/s, 64 B, flush", rate * 5, f"{got['rate_msgs_per_s']:,.0f}", "",
                         "", got["gaps"] + got["duplicates"],
                         got["latency_us"]["p50"], got["latency_us"]["p99"]])
    body = table(["case", "messages", "receiver msgs/s", "MB/s", "source msgs/s", "lost+dup", "p50 µs", "p99 µs"], rows)
    print(body)
    write_section("Direct path: umsrc → umrcv over LBT-TCP and LBT-IPC", body, COMMAND)
    return 0


if __name__ == "__main__":
    sys.exit(main())
