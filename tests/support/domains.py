"""Topic resolution domains for tests: each gets its own multicast groups (topic resolution,
immediate messages, LBT-RM transports) and ports on loopback, so tests never hear each other, even
when they run in parallel. A domain's sources use LBT-TCP unless a test adds `source transport lbtrm`
(or lbtru).

Under pytest-xdist every worker takes its own share of each number space (`worker_slot`): worker i
of n uses only the ports (and TCP blocks) numbered i modulo n, so two workers' live domains can
never share a resolver port or a TCP range, whatever their domain counters are. (Spreading by pid
alone could not promise that: the counters of two workers drift apart as their tests run, and
pids 1 apart put one worker's 8th domain on another's 1st TCP range.)

A domain never gets a port that tshark's UDP or TCP port table gives to another protocol: tshark
tries that protocol before the heuristics that find LBT-RM and LBT-RU by their configured ports, so
a source's datagrams to such a port (11211: memcache, 13400: DoIP, ...) would decode as something
else and a wire test would find none of its own.)"""
from __future__ import annotations

import functools
import itertools
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

_counter = itertools.count(1)
PORTS_PER_DOMAIN = 20           # the TCP block: 15 for sources' transports, 5 for request ports


@functools.cache
def claimed_ports() -> frozenset[int]:
    """The ports tshark's `udp.port` and `tcp.port` tables give to a protocol (none without
    tshark: the wire tests then fail on their own, saying it is missing)."""
    tshark = shutil.which("tshark")
    if tshark is None:
        return frozenset()
    listing = subprocess.run([tshark, "-G", "decodes"], capture_output=True, text=True, timeout=60).stdout
    ports = set()
    for line in listing.splitlines():
        table, _, rest = line.partition("\t")
        port = rest.partition("\t")[0]
        if table in ("udp.port", "tcp.port") and port.isdigit():
            ports.add(int(port))
    return frozenset(ports)


_IP_MULTICAST_ALL = 49        # Linux: deliver only the groups this socket joined

