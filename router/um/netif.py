"""Turning UM interface specifications (an address, a CIDR network or an interface's name, as UM
takes them) into a local IPv4 address.

Every IPv4 address of every interface counts (getifaddrs, as UM looks them up): an interface may
carry several (a second network, a service address added to it), and a network names the one of
them inside it, whichever of the interface's addresses that is."""
from __future__ import annotations

import ctypes
import ipaddress
import os
import socket


class _Sockaddr(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("data", ctypes.c_ubyte * 14)]     # sockaddr_in: port, address


class _Ifaddrs(ctypes.Structure):
    pass


_Ifaddrs._fields_ = [("next", ctypes.POINTER(_Ifaddrs)), ("name", ctypes.c_char_p), ("flags", ctypes.c_uint),
                     ("addr", ctypes.POINTER(_Sockaddr)), ("netmask", ctypes.POINTER(_Sockaddr)),
                     ("broadcast_or_peer", ctypes.c_void_p), ("data", ctypes.c_void_p)]

_libc = ctypes.CDLL(None, use_errno=True)
_libc.getifaddrs.argtypes = [ctypes.POINTER(ctypes.POINTER(_Ifaddrs))]
_libc.freeifaddrs.argtypes = [ctypes.POINTER(_Ifaddrs)]


def interface_addresses() -> list[tuple[str, str]]:
    """(interface name, IPv4 address) for every IPv4 address of every interface, in the order the
    kernel lists them (an interface's first address first)."""
    head = ctypes.POINTER(_Ifaddrs)()
    if _libc.getifaddrs(ctypes.byref(head)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"cannot list this host's interfaces: {os.strerror(code)}")
    found = []
    try:
        entry = head
        while entry:
            item = entry.contents
            if item.addr and item.addr.contents.family == socket.AF_INET:
                address = socket.inet_ntoa(bytes(item.addr.contents.data[2:6]))
                found.append((item.name.decode(errors="replace"), address))
            entry = item.next
    finally:
        _libc.freeifaddrs(head)
    return found


def local_addresses() -> dict[str, str]:
    """Interface name -> its (first) IPv4 address, for every interface that has one."""
    found: dict[str, str] = {}
    for name, address in interface_addresses():
        found.setdefault(name, address)
    return found


class NoSuchInterface(OSError, ValueError):
    """This host has no such interface, or no address in such a network, now: the host's to fix
    (a card renamed, a VLAN not up yet), as a port another program holds is, not a bug. An OSError
    as the host's other refusals are; a ValueError as it always was."""


def resolve_interface(spec: str) -> str:
    """`127.0.0.1` stays as it is; `10.29.3.0/24` becomes this host's address in that network,
    `eth0` that interface's address. NoSuchInterface when this host has no such address now."""
    if "/" not in spec:
        try:
            ipaddress.IPv4Address(spec)
            return spec
        except ValueError:
            pass
        address = local_addresses().get(spec)
        if address is None:
            raise NoSuchInterface(f"no interface named '{spec}' with an IPv4 address on this host")
        return address
    network = ipaddress.IPv4Network(spec, strict=False)
    for _, address in interface_addresses():
        if ipaddress.IPv4Address(address) in network:
            return address
    raise NoSuchInterface(f"no local interface has an address in {spec}")
