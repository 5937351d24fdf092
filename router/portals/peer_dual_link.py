"""The seed's dual-TCP peer link (`<tcp>` with `<companion>`): one connection per direction.

Each side listens on `<listen-port>` and connects to its companion; data and control go out on
the connection this side opened and come in on the one it accepted. It is two ordinary peer links
(router.portals.peer_link) — an initiator and an acceptor, each with its own handshake and
keepalive — presented to the peer portal as one: up when both are up to the same companion,
down when either goes down, and then the other is closed too. A connection lost on one side only
(a path that vanished, no FIN) leaves the companion holding its end, alive to it, in its listen
port's one slot: each new connection of ours would be refused until its keepalive timeout (for
ever with keepalives off). Closing the other ends the companion's, which then closes that one.
Two connections that reach different routers (the companion address leads to one, another
connected to our listen port) are not a link: it stays down, counted in ``link_handshakes_rejected``
and said, and the accepted connection is closed: the listen port serves one connection at a time,
and the companion's own must be able to take it. It never has a <udp> data path (the configuration
loader refuses one). The DRO eliminated this form in UM 6.10; the configuration loader warns, and
this keeps old configurations working.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from router.portals.peer_link import PeerLink


class DualPeerLink:
    udp_path = None

    def __init__(self, config, loop, own_name: str, node_id: int, on_up: Callable[[str, int], None],
                 on_down: Callable[[str], None], on_message, counters, log_event, on_data=None, on_read_done=None):
        link = config.link
        outbound = dataclasses.replace(config, link=dataclasses.replace(link, dual=False, acceptor=None))
        inbound = dataclasses.replace(config, link=dataclasses.replace(link, dual=False, initiator=None))
        self.name = config.name
        self.on_up, self.on_down = on_up, on_down
        self.counters, self.log_event = counters, log_event
        self.peer: tuple[str, int] | None = None
        self._stopping = False
        # Sends go out on the connection we opened; what the companion sends arrives on the one
        # we accepted (it may also answer keepalives on ours: each link handles its own).
        self.outbound = PeerLink(outbound, loop, own_name, node_id, self._half_up, self._half_down, on_message,
                                 counters, log_event, on_data=on_data, on_read_done=on_read_done)
        self.inbound = PeerLink(inbound, loop, own_name, node_id, self._half_up, self._half_down, on_message,
                                counters, log_event, on_data=on_data, on_read_done=on_read_done)

    @property
    def is_up(self) -> bool:
        return self.outbound.is_up and self.inbound.is_up

    @property
    def state(self):
        return self.outbound.state if not self.outbound.is_up else self.inbound.state

    def start(self) -> None:
        self.inbound.start()
        self.outbound.start()

    def stop(self) -> None:
        self._stopping = True
        try:
            self.outbound.stop()
            self.inbound.stop()
        finally:
            self._stopping = False

    def _half_up(self, name: str, node_id: int) -> None:
        if not self.is_up or self.peer is not None:
            return
        sent_to, heard_from = self.outbound.peer, self.inbound.peer
        if (sent_to.name, sent_to.node_id) != (heard_from.name, heard_from.node_id):
            self.counters.add("link_handshakes_rejected")
            self.log_event("peer-handshake-failed",
                           f"peer portal {self.name}: the connection to the companion reaches {sent_to.name} "
                           f"(node id {sent_to.node_id:#x}) but the one accepted comes from {heard_from.name} "
                           f"(node id {heard_from.node_id:#x}); closing the accepted one, for the companion's")
            self.inbound.drop(f"not the companion: {sent_to.name} is reached at the companion's address")
            return
        self.peer = (name, node_id)
        self.on_up(name, node_id)

    def _half_down(self, reason: str) -> None:
        if self.peer is None:           # not a link yet (or two routers': the accepted one is closed)
            return
        self.peer = None
        self.on_down(reason)
        if self._stopping:
            return
        for half in (self.outbound, self.inbound):
            if half.is_up:
                half.drop(f"the other connection of the dual link went down: {reason}")

    def send_control(self, message) -> bool:
        return self.outbound.send_control(message)

    def send_data(self, message, fragments: int = 1, longest: int | None = None) -> bool:
        """As PeerLink.send_data: True when all of it was queued."""
        return self.outbound.send_data(message, fragments, longest)

    def send_pieces(self, frames: list[bytes]) -> bool:
        """As PeerLink.send_pieces."""
        return self.outbound.send_pieces(frames)

    def backlog(self) -> float | None:
        return self.outbound.backlog()

    def flush(self) -> None:
        self.outbound.flush()

    def pause_reading(self) -> None:
        self.inbound.pause_reading()

    def resume_reading(self) -> None:
        self.inbound.resume_reading()
