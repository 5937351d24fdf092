"""The UDP channel that carries LBMR for one context: multicast, or unicast to resolver daemons.

It owns the sockets and the byte-level work (packing records into datagrams no larger than
`resolver_datagram_max_size`, decoding what arrives, counting what does not parse). What the
packets mean is the topic resolver's business.
"""
from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
from typing import Callable, Iterable

from router.log_rate import LogRate
from router.um.config import UMConfig
from router.um.datagrams import pending_datagrams
from router.um.netif import NoSuchInterface, resolve_interface
from router.um.wire.errors import WireError
from router.um.wire.lbmr import (LbmrPacket, SrcIdOption, Tir, Tmr, TopicManagement, TopicResolution,
                                 UnicastAlive, WcTqr, WildcardQuery, decode_lbmr, encode_lbmr, tir_size,
                                 tqr_size, LBMR_HDR_TYPE_UCAST_RCV_ALIVE)

log = logging.getLogger(__name__)

_IP_MULTICAST_ALL = 49          # Linux: deliver only groups this socket joined
_LBMR_HEADER = 4
_TMB_HEADER = 4                 # a topic management block's length and record count
_TMR_HEADER = 4                 # each record's length, type and flags, before its name
_WC_TQR_HEADER = 1              # each wildcard query's pattern type, before its pattern
_RECEIVE_BATCH = 64             # datagrams read per readiness event before yielding to the loop


