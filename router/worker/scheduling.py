"""How a worker asks the kernel to schedule it: wake at once, or batch while it carries a stream.

A worker sleeps in epoll and is woken by each read of its sockets and each record another worker
publishes. Linux's default policy lets every such wake-up preempt whatever runs on that CPU; on a
small host that is the source or the receiver itself, so under a sustained stream the worker runs
once per socket read, on a handful of messages, and spends more of the host's CPU on switching
than on forwarding. SCHED_BATCH keeps the worker's share of the CPU but stops its wake-ups from
preempting: it runs on a free CPU at once, else at the running task's next scheduling point, so
under load it wakes less often and takes more per wake-up (measured: BENCHMARKS.md, "Worker
scheduling").

Not preempting costs latency when every CPU is busy: a paced message then waits for a CPU, up to
milliseconds. So a worker batches only while its portal carries a stream: ADAPTIVE (the default)
switches to SCHED_BATCH when the fragments it received and sent reach BATCH_ABOVE a second, and back
to the normal policy below NORMAL_BELOW, judged on every heartbeat and, while it does not batch,
on every burst of data (at most every NUDGE_INTERVAL); NORMAL never batches
(`<daemon><worker-scheduling>normal</worker-scheduling>`). The policy is per thread: the worker's
event loop runs on its main thread, which is the one switched. A worker started with a policy other
than the normal one (chrt, systemd's CPUSchedulingPolicy=) keeps it. The supervisor reads the
policy back with `policy_of(pid)` for `routerctl status`.

While it batches, a worker also coalesces its reads (router.um.loop): after a read of a source's
connection or LBT-RM/LBT-RU socket that brought little (router.um.loop.SMALL_READ), it sleeps
READ_COALESCING before waiting for events again, so each wake-up takes in more of the stream. Under a stream of
64-byte messages that cut the CPU the workers spend per message by about a third (198 to 136
clock ticks for 4M messages, ingress and egress) and let the source and the receiver, sharing
the host's two CPUs with them, run that much faster (BENCHMARKS.md).

On the normal policy a worker (adaptive or normal) also asks for the kernel's shortest time slice
(LATENCY_SLICE_NS; `sched_setattr`'s runtime for a fair task, Linux 6.12 and later). The fair
scheduler (EEVDF) lets a woken task preempt the running one only if its deadline, its slice after
it became runnable, comes first: with the default slice a worker woken by a source's send waits
for that source, or whatever else runs there, to finish its own turn (measured with both CPUs
busy: a paced message's p50 63 µs with the short slice against 785 µs with the default one;
BENCHMARKS.md, "Worker scheduling"). A worker's turn on a paced message is tens
of µs, well inside the short slice, so it costs the worker nothing; batching restores the default
slice (long turns are the point of it). Kernels without custom slices ignore the request; an
architecture whose system call numbers are not known here switches the policy only.
"""
from __future__ import annotations

import ctypes
import errno
import logging
import os
import platform
import struct
import time

log = logging.getLogger(__name__)

ADAPTIVE = "adaptive"
NORMAL = "normal"
MODES = (ADAPTIVE, NORMAL)

BATCH_ABOVE = 20_000          # fragments a second: a stream, not paced messages
NORMAL_BELOW = 5_000          # hysteresis, so a stream that varies does not flip the policy
# A burst (router.worker.datapath: one socket read or one ring read carrying this much) may be a
# stream starting: judge the rate now rather than at the next heartbeat, at most this often (s).
# A stream that began after an idle spell is then batched within milliseconds, not up to a
# heartbeat interval later, during which a worker on the short slice preempts the source and
# the receiver on every read.
NUDGE_INTERVAL = 0.005
# How long a batching worker lets a source's connection fill after a small read (s). Asked of
# time.sleep, it lasts some 50 µs more (the kernel's default timer slack): about 2-3 reads' worth
# of a stream that comes as fast as one worker can read, well inside a socket's buffer.
READ_COALESCING = 100e-6

# What a worker moves, whatever its portal's kind (a counter a kind never touches stays zero).
WORK_COUNTERS = ("transport_topic_fragments_rcvd", "transport_topic_fragments_sent",
                 "data_msgs_rcvd", "data_fragments_sent")


def wants_batch(batching: bool, rate: float) -> bool:
    """The policy for the next interval, given the current one and the fragments a second."""
    return rate >= (NORMAL_BELOW if batching else BATCH_ABOVE)


_POLICY_NAMES = {os.SCHED_OTHER: "normal", os.SCHED_BATCH: "batch", os.SCHED_IDLE: "idle",
                 os.SCHED_FIFO: "fifo", os.SCHED_RR: "rr"}


def policy_of(pid: int) -> str | None:
    """The kernel's policy for a running process (its main thread): "normal", "batch" (or what
    it was started with: "fifo", "rr", "idle"); None if it is gone."""
    try:
        policy = os.sched_getscheduler(pid)
    except OSError:
        return None
    return _POLICY_NAMES.get(policy, str(policy))


