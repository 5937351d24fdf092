"""`<daemon><cpu-latency-limit>`: a limit on how long any CPU may take to wake, held while the
router runs (a umrouter extension; off by default).

A paced message through a router meets wake-ups of idle CPUs: the ingress worker's when the
source's data arrives, the egress worker's, the receiver's. Where idle CPUs sleep deeply, each
costs tens of µs: on a virtual machine whose idle vCPUs halt, the host must wake them (measured
here: a router with a worker per portal added 74 µs at p50 with the limit off, 36 µs with it at 0;
BENCHMARKS.md, "Router (1 hop)"). Linux's PM QoS interface lets a process ask that no CPU take
longer than a limit to wake from idle: the request holds while /dev/cpu_dma_latency stays open
with the limit written to it (tuned's latency-performance profile holds one too). With 0, idle
CPUs poll instead of sleeping, and a wake-up takes a few µs; the price is the idle CPUs' power,
and on a virtual machine its host's CPU time. Every process on the host gets the faster wake-ups
while the router holds the request; the kernel applies the lowest limit any process asks for.

The device is the root user's: the router opens it at start, before it gives root up
(`<uid>`/`<gid>`), and a reload reports a changed limit as applied at the next start, as it does
every `<daemon>` setting. When it cannot be opened (not root, no such device) the router runs on
without the limit and logs why.
"""
from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

log = logging.getLogger(__name__)

DEVICE = Path("/dev/cpu_dma_latency")
MAX_LIMIT_US = 2_000_000_000        # the kernel's "no limit" (PM_QOS_DEFAULT_VALUE), and the most it takes
_VALUE = struct.Struct("=i")        # the device takes and gives a native 32-bit integer, µs


class CpuLatencyLimit:
    """An open PM QoS request: the limit holds until the process ends (its descriptor closes)."""

    def __init__(self, fd: int, limit_us: int):
        self.fd, self.limit_us = fd, limit_us

    @classmethod
    def hold(cls, limit_us: int, device: Path = DEVICE) -> CpuLatencyLimit | None:
        """Ask that no CPU take longer than `limit_us` to wake; None (logged) if refused."""
        try:
            fd = os.open(device, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as err:
            log.warning("<cpu-latency-limit> %d µs not applied: cannot open %s: %s (it needs root: the "
                        "router opens it before giving root up); running without it",
                        limit_us, device, err.strerror)
            return None
        try:
            os.write(fd, _VALUE.pack(limit_us))
        except OSError as err:
            os.close(fd)
            log.warning("<cpu-latency-limit> %d µs not applied: %s refused it: %s; running without it",
                        limit_us, device, err.strerror)
            return None
        log.info("holding a CPU wake-up latency limit of %d µs (%s) while the router runs", limit_us, device)
        return cls(fd, limit_us)


def effective_limit(device: Path = DEVICE) -> int | None:
    """The limit the kernel applies now (the lowest any process holds; MAX_LIMIT_US: none), µs;
    None if it cannot be read."""
    try:
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, _VALUE.size)
    except OSError:
        return None
    finally:
        os.close(fd)
    return _VALUE.unpack(data)[0] if len(data) == _VALUE.size else None
