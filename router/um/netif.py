"""Turning UM interface specifications (an address, a CIDR network or an interface's name, as UM
takes them) into a local IPv4 address."""
from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct

_SIOCGIFADDR = 0x8915


def local_addresses() -> dict[str, str]:
    """Interface name -> IPv4 address, for every interface that has one."""
    found: dict[str, str] = {}
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                reply = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)
            except OSError:
                continue
            found[name] = socket.inet_ntoa(reply[20:24])
    finally:
        probe.close()
    return found


def resolve_interface(spec: str) -> str:
    """`127.0.0.1` stays as it is; `10.29.3.0/24` becomes this host's address in that network,
    `eth0` that interface's address. ValueError when this host has no such address now."""
    if "/" not in spec:
        try:
            ipaddress.IPv4Address(spec)
            return spec
        except ValueError:
            pass
        address = local_addresses().get(spec)
        if address is None:
            raise ValueError(f"no interface named '{spec}' with an IPv4 address on this host")
        return address
    network = ipaddress.IPv4Network(spec, strict=False)
    for address in local_addresses().values():
        if ipaddress.IPv4Address(address) in network:
            return address
    raise ValueError(f"no local interface has an address in {spec}")
