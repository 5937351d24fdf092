"""sd_notify without a dependency: READY=1, STATUS=..., WATCHDOG=1, RELOADING=1, STOPPING=1.

systemd passes a datagram socket in $NOTIFY_SOCKET (a path, or '@' for the abstract namespace);
outside systemd there is none and every call is a no-op.
"""
from __future__ import annotations

import os
import socket
import time


def notify(*states: str) -> bool:
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
    try:
        sock.connect(address)
        sock.sendall("\n".join(states).encode())
        return True
    except OSError:
        return False
    finally:
        sock.close()


def watchdog_interval() -> float | None:
    """Half of systemd's WatchdogSec for this process, or None when there is no watchdog."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and int(pid) != os.getpid()):
        return None
    return int(usec) / 2_000_000


def reloading() -> bool:
    """RELOADING=1 needs MONOTONIC_USEC since systemd 253 (Type=notify-reload)."""
    return notify("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")
