"""One live LBT-TCP exchange in one domain, captured for tshark: a publishing and a subscribing
context, the receiver joined before anything is sent, every message waited for."""
from __future__ import annotations

import threading
from typing import Callable

from router.um.context import Context
from router.um.source import Source
from tests.support.processes import wait_for
from tests.support.tshark import LiveCapture


def captured_exchange(domain, pcap, topic: str, count: int,
                      send: Callable[[Source], None]) -> tuple[list, list[str], list[str]]:
    """`send(source)` on `topic` once a receiver in another context has joined, everything the
    domain's resolver and TCP ports carry captured into `pcap`; returns the `count` messages
    received, and tshark's decode-as and preferences for the capture (the resolver's port as
    LBMR, the source's port as LBT-TCP, LBMC fragments reassembled)."""
    received = []
    done = threading.Event()

    def on_message(message) -> None:
        received.append(message)
        if len(received) == count:
            done.set()
    with LiveCapture(capture_filter=f"udp port {domain.port} or tcp portrange {domain.tcp_low}-{domain.tcp_high}",
                     path=pcap):
        publisher = Context(**domain.overrides())
        subscriber = Context(**domain.overrides())
        try:
            subscriber.receiver(topic, on_message)
            source = publisher.source(topic)
            wait_for(lambda: source.receiver_count >= 1, 10, message="receiver joins")
            send(source)
            source.flush()
            assert done.wait(10), f"{len(received)} of {count} received"
            port = source.transport_info.port
        finally:
            subscriber.close()
            publisher.close()
    decode_as = [f"udp.port=={domain.port},lbmr", f"tcp.port=={port},lbttcp"]
    prefs = [f"lbttcp.source_port_low:{port}", f"lbttcp.source_port_high:{port}", "lbmc.reassemble_fragments:TRUE"]
    return received, decode_as, prefs
