"""Socket plumbing of the peer link: non-blocking connect, the listener, `<single-tcp>` options.

Kept apart from peer_link.py so the link reads as its state machine; everything here is a thin,
synchronous wrapper that raises OSError with a message naming the portal and the address.
"""
from __future__ import annotations

import errno
import socket

from router.um.netif import resolve_interface


def start_connect(link) -> tuple[socket.socket, tuple[str, int], int]:
    """Begin a non-blocking connect to ``link.initiator``; (socket, address, connect_ex result).

    The address is resolved on every call, so a companion whose DNS name moved is found again on
    the next attempt (the DRO does this since 6.17). DNS lookups of names block the loop briefly;
    numeric addresses do not.
    """
    initiator = link.initiator
    family, kind, proto, _, address = socket.getaddrinfo(initiator.address, initiator.port,
                                                         socket.AF_INET, socket.SOCK_STREAM)[0]
    local = local_address(link.interface) if link.interface else None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setblocking(False)
        if local is not None:
            sock.bind((local, 0))
        return sock, address, sock.connect_ex(address)
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