LATENCY_SLICE_NS = 100_000   # the shortest slice the kernel grants a fair task
DEFAULT_SLICE = 0            # sched_setattr's runtime 0: the kernel's default slice

# sched_setattr / sched_getattr, which the os module does not wrap (asm-generic numbers on arm64
# and riscv64).
_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275), "riscv64": (274, 275)}.get(platform.machine())
# struct sched_attr up to sched_period (SCHED_ATTR_SIZE_VER0): size, policy, flags, nice,
# priority, runtime, deadline, period.
_SCHED_ATTR = struct.Struct("=IIQiIQQQ")
_libc = ctypes.CDLL(None, use_errno=True) if _SYSCALLS else None


def set_attributes(pid: int, policy: int, slice_ns: int) -> None:
    """sched_setattr for a fair policy: `policy` with a slice of `slice_ns` (0: the default)."""
    if not _SYSCALLS:
        raise OSError(errno.ENOSYS, f"sched_setattr: its number on {platform.machine()} is not known here")
    attr = ctypes.create_string_buffer(_SCHED_ATTR.pack(_SCHED_ATTR.size, policy, 0, 0, 0, slice_ns, 0, 0),
                                       _SCHED_ATTR.size)
    if _libc.syscall(_SYSCALLS[0], pid, attr, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"sched_setattr: {os.strerror(err)}")


def slice_of(pid: int) -> int | None:
    """The time slice the kernel gives a process's main thread, ns; None where it does not say
    (before Linux 6.12, an unknown architecture, a process that is gone)."""
    if not _SYSCALLS:
        return None
    attr = ctypes.create_string_buffer(_SCHED_ATTR.size)
    if _libc.syscall(_SYSCALLS[1], pid, attr, _SCHED_ATTR.size, 0) != 0:
        return None
    size, policy, _, _, _, runtime, _, _ = _SCHED_ATTR.unpack(attr.raw)
    return runtime if policy in (os.SCHED_OTHER, os.SCHED_BATCH) and runtime else None


_slices = {"settable": _SYSCALLS is not None}


def _set_policy(batch: bool) -> None:
    if _slices["settable"]:
        try:
            if batch:
                set_attributes(0, os.SCHED_BATCH, DEFAULT_SLICE)
            else:
                set_attributes(0, os.SCHED_OTHER, LATENCY_SLICE_NS)
            return
        except OSError as err:      # e.g. a seccomp filter that knows only sched_setscheduler
            log.info("worker keeps the kernel's default time slice: %s", err)
            _slices["settable"] = False
    os.sched_setscheduler(0, os.SCHED_BATCH if batch else os.SCHED_OTHER, os.sched_param(0))


class WorkerScheduling:
    """Called on every heartbeat with the counters of the worker's portals; switches the calling
    thread's policy."""

    def __init__(self, mode: str, counters: list, clock=time.monotonic, set_policy=_set_policy,
                 inherited: int | None = None, loop=None):
        if mode not in MODES:
            raise ValueError(f"worker scheduling must be one of {', '.join(MODES)}, not {mode!r}")
        if inherited is None:
            inherited = os.sched_getscheduler(0)
        own_policy = inherited != os.SCHED_OTHER
        if own_policy:
            # Started with a policy of its own (chrt, systemd's CPUSchedulingPolicy=): keep it.
            log.info("worker keeps the scheduling policy it was started with (%s)",
                     _POLICY_NAMES.get(inherited, inherited))
            mode = NORMAL
        self.mode = mode
        self.counters = counters
        self.clock = clock
        self.set_policy = set_policy
        self.loop = loop                # its read coalescing follows the policy (router.um.loop)
        self.batching = False
        self._last: tuple[float, int] | None = None
        if not own_policy:
            self._apply(False)       # the normal policy, with the short slice (either mode)

    def _apply(self, batch: bool) -> bool:
        try:
            self.set_policy(batch)
        except OSError as err:      # a kernel or sandbox that refuses: stay as we are
            log.warning("cannot change the worker's scheduling policy, keeping the normal one: %s", err)
            self.mode = NORMAL
            return False
        self.batching = batch
        if self.loop is not None:
            self.loop.read_coalescing = READ_COALESCING if batch else 0.0
        return True

    def nudge(self) -> None:
        """A burst went through: judge the rate now, unless already batching or judged just now."""
        if self.mode == ADAPTIVE and not self.batching and \
                (self._last is None or self.clock() - self._last[0] >= NUDGE_INTERVAL):
            self.tick()

    def _work(self) -> int:
        return sum(counters.get(name) for counters in self.counters for name in WORK_COUNTERS)

    def tick(self) -> None:
        if self.mode != ADAPTIVE:
            return
        now, work = self.clock(), self._work()
        last, self._last = self._last, (now, work)
        if last is None or now <= last[0]:
            return
        batch = wants_batch(self.batching, (work - last[1]) / (now - last[0]))
        if batch == self.batching or not self._apply(batch):
            return
        log.debug("worker scheduling: %s", "batch" if batch else "normal")
