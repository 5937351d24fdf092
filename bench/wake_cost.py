"""What one wake-up between two processes costs here: the hand-off every routed message makes
between an ingress and an egress worker (an eventfd write to a process asleep in epoll).

A waker writes an eventfd every PAUSE (paced, as a 2000 msgs/s stream is) to a sleeper blocked in
epoll; each write's time (the waker's cost: the syscall, and the interrupt it sends to wake another
CPU) and the time from just before the write to the sleeper's return from epoll (the hand-off) are
taken. The sleeper runs on the waker's CPU, on the other CPU, or wherever the kernel puts it: on a
virtual machine an idle vCPU must be woken by the host, which is what a worker per portal pays on
top of the work itself (BENCHMARKS.md, "Router (1 hop) ..."). Bounded: COUNT wake-ups per run,
each wait with a timeout.

    python -m bench.wake_cost          (or: make bench)
"""
from __future__ import annotations

import mmap
import os
import select
import statistics
import struct
import sys
import time

from bench.report import refuse_arguments, table, write_section

COMMAND = ".venv/bin/python -m bench.wake_cost"
COUNT = 2000
PAUSE = 0.0005                      # between wake-ups: 2000 a second, as the paced benchmark
RUNS = 3
WAIT_S = 2.0
_STAMP = struct.Struct("q")
_RESULT = struct.Struct("dd")


def _sleeper(wakeup: int, stamp: mmap.mmap, cpu: int | None, result_fd: int) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    poller = select.epoll()
    poller.register(wakeup, select.EPOLLIN)
    latencies = []
    for _ in range(COUNT):
        if not poller.poll(WAIT_S):
            break
        now = time.monotonic_ns()
        os.eventfd_read(wakeup)
        latencies.append(now - _STAMP.unpack_from(stamp, 0)[0])
    os.write(result_fd, _RESULT.pack(statistics.median(latencies) / 1000 if latencies else float("nan"),
                                     statistics.quantiles(latencies, n=100)[98] / 1000 if len(latencies) > 1
                                     else float("nan")))


def run(placement: str) -> dict:
    """One run: the sleeper on the waker's CPU ("same"), on another ("other") or anywhere ("free").
    Returns p50 of the waker's write and p50/p99 of the hand-off, µs."""
    cpus = sorted(os.sched_getaffinity(0))
    waker_cpu = cpus[0]
    sleeper_cpu = {"same": waker_cpu, "other": cpus[-1], "free": None}[placement]
    wakeup = os.eventfd(0, os.EFD_NONBLOCK)
    stamp = mmap.mmap(-1, _STAMP.size)
    result_r, result_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            _sleeper(wakeup, stamp, sleeper_cpu, result_w)
        finally:
            os._exit(0)
    saved = os.sched_getaffinity(0)
    try:
        if placement != "free":
            os.sched_setaffinity(0, {waker_cpu})
        time.sleep(0.05)                # the sleeper is in epoll before the first write
        writes = []
        for _ in range(COUNT):
            time.sleep(PAUSE)
            start = time.monotonic_ns()
            _STAMP.pack_into(stamp, 0, start)
            os.eventfd_write(wakeup, 1)
            writes.append(time.monotonic_ns() - start)
        ready, _, _ = select.select([result_r], [], [], WAIT_S + 5)
        if not ready:
            raise RuntimeError(f"the {placement} sleeper reported nothing")
        p50, p99 = _RESULT.unpack(os.read(result_r, _RESULT.size))
        return {"write": statistics.median(writes) / 1000, "p50": p50, "p99": p99}
    finally:
        os.sched_setaffinity(0, saved)
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        for fd in (wakeup, result_r, result_w):
            os.close(fd)
        stamp.close()


PLACEMENTS = {"same": "on the waker's CPU", "other": "on the other CPU", "free": "where the kernel puts it"}


def main() -> int:
    placements = list(PLACEMENTS) if len(os.sched_getaffinity(0)) > 1 else ["same", "free"]
    runs = {placement: [] for placement in placements}
    for _ in range(RUNS):                  # interleaved: drifting load hits every placement
        for placement in placements:
            runs[placement].append(run(placement))
    rows = [[PLACEMENTS[placement], *(round(statistics.median(r[key] for r in results), 1)
                                      for key in ("write", "p50", "p99"))]
            for placement, results in runs.items()]
    body = (f"{COUNT} eventfd wake-ups, one every {PAUSE * 1e6:.0f} µs, of a process asleep in epoll, the "
            "hand-off between a router's ingress and egress workers (medians of "
            f"{RUNS} interleaved runs, µs): the waker's write, and from just before the write to the "
            "sleeper's return from epoll.\n\n" +
            table(["sleeper", "write p50", "hand-off p50", "hand-off p99"], rows) +
            "\n\nA process woken on another, idle CPU costs the waker the interrupt that wakes that CPU, "
            "and waits for that CPU to come up. A worker per portal makes this hand-off once per paced "
            "message, on top of the one-process shape (the router benchmark's floor table); portals "
            "sharing a worker (`<worker-group>`) do not.")
    print(body)
    write_section("Wake-ups between processes", body, COMMAND)
    return 0


if __name__ == "__main__":
    refuse_arguments(__doc__)
    sys.exit(main())
