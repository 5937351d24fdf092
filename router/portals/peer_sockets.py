"""Socket plumbing of the peer link: non-blocking connect, the listener, `<single-tcp>` options.

Kept apart from peer_link.py so the link reads as its state machine; everything here is a thin,
synchronous wrapper that raises OSError with a message naming the portal and the address.
"""
from __future__ import annotations

import errno
import ipaddress
import socket
import threading
from typing import Callable

from router.um.netif import resolve_interface


def numeric_address(host: str, port: int) -> tuple[str, int] | None:
    """(host, port) when host is a dotted IPv4 address, None for a name that must be resolved."""
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return None
    return host, port


def resolve_off_loop(host: str, port: int, loop, deliver: Callable[[tuple[str, int] | OSError], None]) -> None:
    """Resolve a companion's DNS name on a thread of its own; ``deliver`` gets the address, or the
    OSError, on the loop's thread.

    A lookup can take the resolver's whole timeout (5 s per attempt and name server by default)
    when DNS is down, which is when links drop and reconnect. On the loop that would stall every
    portal of the worker and its heartbeats, and the supervisor would restart the worker as hung,
    again at every attempt."""
    def lookup() -> None:
        try:
            result = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
        except OSError as err:
            result = err
        loop.call_soon_threadsafe(deliver, result)
    threading.Thread(target=lookup, name=f"resolve {host}", daemon=True).start()


def start_connect(link, address: tuple[str, int]) -> tuple[socket.socket, int]:
    """Begin a non-blocking connect to ``address`` from `<interface>`'s address, if any;
    (socket, connect_ex result)."""
    local = local_address(link.interface) if link.interface else None
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        if local is not None:
            sock.bind((local, 0))
        return sock, sock.connect_ex(address)
    except OSError:
        sock.close()
        raise


def open_listener(link, portal: str) -> socket.socket:
    """The acceptor's listening socket on ``<interface>`` (all addresses if none) : listen-port."""
    port = link.acceptor.listen_port
    try:
        host = local_address(link.interface) if link.interface else "0.0.0.0"
    except OSError as err:
        raise OSError(err.errno, f"peer portal {portal}: cannot listen on port {port}: {err.strerror}") from err
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(8)
        listener.setblocking(False)
    except OSError as err:
        listener.close()
        raise OSError(err.errno, f"peer portal {portal}: cannot listen on port {port}: {err.strerror}") from err
    return listener


def local_address(interface: str) -> str:
    """`<interface>`'s local address; OSError when no local address is in its network (now: an
    interface may lose its address, and get it back, while the router runs)."""
    try:
        return resolve_interface(interface)
    except ValueError as err:
        raise OSError(errno.EADDRNOTAVAIL, str(err)) from None


def apply_link_options(sock: socket.socket, link) -> None:
    """`<nodelay/>`, `<keepalive/>` (TCP's, not the DRO's) and the socket buffer sizes."""
    sock.setblocking(False)
    if link.nodelay:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if link.keepalive:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if link.send_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, link.send_buffer)
    if link.receive_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, link.receive_buffer)
