"""Routers for tests: a tnwgd process on a generated configuration, always stopped at the end."""
from __future__ import annotations

import glob
import itertools
import os
import random
import signal
import socket
from pathlib import Path

from tests.support.domains import claimed_ports, worker_slot
from tests.support.processes import Tool

_names = itertools.count(1)


# Short use-query timing so a test sees interest purged in about a second, not fifteen.
FAST_PURGE = ('      <topic-resolution>\n'
              '        <topic-use-query periodic-interval="1000" timeout="300" max="2"/>\n'
              '        <pattern-use-query periodic-interval="1000" timeout="300" max="2"/>\n'
              '      </topic-resolution>\n')


def endpoint_xml(name: str, domain_id: int, cfg: Path, cost: int = 1, before_config: str = "",
                 after_config: str = "") -> str:
    """An <endpoint>; `before_config` goes after <cost> (source-deletion-delay, max-queue...),
    `after_config` after <lbm-config> (acl, topic-resolution...), as the DTD orders them."""
    return (f"    <endpoint>\n      <name>{name}</name>\n      <domain-id>{domain_id}</domain-id>\n"
            f"      <cost>{cost}</cost>\n{before_config}      <lbm-config>{cfg}</lbm-config>\n"
            f"{after_config}    </endpoint>\n")


# Routing timers short enough that a test sees convergence and reroutes in a second or two.
FAST_ROUTING = ('    <route-info propagation-interval="200" check-interval="100" timeout="2000"/>\n'
                '    <route-recalculation backoff-interval="300" warning-interval="5000"/>\n')
# As fast to converge, but a router is taken for gone only after the DRO's default 4 s of silence:
# for tests moving bursts (late joins of thousands of messages) that must not reroute meanwhile,
# where a loaded 2-core machine can keep a router's route info from being read for over 2 s.
BURST_ROUTING = FAST_ROUTING.replace('timeout="2000"', 'timeout="4000"')


