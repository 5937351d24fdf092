"""Peer link elements → SingleTcpLink, UdpLink, Batching, GatewayKeepalive.

The eliminated dual-TCP <tcp> form (seed 001 §2.9) is accepted with a deprecation warning and kept
with its meaning: this side listens on <listen-port> and connects to its <companion>, one
connection per direction. It maps to a SingleTcpLink with both `acceptor` and `initiator` set and
`dual=True`, so the peer worker has one model to read.
"""
from __future__ import annotations

from lxml import etree

from router.config.model import (Acceptor, Batching, GatewayKeepalive, Initiator, SingleTcpLink,
                                 TlsConfig, UdpLink)
from router.config.reader import INT32_MAX, ElementReader

MIN_BATCH_INTERVAL = 3                  # ms (spec/dro.md §1.6)
COMPRESSIONS = ("lz4",)


def build_link(reader: ElementReader, peer: etree._Element) -> SingleTcpLink:
    single = reader.child(peer, "single-tcp")
    if single is not None:
        link = _tcp_options(reader, single)
        link.initiator = _initiator(reader, reader.child(single, "initiator"))
        acceptor = reader.child(single, "acceptor")
        if acceptor is not None:
            link.acceptor = _acceptor(reader, acceptor)
        if link.initiator is None and link.acceptor is None:    # the DTD requires one; belt and braces
            reader.fail(single, "a peer link needs an <initiator> or an <acceptor>")
        return link
    dual = reader.child(peer, "tcp")
    reader.warn(dual, "dual TCP (<tcp> with <companion>) was eliminated in UM 6.10; accepted as one "
                      "listening and one connecting socket. Use <single-tcp> with <initiator> on one "
                      "side and <acceptor> on the other")
    link = _tcp_options(reader, dual)
    link.acceptor = _acceptor(reader, dual)
    link.initiator = _initiator(reader, reader.child(dual, "companion"))
    link.dual = True
    return link


def _tcp_options(reader: ElementReader, element: etree._Element) -> SingleTcpLink:
    link = SingleTcpLink(receive_buffer=reader.child_int(element, "receive-buffer", 0),
                         send_buffer=reader.child_int(element, "send-buffer", 0),
                         keepalive=reader.child(element, "keepalive") is not None,
                         nodelay=reader.child(element, "nodelay") is not None)
    interface = reader.child(element, "interface")
    if interface is not None:
        link.interface = reader.interface(interface)
    compression = reader.child(element, "compression")
    if compression is not None:
        link.compression = reader.text(compression).lower()
        if link.compression not in COMPRESSIONS:
            reader.fail(compression, f"the only compression is LZ4, got '{reader.text(compression)}'")
    link.tls = _tls(reader, reader.child(element, "tls"))
    return link


def _initiator(reader: ElementReader, element: etree._Element | None) -> Initiator | None:
    if element is None:
        return None
    address = reader.child(element, "address")
    return Initiator(address=reader.host(address, reader.child_text(element, "address")),
                     port=_port(reader, element, "port"),
                     reconnect_interval=reader.attr_int(element, "reconnect-interval", 5000, 1))


def _acceptor(reader: ElementReader, parent: etree._Element) -> Acceptor:
    """The <listen-port> of an <acceptor> (or of the eliminated <tcp>), with where it was written."""
    return Acceptor(_port(reader, parent, "listen-port"),
                    reader.source.where(reader.child(parent, "listen-port")))


def _port(reader: ElementReader, parent: etree._Element, tag: str) -> int:
    return reader.child_int(parent, tag, 0, 1, 65535)


def _tls(reader: ElementReader, element: etree._Element | None) -> TlsConfig | None:
    if element is None:
        return None
    return TlsConfig(certificate=reader.child_path(element, "certificate"),
                     certificate_key=reader.child_path(element, "certificate-key"),
                     certificate_key_password=reader.child_text(element, "certificate-key-password"),
                     trusted_certificates=reader.child_path(element, "trusted-certificates"),
                     cipher_suites=reader.child_text(element, "cipher-suites"))


def build_udp(reader: ElementReader, element: etree._Element | None) -> UdpLink | None:
    if element is None:
        return None
    child, attr = reader.child, reader.attr_int
    window, rate = child(element, "transmission-window"), child(element, "peer-rate-limit")
    nak, session = child(element, "nak-handling"), child(element, "session-message")
    connect = child(element, "connect")
    udp = UdpLink(
        port=_port(reader, element, "port"),
        receive_buffer=reader.child_int(element, "receive-buffer", 8388608),
        send_buffer=reader.child_int(element, "send-buffer", 1048576),
        multiple_receive_max_datagrams=reader.child_int(element, "multiple-receive-max-datagrams", 0),
        coalesce_threshold=reader.child_int(element, "coalesce-threshold", 15, 1),
        transmission_window_size=attr(window, "size", 25165824, 1),
        transmission_window_limit=attr(window, "limit", 0),
        rate_limit_data=attr(rate, "data", 10000000, 1),
        rate_limit_retransmit=attr(rate, "retransmit", 5000000, 1),
        rate_limit_interval=attr(rate, "interval", 100, 1),
        nak_initial_backoff_interval=attr(nak, "initial-backoff-interval", 0),
        nak_backoff_interval=attr(nak, "backoff-interval", 200, 1),
        nak_suppress_interval=attr(nak, "suppress-interval", 1000),
        nak_generation_interval=attr(nak, "generation-interval", 10000, 1),
        send_naks=reader.attr_yes_no(nak, "send-naks", True),
        nak_ignore_interval=attr(nak, "ignore-interval", 100),
        session_min_interval=attr(session, "min-interval", 200, 1),
        session_max_interval=attr(session, "max-interval", 10000, 1),
        session_activity_timeout=attr(session, "activity-timeout", 60000, 1),
        connect_attempt_interval=attr(connect, "attempt-interval", 200, 1),
        connect_max_attempts=attr(connect, "max-attempts", 10, 1),
        where=reader.source.where(child(element, "port")))
    reader.min_below_max(session, udp.session_min_interval, udp.session_max_interval)
    return udp


def build_batching(reader: ElementReader, element: etree._Element | None) -> Batching:
    return Batching(reader.child_int(element, "min-length", 8192, 1),
                    reader.child_int(element, "batch-interval", 200, MIN_BATCH_INTERVAL, INT32_MAX))


def build_keepalive(reader: ElementReader, element: etree._Element | None) -> GatewayKeepalive:
    keepalive = GatewayKeepalive(reader.attr_int(element, "interval", 5000),
                                 reader.attr_int(element, "timeout", 15000, 1),
                                 reader.attr_yes_no(element, "idle", True))
    if element is not None and keepalive.interval and keepalive.timeout <= keepalive.interval:
        reader.warn(element, f"timeout ({keepalive.timeout}) should be about three times the interval "
                             f"({keepalive.interval}); the link will be dropped between keepalives")
    return keepalive
