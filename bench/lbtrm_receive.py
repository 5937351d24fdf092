"""The LBT-RM receive path in one process, side by side: this tree against an earlier revision
(or alone), on the same datagrams. What a router worker spends on an LBT-RM source's datagrams
is mostly this path (socket read, order and repair, batching and parsing the frames) plus the
ring; timed in one process, it is free of the scheduling noise of a live router on a small host.

    python -m bench.lbtrm_receive [REVISION]

A real umsrc (this tree's) sends LBT-RM at 1 Gbit/s to a umrcv in its domain while this process
captures the session's datagrams from the group; bench/lbtrm_replay.py then replays them with
each tree's `router.um`, READ datagrams per socket read (what a worker took per wake-up from
such a source: 216k reads of 100k 8 KB messages, 16k of them empty), interleaved RUNS times.
Not part of `make bench`.
"""
from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from bench import router_bench as rb
from bench.ab_router import checkout, lbtrm_source_domain, setting
from bench.report import table, write_section

CASES = ((64, 200_000), (8192, 20_000))
READ = 12
RUNS = 3
REPLAY = Path(__file__).with_name("lbtrm_replay.py")


def capture(directory: Path, size: int, count: int) -> Path:
    """The datagrams of `count` messages of `size` bytes from a umsrc on LBT-RM, as sent."""
    source_cfg = lbtrm_source_domain(rb.domain(directory, 1), 1)
    group = setting(source_cfg, "transport_lbtrm_multicast_address_low")
    port = int(setting(source_cfg, "transport_lbtrm_destination_port"))
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind((group, port))
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                    socket.inet_aton(group) + socket.inet_aton("127.0.0.1"))
    sock.settimeout(0.5)
    captured: list[bytes] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                captured.append(sock.recv(65536))
            except socket.timeout:
                pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        got = rb.um_run(source_cfg, source_cfg, count, size, ("-T", "lbtrm"), topic=f"capture.{size}")
    finally:
        done.set()
        reader.join(5)
        sock.close()
    if (got["unique"], got["gaps"]) != (count, 0):
        raise SystemExit(f"{size} B: the receiver beside the capture lost messages: {got}")
    path = directory / f"lbtrm-{size}.bin"
    path.write_bytes(b"".join(len(d).to_bytes(4, "big") + d for d in captured))
    return path


def replay(tree: Path, path: Path, n: int) -> dict:
    group = f"239.194.{os.getpid() % 200}.{n}"
    port = 15000 + (os.getpid() % 200) * 10 + n
    out = subprocess.run([rb.PYTHON, str(REPLAY), str(path), str(READ), group, str(port)], check=True,
                         capture_output=True, text=True, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                         timeout=300)
    return json.loads(out.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) > 1:
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this tree": rb.ROOT}
        if argv:
            trees = {argv[0]: checkout(argv[0], Path(tmp)), **trees}
        captures = {size: capture(Path(tempfile.mkdtemp(dir=tmp)), size, count) for size, count in CASES}
        cpu: dict[tuple[str, int], list[float]] = {}
        for _ in range(RUNS):
            for size, _count in CASES:
                for n, (name, tree) in enumerate(trees.items(), start=1):
                    got = replay(tree, captures[size], n)
                    if (got["read"], got["frames"]) != (got["datagrams"], got["frames_sent"]):
                        raise SystemExit(f"{name}, {size} B: not every datagram read or frame delivered: {got}")
                    cpu.setdefault((name, size), []).append(got["cpu_us_per_datagram"])
    rows = []
    for size, count in CASES:
        row = [f"{size} B", count]
        for name in trees:
            row.append(f"{statistics.median(cpu[(name, size)]):.2f}")
        if len(trees) == 2:
            old, new = (statistics.median(cpu[(name, size)]) for name in trees)
            row.append(f"{new / old:.0%}")
        rows.append(row)
    headers = ["message size", "messages"] + [f"µs/datagram, {name}" for name in trees]
    headers += ["this tree / it"] if len(trees) == 2 else []
    body = (f"CPU (user + system) per datagram of the LBT-RM receive path in one process, the median of {RUNS} "
            f"interleaved runs, {READ} datagrams per socket read, every datagram read and every frame "
            f"delivered:\n\n"
            + table(headers, rows))
    write_section("LBT-RM receive path", body,
                  ".venv/bin/python -m bench.lbtrm_receive" + (f" {argv[0]}" if argv else ""))
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
