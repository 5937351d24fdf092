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

from bench.report import refuse_arguments, table, write_section

ROOT = Path(__file__).resolve().parents[1]
COMMAND = "python -m bench.direct_bench"


def domain_config(directory: str, udp_rate_limit: int = 1_000_000_000) -> str:
    """The bench's domain, its LBT-RM and LBT-RU sources limited to `udp_rate_limit` bits/s."""
    path = Path(directory) / f"bench-{udp_rate_limit}.cfg"
    port = 11000 + os.getpid() % 5000
    path.write_text(f"context resolver_multicast_address 239.199.1.{os.getpid() % 200 + 1}\n"
                    f"context resolver_multicast_port {port}\n"
                    "context resolver_multicast_interface 127.0.0.1\n"
                    "context transport_tcp_port_low 16371\ncontext transport_tcp_port_high 16390\n"
                    # LBT-RM on a group of its own, at the given rate (UM's default 10 Mbit/s would be
                    # the figure otherwise); retransmissions within UM's default 5 Mbit/s. The rate
                    # limiter lets one rate interval's allowance out at once: at 1 Gbit/s UM's
                    # default 100 ms is a 12.5 MB burst, more than a receive buffer holds, so 10 ms.
                    f"context transport_lbtrm_multicast_address_low 239.199.2.{os.getpid() % 200 + 1}\n"
                    f"context transport_lbtrm_multicast_address_high 239.199.2.{os.getpid() % 200 + 1}\n"
                    f"context transport_lbtrm_destination_port {port + 1}\n"
                    "context transport_lbtrm_source_port_low 16371\ncontext transport_lbtrm_source_port_high 16390\n"
                    f"context transport_lbtrm_data_rate_limit {udp_rate_limit}\n"
                    "context transport_lbtrm_rate_interval 10\n"
                    # LBT-RU likewise, with LBT-RM's 8 MB receive buffer (UM's LBT-RU default is 512 KB).
                    "context transport_lbtru_port_low 16371\ncontext transport_lbtru_port_high 16390\n"
                    "receiver transport_lbtru_port_low 16391\nreceiver transport_lbtru_port_high 16395\n"
                    f"context transport_lbtru_data_rate_limit {udp_rate_limit}\n"
                    "context transport_lbtru_rate_interval 10\n"
                    "context transport_lbtru_receiver_socket_buffer 8388608\n")
    return str(path)


def run_pair(config: str, count: int, length: int, source_args: tuple = (), timeout: float = 300,
             receiver_env: dict | None = None) -> tuple[dict, dict]:
    """One receiver and one source, bounded in count and time; returns both JSON summaries."""
    python = sys.executable
    receiver = subprocess.Popen([python, "-m", "router.cli.umrcv", "-c", config, "--json", "-C", str(count),
                                 "--timeout", str(timeout), "bench.topic"], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                                env={**os.environ, **(receiver_env or {})})
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


LBTRM_NOTES = """\
LBT-RM runs with a 10 ms rate interval and `transport_lbtrm_data_rate_limit` 300 Mbit/s for 64 B
messages, 1 Gbit/s for 8 KB; 8 KB messages are two datagrams each (8192 bytes do not fit one with
its headers) and go at that rate. LBT-RM has no flow control, in UM as here: the limit must be what
the slowest receiver takes, with room to spare. umrcv takes 64-byte messages over LBT-RM (a 2 KB
datagram at a time) at some 850,000 a second on a quiet host and far fewer on a busy one, and
umsrc sends them faster than that: at 1 Gbit/s the kernel dropped a quarter to a third of them,
at 500 Mbit/s none in one run and a third in another an hour later (the host slower: see the
LBT-IPC row beside it). The lossy rows drop 1% of the DATA datagrams at the receiver (LBTRM_LOSS_RATE=1): paced
below what the receiver takes, every loss is NAKed and repaired (0 lost). Unpaced, the source
outruns a receiver that is also repairing: the kernel drops what the receiver cannot read in
time, more than UM's default 5 Mbit/s retransmit rate can repair, and the receiver gives up the
rest after `transport_lbtrm_nak_generation_interval`. LBT-RU runs at the same rates and interval,
its receiver with an 8 MB socket buffer; its source sends each datagram to each connected receiver
(one here) and repairs that receiver's loss alone."""


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        # By message size: the LBT-RM and LBT-RU rate limit (LBTRM_NOTES); TCP and LBT-IPC have none.
        configs = {64: domain_config(directory, 300_000_000), 8192: domain_config(directory, 1_000_000_000)}
        # (transport, length, count, % of datagrams the receiver loses, source pace in msgs/s)
        for transport, length, count, loss, pace in (
                ("tcp", 64, 1_000_000, 0, 0), ("tcp", 8192, 100_000, 0, 0),
                ("lbtipc", 64, 1_000_000, 0, 0), ("lbtipc", 8192, 100_000, 0, 0),
                ("lbtrm", 64, 1_000_000, 0, 0), ("lbtrm", 8192, 100_000, 0, 0),
                ("lbtrm", 64, 1_000_000, 1, 100_000), ("lbtrm", 64, 1_000_000, 1, 0),
                ("lbtru", 64, 1_000_000, 0, 0), ("lbtru", 8192, 100_000, 0, 0),
                ("lbtru", 64, 1_000_000, 1, 100_000)):
            sent, got = run_pair(configs[length], count, length, ("-T", transport) + (("-P", pace) if pace else ()),
                                 timeout=60 if loss else 300,     # what loss takes is not waited for long
                                 receiver_env={f"{transport.upper()}_LOSS_RATE": str(loss)} if loss else None)
            mb_s = got["rate_msgs_per_s"] * length / 1e6
            case = f"{transport} throughput {length} B"
            if loss:
                case += f", {loss}% of datagrams lost, " + (f"paced at {pace:,} msgs/s" if pace else "unpaced")
            rows.append([case, count, f"{got['rate_msgs_per_s']:,.0f}", f"{mb_s:,.1f}",
                         f"{sent['rate_msgs_per_s']:,.0f}", got["gaps"] + got["duplicates"],
                         "", ""])
        for rate in (1000, 10000):
            sent, got = run_pair(configs[64], rate * 5, 64, ("-P", rate, "-F"))
            rows.append([f"tcp latency at {rate} msgs/s, 64 B, flush", rate * 5, f"{got['rate_msgs_per_s']:,.0f}", "",
                         "", got["gaps"] + got["duplicates"],
                         got["latency_us"]["p50"], got["latency_us"]["p99"]])
    body = table(["case", "messages", "receiver msgs/s", "MB/s", "source msgs/s", "lost+dup", "p50 µs", "p99 µs"], rows)
    body += "\n\n" + LBTRM_NOTES
    print(body)
    write_section("Direct path: umsrc → umrcv over LBT-TCP, LBT-IPC, LBT-RM and LBT-RU", body, COMMAND)
    return 0


if __name__ == "__main__":
    refuse_arguments(__doc__)
    sys.exit(main())