class LbmrChannel:
    """Sends and receives LBMR datagrams for one topic resolution domain."""

    def __init__(self, config: UMConfig, loop, on_packet: Callable[[LbmrPacket, tuple], None],
                 src_id: bytes, extra_options: Callable[[], list] | None = None):
        self.loop = loop
        self.on_packet = on_packet
        self.src_id = src_id
        self.extra_options = extra_options or (lambda: [])
        self.max_datagram = config.get("context", "resolver_datagram_max_size")
        self.counters = {"packets_sent": 0, "bytes_sent": 0, "packets_received": 0,
                         "bytes_received": 0, "malformed": 0, "send_errors": 0}
        self._malformed_said = LogRate()    # one line per burst, the counter has the rest
        self.daemons = config.get("context", "resolver_unicast_daemon")
        if self.daemons:
            self._open_unicast(config)
        else:
            self._open_multicast(config)
        self.receiving = True
        for sock in self.receive_sockets:
            loop.add_reader(sock.fileno(), lambda s=sock: self._readable(s))

    # -- sockets ---------------------------------------------------------------------------------
    def _open_multicast(self, config: UMConfig) -> None:
        group = config.get("context", "resolver_multicast_address")
        port = config.get("context", "resolver_multicast_port")
        in_group = config.get("context", "resolver_multicast_incoming_address") or group
        in_port = config.get("context", "resolver_multicast_incoming_port") or port
        out_group = config.get("context", "resolver_multicast_outgoing_address") or group
        out_port = config.get("context", "resolver_multicast_outgoing_port") or port
        option = "resolver_multicast_interface"
        self.interface = _interface(config, option)
        opened: list[socket.socket] = []
        try:
            receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            opened.append(receiver)
            receiver.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            receiver.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            receiver.setsockopt(socket.IPPROTO_IP, _IP_MULTICAST_ALL, 0)
            _set_buffer(receiver, socket.SO_RCVBUF,
                        config.get("context", "resolver_multicast_receiver_socket_buffer"))
            # Binding to the group address keeps other groups on the same port (other domains) out.
            receiver.bind((in_group, in_port))
            with _on_interface(config, option, self.interface, f"join {in_group}"):
                receiver.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                                    socket.inet_aton(in_group) + socket.inet_aton(self.interface))
            receiver.setblocking(False)
            sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            opened.append(sender)
            with _on_interface(config, option, self.interface, f"send to {out_group}"):
                sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(self.interface))
                sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL,
                                  config.get("context", "resolver_multicast_ttl"))
                sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
                sender.bind((self.interface, 0))
            sender.setblocking(False)
        except OSError:
            for sock in opened:
                sock.close()
            raise
        self.receive_sockets = [receiver]
        self.sender = sender
        self.destinations = [(sender, (out_group, out_port))]
        self.domain_key = ("multicast", in_group, in_port)

    def _open_unicast(self, config: UMConfig) -> None:
        """One socket per local address the daemons are talked to from: an entry's own
        `Iface[:Src_Port]->`, else resolver_unicast_interface and a port of the unicast range.
        Each socket also receives what its daemons relay."""
        self.interface = _interface(config, "resolver_unicast_interface")
        bound: dict[tuple[str, int | None], socket.socket] = {}
        self.receive_sockets, self.destinations = [], []
        try:
            for daemon in self.daemons:
                if daemon.interface is None:
                    interface, option = self.interface, "resolver_unicast_interface"
                else:
                    interface, option = resolve_interface(daemon.interface), "resolver_unicast_daemon"
                key = (interface, daemon.source_port)
                if key not in bound:
                    with _on_interface(config, option, interface, "bind a resolver socket"):
                        bound[key] = _unicast_socket(config, interface, daemon.source_port)
                    self.receive_sockets.append(bound[key])
                self.destinations.append((bound[key], (daemon.host, daemon.port)))
        except (OSError, ValueError):
            for sock in self.receive_sockets:
                sock.close()
            raise
        self.sender = self.receive_sockets[0]
        self.domain_key = ("unicast",) + tuple(sorted((daemon.host, daemon.port) for daemon in self.daemons))
        # Resolver daemons forget clients that stay silent; keepalives keep us registered.
        interval = config.get("context", "resolver_unicast_keepalive_interval") / 1000
        self._keepalive = self.loop.call_every(max(interval, 0.05), self.send_keepalive)

    def send_keepalive(self) -> None:
        self.send_packet(LbmrPacket(UnicastAlive(LBMR_HDR_TYPE_UCAST_RCV_ALIVE)))

    # -- sending ---------------------------------------------------------------------------------
    def _options(self) -> list:
        return [SrcIdOption(self.src_id)] + self.extra_options()

    def send_packet(self, packet: LbmrPacket) -> None:
        if not packet.options:
            packet.options = self._options()
        self.send_bytes(encode_lbmr(packet))

    def send_bytes(self, datagram: bytes) -> None:
        for sock, destination in self.destinations:
            try:
                sock.sendto(datagram, destination)
                self.counters["packets_sent"] += 1
                self.counters["bytes_sent"] += len(datagram)
            except (BlockingIOError, OSError) as err:
                self.counters["send_errors"] += 1
                log.debug("LBMR send to %s failed: %s", destination, err)

    def send_resolution(self, tqrs: Iterable[str] = (), tirs: Iterable[Tir] = ()) -> None:
        """Pack TQRs and TIRs into as few datagrams as `resolver_datagram_max_size` allows."""
        options = self._options()
        budget = self.max_datagram - _LBMR_HEADER - _options_size(options)
        batch_tqrs: list[str] = []
        batch_tirs: list[Tir] = []
        used = 0

        def flush() -> None:
            nonlocal batch_tqrs, batch_tirs, used
            if batch_tqrs or batch_tirs:
                self.send_bytes(encode_lbmr(LbmrPacket(TopicResolution(batch_tqrs, batch_tirs), list(options))))
            batch_tqrs, batch_tirs, used = [], [], 0

        for name in tqrs:
            size = tqr_size(name)
            if used + size > budget or len(batch_tqrs) == 255:
                flush()
            batch_tqrs.append(name)
            used += size
        for tir in tirs:
            size = tir_size(tir)
            if used + size > budget or len(batch_tirs) == 65535:
                flush()
            batch_tirs.append(tir)
            used += size
        flush()

    def send_tmrs(self, tmrs: Iterable[Tmr]) -> None:
        """Topic management records (use queries, their responses, leave-topic records) in as few
        datagrams as `resolver_datagram_max_size` allows."""
        options = self._options()
        budget = self.max_datagram - _LBMR_HEADER - _TMB_HEADER - _options_size(options)
        for batch in _packed(tmrs, lambda tmr: _TMR_HEADER + tqr_size(tmr.name), budget, 0xFFFF):
            self.send_bytes(encode_lbmr(LbmrPacket(TopicManagement(batch), list(options))))

    def send_wildcard_queries(self, queries: Iterable[WcTqr]) -> None:
        """Wildcard TQRs in as few datagrams as `resolver_datagram_max_size` allows (at most 255
        a datagram: the header counts them in one byte)."""
        options = self._options()
        budget = self.max_datagram - _LBMR_HEADER - _options_size(options)
        for batch in _packed(queries, lambda query: _WC_TQR_HEADER + tqr_size(query.pattern), budget, 255):
            self.send_bytes(encode_lbmr(LbmrPacket(WildcardQuery(batch), list(options))))

    # -- receiving -------------------------------------------------------------------------------
    def _readable(self, sock: socket.socket) -> None:
        for data, address in pending_datagrams(sock, _RECEIVE_BATCH, "LBMR"):
            self.counters["packets_received"] += 1
            self.counters["bytes_received"] += len(data)
            try:
                packet = decode_lbmr(data)
            except WireError as err:
                self._count_malformed(address, err)
                continue
            self.on_packet(packet, address)

    def _count_malformed(self, address, err: WireError) -> None:
        self.counters["malformed"] += 1
        if self._malformed_said.due() is not None:
            log.warning("dropped malformed LBMR packet from %s:%s (%s); %d so far",
                        address[0], address[1], err, self.counters["malformed"])

    def stop_receiving(self) -> None:
        """Read nothing more (the context is closing; it may still send its last packets)."""
        if self.receiving:
            self.receiving = False
            for sock in self.receive_sockets:
                self.loop.remove_reader(sock.fileno())
            if self.daemons:
                self._keepalive.cancel()

    def close(self) -> None:
        self.stop_receiving()
        for sock in self.receive_sockets:
            sock.close()
        if self.sender not in self.receive_sockets:
            self.sender.close()