# Above the kernel's ephemeral ports (32768-60999 here) and every domain's ranges: an initiator
# retrying a connection to a port in the ephemeral range may be given that very port as its own
# and connect to itself (TCP simultaneous open), and the acceptor can then never listen on it.
_FREE_PORTS = range(61000, 65536)


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port nobody uses now, for a peer link's acceptor (TCP) or UDP path (`kind` SOCK_DGRAM);
    never an ephemeral one, nor one tshark decodes as another protocol. Under pytest-xdist only
    from this worker's share (ports equal to its index modulo the worker count): between this
    check and the router binding it, no other worker can pick the same port. The ports are handed out in turn (a shuffled cycle), so the several a
    test asks for are never one port twice, whether or not the first is bound yet."""
    if kind not in _port_cycles:
        _, index, count = worker_slot()
        low, high = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        candidates = [p for p in _FREE_PORTS if not low <= p <= high] or list(range(1024, low))
        # Not one tshark gives to another protocol by port (tests.support.domains.claimed_ports).
        claimed = claimed_ports()
        candidates = [p for p in candidates if p % count == index and p not in claimed]
        _port_cycles[kind] = (len(candidates), itertools.cycle(random.sample(candidates, len(candidates))))
    size, ports = _port_cycles[kind]
    for port in itertools.islice(ports, size):
        with socket.socket(socket.AF_INET, kind) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port outside the ephemeral range")


_port_cycles: dict[int, tuple[int, itertools.cycle]] = {}


# Tests notice a stopped companion in under a second (the DRO recommends 2000 ms and 3x that).
FAST_KEEPALIVE = '<gateway-keepalive interval="200" timeout="800"/>'
# For links carrying bursts that must not end: on a loaded 2-core machine a worker can wait longer
# than FAST_KEEPALIVE's timeout for a CPU, and its companion would take it for gone.
PATIENT_KEEPALIVE = '<gateway-keepalive interval="500" timeout="5000"/>'


def peer_xml(name: str, *, connect: int | None = None, listen: int | None = None, cost: int = 1,
             keepalive: str = FAST_KEEPALIVE, reconnect: int = 200,
             extra: str = "", link_extra: str = "") -> str:
    """A <peer> on loopback: `connect` to a port (initiator) or `listen` on one (acceptor);
    `extra` goes after <batching> (e.g. max-queue must come before it: use `before`);
    `link_extra` inside <single-tcp> before the side (<compression>, <tls>)."""
    if connect is not None:
        side = (f'<initiator reconnect-interval="{reconnect}"><address>127.0.0.1</address>'
                f'<port>{connect}</port></initiator>')
    else:
        side = f"<acceptor><listen-port>{listen}</listen-port></acceptor>"
    return (f"    <peer>\n      <name>{name}</name>\n      <cost>{cost}</cost>\n"
            f"      <single-tcp><nodelay/>{link_extra}{side}</single-tcp>\n{extra}      {keepalive}\n    </peer>\n")


def worker_group_xml(*portals: str) -> str:
    """<daemon> content putting `portals` in one worker process (empty: a worker each)."""
    if not portals:
        return ""
    names = "".join(f"      <portal-name>{name}</portal-name>\n" for name in portals)
    return f"    <worker-group>\n{names}    </worker-group>\n"


# Both process layouts, for tests of behaviour that must not depend on it.
LAYOUTS = {"own-workers": (), "one-worker": ("LAN1", "LAN2")}


def write_config(directory: Path, name: str, portals_xml: str, daemon_extra: str = "") -> Path:
    path = directory / f"{name}.xml"
    path.write_text('<?xml version="1.0"?>\n<tnw-gateway version="1.0">\n  <daemon>\n'
                    f"    <name>{name}</name>\n    <log type=\"console\"/>\n{daemon_extra}  </daemon>\n"
                    f"  <portals>\n{portals_xml}  </portals>\n</tnw-gateway>\n")
    return path


class Router:
    def __init__(self, config: Path, name: str, env: dict | None = None):
        self.config, self.name = config, name
        self.tool = Tool("router.cli.tnwgd", [str(config)], env)

    def wait_ready(self, timeout: float = 30.0) -> "Router":
        self.tool.wait_for_stderr("portals are up", timeout)
        return self

    @property
    def pid(self) -> int:
        return self.tool.proc.pid

    def log(self) -> str:
        return self.tool.stderr

    def wait_for_log(self, text: str, timeout: float = 15.0) -> None:
        """Until the router's log holds `text`: a worker's lines reach it over the control bus and
        the supervisor, after what they tell is already seen elsewhere (a counter in shared memory)."""
        self.tool.wait_for_stderr(text, timeout)

    def worker_pids(self) -> dict[str, int]:
        from router.monitor.counters import INDEX
        import numpy as np
        pids = {}
        for path in glob.glob(f"/dev/shm/umr.{self.name}.{self.pid}.counters*"):
            values = np.fromfile(path, dtype=np.int64)
            pids[path.rsplit("counters", 1)[1]] = int(values[INDEX["worker_pid"]])
        return pids

    def counters(self) -> dict[int, dict[str, int]]:
        """Counters by portal index, read from shared memory as the supervisor does."""
        from router.monitor.counters import COUNTER_NAMES
        import numpy as np
        found = {}
        for path in glob.glob(f"/dev/shm/umr.{self.name}.{self.pid}.counters*"):
            values = np.fromfile(path, dtype=np.int64)
            found[int(path.rsplit("counters", 1)[1])] = dict(zip(COUNTER_NAMES, values.tolist()))
        return found

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def stop(self, timeout: float = 20.0) -> int:
        if self.tool.proc.poll() is None:
            self.tool.proc.send_signal(signal.SIGTERM)
            try:
                self.tool.proc.wait(timeout)
            except Exception:
                self.tool.proc.kill()
                self.tool.proc.wait()
        return self.tool.proc.returncode

    def segments(self) -> list[str]:
        return glob.glob(f"/dev/shm/umr.{self.name}.{self.pid}.*")


class RouterRunner:
    def __init__(self, directory: Path):
        self.directory = directory
        self.routers: list[Router] = []

    def start(self, portals_xml: str, daemon_extra: str = "", name: str | None = None,
              env: dict | None = None) -> Router:
        name = name or f"r{os.getpid() % 10000}x{next(_names)}"
        config = write_config(self.directory, name, portals_xml, daemon_extra)
        router = Router(config, name, env)
        self.routers.append(router)
        return router

    def cleanup(self) -> None:
        for router in self.routers:
            router.stop()
            for worker in router.worker_pids().values():
                try:
                    os.kill(worker, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            for segment in router.segments():
                os.unlink(segment)