@dataclass
class Domain:
    group: str
    port: int
    tcp_low: int
    tcp_high: int
    config_path: Path
    request_low: int = 0
    request_high: int = 0
    mim_group: str = "224.10.10.21"
    lbtrm_group: str = "224.10.10.10"

    def overrides(self) -> dict:
        return {"resolver_multicast_address": self.group, "resolver_multicast_port": self.port,
                "resolver_multicast_interface": "127.0.0.1", "mim_address": self.mim_group,
                "mim_destination_port": self.port,
                "transport_tcp_port_low": self.tcp_low, "transport_tcp_port_high": self.tcp_high,
                "request_tcp_port_low": self.request_low, "request_tcp_port_high": self.request_high,
                **self.lbtrm_overrides(), **self.lbtru_overrides()}

    def resolver_listener(self, timeout: float | None = 0.0, receive_buffer: int = 0):
        """A socket of our own on the domain's resolver group, hearing what every UM context in the
        domain hears (and nothing of other tests' groups on the same port). `timeout` as
        socket.settimeout (0: non-blocking)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.IPPROTO_IP, _IP_MULTICAST_ALL, 0)
        if receive_buffer:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.bind((self.group, self.port))
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                        socket.inet_aton(self.group) + socket.inet_aton("127.0.0.1"))
        sock.settimeout(timeout)
        return sock

    def lbtrm_overrides(self) -> dict:
        """LBT-RM sessions on the domain's own group; UDP source ports may reuse the TCP range's
        numbers (another protocol's ports). The rate limit is UM's 10 Mbit/s default times 100:
        loopback, not a shared LAN."""
        return {"transport_lbtrm_multicast_address_low": self.lbtrm_group,
                "transport_lbtrm_multicast_address_high": self.lbtrm_group,
                "transport_lbtrm_destination_port": self.port,
                "transport_lbtrm_source_port_low": self.tcp_low, "transport_lbtrm_source_port_high": self.tcp_high,
                "transport_lbtrm_data_rate_limit": 1_000_000_000}

    def lbmr_prefs(self) -> list[str]:
        """The tshark preferences that make it decode this domain's topic resolution as LBMR."""
        return [f"lbmr.mc_incoming_address:{self.group}", f"lbmr.mc_outgoing_address:{self.group}",
                f"lbmr.mc_incoming_port:{self.port}", f"lbmr.mc_outgoing_port:{self.port}"]

    def lbtrm_prefs(self) -> list[str]:
        """The tshark preferences by which it knows this domain's LBT-RM sessions."""
        return [f"lbtrm.mc_address_low:{self.lbtrm_group}", f"lbtrm.mc_address_high:{self.lbtrm_group}",
                f"lbtrm.dport_low:{self.port}", f"lbtrm.dport_high:{self.port}",
                f"lbtrm.sport_low:{self.tcp_low}", f"lbtrm.sport_high:{self.tcp_high}"]

    def lbtrm_decode_as(self) -> list[str]:
        """LBT-RM on the sources' ports, whatever the other port: a receiver NAKs from a port the
        kernel picks, which tshark's port table may give to another protocol, and that table
        comes before the preferences' heuristic."""
        return [f"udp.port=={port},lbtrm" for port in range(self.tcp_low, self.tcp_high + 1)]

    def lbtru_overrides(self) -> dict:
        """LBT-RU sources on UDP ports numbered like the TCP range, receivers on UDP ports numbered
        like the request range (UDP ports: no clash with the TCP ones); the rate as LBT-RM's."""
        return {"transport_lbtru_port_low": self.tcp_low, "transport_lbtru_port_high": self.tcp_high,
                "receiver:transport_lbtru_port_low": self.request_low,
                "receiver:transport_lbtru_port_high": self.request_high,
                "transport_lbtru_data_rate_limit": 1_000_000_000}


def worker_slot() -> tuple[int, int, int]:
    """(run, index, count): `run` is the pid of the pytest process that started the run (an xdist
    worker's parent, the controller), `index` this process's place among the `count` processes
    running tests ((own pid, 0, 1) without xdist)."""
    name = os.environ.get("PYTEST_XDIST_WORKER")
    if not name:
        return os.getpid(), 0, 1
    count = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    # gw0..gw<count-1>; a worker replacing a crashed one is numbered on (its run has failed anyway).
    return os.getppid(), int(name.removeprefix("gw")) % count, count


def share(index: int, count: int, size: int, n: int) -> int:
    """The `n`th number of worker `index`'s share of range(size): those equal to `index` modulo
    `count`, taken in turn (so no other worker's share ever holds it)."""
    return count * (n % (size // count)) + index


def new_domain(directory: Path, extra_lines: tuple[str, ...] = ()) -> Domain:
    run, index, count = worker_slot()
    claimed = claimed_ports()
    while True:
        n = next(_counter)
        port = 10000 + share(index, count, 10000, run * 37 + n)
        tcp_low = 21000 + share(index, count, 550, run * 7 + n) * PORTS_PER_DOMAIN
        if port not in claimed and claimed.isdisjoint(range(tcp_low, tcp_low + PORTS_PER_DOMAIN)):
            break
    # Groups: an octet pair of their own for each worker of the run (counted on from the run's pid,
    # so two runs on one machine rarely meet).
    worker = (run + index) % 4000
    group = f"239.{100 + worker // 250}.{worker % 250}.{n % 250 + 1}"
    mim_group = f"239.{200 + worker // 250}.{worker % 250}.{n % 250 + 1}"
    lbtrm_group = f"239.{150 + worker // 250}.{worker % 250}.{n % 250 + 1}"
    # Ports (chosen above): the worker's share of 10000..19999 (a capture filter `udp port P` sees
    # this domain alone). TCP ranges stay below the kernel's ephemeral ports (32768+) so clients
    # never squat on them: 20 ports per domain, 15 for sources' transports, 5 for request ports
    # (UM's default width); 550 blocks of them, shared out among the workers as the UDP ports are.
    tcp_high = tcp_low + 14
    request_low, request_high = tcp_high + 1, tcp_high + 5
    path = directory / f"domain{n}.cfg"
    lines = [f"context resolver_multicast_address {group}",
             f"context resolver_multicast_port {port}",
             "context resolver_multicast_interface 127.0.0.1",
             f"context transport_tcp_port_low {tcp_low}",
             f"context transport_tcp_port_high {tcp_high}",
             f"context request_tcp_port_low {request_low}",
             f"context request_tcp_port_high {request_high}",
             f"context mim_address {mim_group}",
             f"context mim_destination_port {port}",
             *(f"context {name} {value}" for name, value in
               Domain(group, port, tcp_low, tcp_high, path, lbtrm_group=lbtrm_group).lbtrm_overrides().items()),
             *(f"{scope or 'context'} {name} {value}" for key, value in
               Domain(group, port, tcp_low, tcp_high, path, request_low, request_high).lbtru_overrides().items()
               for scope, _, name in [key.rpartition(":")]),
             *extra_lines]
    path.write_text("\n".join(lines) + "\n")
    return Domain(group, port, tcp_low, tcp_high, path, request_low, request_high, mim_group, lbtrm_group)