def domain_identity(config: UMConfig) -> str:
    """What makes two contexts share a topic resolution domain: the resolver group and the
    interface it is used on (or the resolver daemons), as text. Routers compare it to find one
    domain given two domain ids. One group on two interfaces is two domains, as the configuration
    check has it (router.config.portal_um.same_domain): two LANs that both keep the default group."""
    daemons = config.get("context", "resolver_unicast_daemon")
    if daemons:
        return "unicast:" + ",".join(f"{host}:{port}" for host, port in sorted((d.host, d.port) for d in daemons))
    group = (config.get("context", "resolver_multicast_incoming_address")
             or config.get("context", "resolver_multicast_address"))
    port = config.get("context", "resolver_multicast_incoming_port") or config.get("context", "resolver_multicast_port")
    interface = config.get("context", "resolver_multicast_interface")
    return f"{group}:{port} on {interface}" if interface else f"{group}:{port}"


def _interface(config: UMConfig, option: str) -> str:
    """This host's address for a context-scope interface option; an error that names the option."""
    try:
        return resolve_interface(config.get("context", option))
    except NoSuchInterface as err:
        raise NoSuchInterface(f"{err} ({option})") from None


@contextlib.contextmanager
def _on_interface(config: UMConfig, option: str, address: str, doing: str):
    """The kernel's refusal to use an interface address says neither which one nor why it was
    used ("[Errno 19] No such device" for an address no interface of this host has): the error
    names the option, its value and what was being done."""
    try:
        yield
    except OSError as err:
        if err.errno is None:           # one of ours, that says what it is about already
            raise
        value = config.get("context", option)
        if option == "resolver_unicast_daemon":        # a list: the entry's own interface is the one
            value = address
        shown = value if value == address else f"{value} ({address})"
        hint = " (no interface of this host has that address)" if err.errno in (errno.ENODEV, errno.EADDRNOTAVAIL) \
            else ""
        raise OSError(err.errno, f"{option} {shown}: cannot {doing} there: {err.strerror}{hint}") from None


def _unicast_socket(config: UMConfig, interface: str, source_port: int | None) -> socket.socket:
    """A UDP socket on `interface`, at `source_port` or the first free port of the unicast range."""
    low = config.get("context", "resolver_unicast_port_low")
    high = config.get("context", "resolver_unicast_port_high")
    ports = range(low, high + 1) if source_port is None else (source_port,)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    _set_buffer(sock, socket.SO_RCVBUF, config.get("context", "resolver_unicast_receiver_socket_buffer"))
    for port in ports:
        try:
            sock.bind((interface, port))
            break
        except OSError as err:
            if err.errno == errno.EADDRNOTAVAIL:        # no port will do: the address is not ours
                sock.close()
                raise
            continue
    else:
        sock.close()
        wanted = f"port {source_port}" if source_port is not None else f"port in {low}..{high}"
        raise OSError(f"no free resolver unicast {wanted} on {interface}")
    sock.setblocking(False)
    return sock


def _set_buffer(sock: socket.socket, option: int, size: int) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, option, size)
    except OSError:
        pass    # the kernel caps it at rmem_max; a smaller buffer still works


def _options_size(options: list) -> int:
    if not options:
        return 0
    empty = encode_lbmr(LbmrPacket(TopicResolution([], []), list(options)))
    return len(empty) - _LBMR_HEADER


def _packed(records: Iterable, size_of: Callable[[object], int], budget: int, most: int):
    """The records in runs of at most `budget` bytes and `most` records (a record larger than the
    budget on its own goes alone: it cannot be split)."""
    batch: list = []
    used = 0
    for record in records:
        size = size_of(record)
        if batch and (used + size > budget or len(batch) == most):
            yield batch
            batch, used = [], 0
        batch.append(record)
        used += size
    if batch:
        yield batch


def new_src_id() -> bytes:
    return os.urandom(8)

