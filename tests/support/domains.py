"""Topic resolution domains for tests: each gets its own multicast group and port on loopback,
so tests never hear each other, even when they run in parallel."""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path

_counter = itertools.count(1)


@dataclass
class Domain:
    group: str
    port: int
    tcp_low: int
    tcp_high: int
    config_path: Path

    def overrides(self) -> dict:
        return {"resolver_multicast_address": self.group, "resolver_multicast_port": self.port,
                "resolver_multicast_interface": "127.0.0.1",
                "transport_tcp_port_low": self.tcp_low, "transport_tcp_port_high": self.tcp_high}


def new_domain(directory: Path, extra_lines: tuple[str, ...] = ()) -> Domain:
    n = next(_counter)
    worker = os.getpid() % 4000
    group = f"239.{100 + worker // 250}.{worker % 250}.{n % 250 + 1}"
    port = 10000 + (worker * 37 + n * 11) % 10000
    # TCP ranges stay below the kernel's ephemeral ports (32768+) so clients never squat on them.
    tcp_low = 21000 + ((worker * 7 + n) % 550) * 20
    tcp_high = tcp_low + 19
    path = directory / f"domain{n}.cfg"
    lines = [f"context resolver_multicast_address {group}",
             f"context resolver_multicast_port {port}",
             "context resolver_multicast_interface 127.0.0.1",
             f"context transport_tcp_port_low {tcp_low}",
             f"context transport_tcp_port_high {tcp_high}",
             *extra_lines]
    path.write_text("\n".join(lines) + "\n")
    return Domain(group, port, tcp_low, tcp_high, path)
