"""A peer link whose reading is paused by flow control (the ring its data feeds is full), over
real sockets on loopback: what the companion sends waits in the kernel, so a pause longer than
the link's silence timeouts must not end the link, on TCP (<gateway-keepalive timeout>) or on
the UDP path (<session-message activity-timeout>, both its receiving and its sending half, whose
companion's ACKs wait unread too)."""
from __future__ import annotations

import time

import pytest

from tests.portals.test_peer_udp import data_message, udp, udp_pair

pytestmark = pytest.mark.integration


def drive_for(harness, seconds: float, each_turn=lambda: None) -> None:
    """Drive every side for `seconds`, calling `each_turn` between turns."""
    end = time.monotonic() + seconds

    def done() -> bool:
        each_turn()
        return time.monotonic() >= end
    harness.run_until(done, seconds + 5, f"{seconds} s of driving")


def test_a_tcp_link_paused_past_its_keepalive_timeout_stays_up(harness):
    acceptor, initiator = harness.pair()          # gateway-keepalive timeout 600 ms
    acceptor.link.pause_reading()
    drive_for(harness, 3 * 0.6)
    acceptor.link.resume_reading()
    drive_for(harness, 2 * 0.6)
    assert acceptor.downs == [] and initiator.downs == []
    assert acceptor.link.is_up and initiator.link.is_up


def test_a_udp_path_paused_past_its_activity_timeout_stays_up_and_loses_nothing(harness):
    quick = {"session_activity_timeout": 600, "session_max_interval": 100}
    acceptor, initiator, received = udp_pair(harness, udp(**quick), udp(**quick), interval=100, timeout=60_000)
    harness.run_until(lambda: all(side.link.is_up and side.link.udp_path.receiver
                                  and side.link.udp_path.receiver.connected for side in (acceptor, initiator)),
                      5, "the link with both halves of its UDP path connected")
    sent = 0

    def send_both_ways() -> None:
        nonlocal sent
        if sent < 1000 and initiator.link.is_up and acceptor.link.is_up:
            assert initiator.link.send_data(data_message(sent)) and acceptor.link.send_data(data_message(sent))
            sent += 1

    acceptor.link.pause_reading()
    drive_for(harness, 3 * 0.6, send_both_ways)
    acceptor.link.resume_reading()
    for side in (acceptor, initiator):
        side.link.flush()
    arrived = lambda name: sum(count for _, _, count in received[name].data)
    harness.run_until(lambda: arrived("PB") == arrived("PA") == sent or acceptor.downs or initiator.downs, 10,
                      "what each side sent to arrive")
    assert acceptor.downs == [] and initiator.downs == []
    for name in ("PA", "PB"):
        assert [m.sqn for m in received[name].messages()] == list(range(sent))
    assert initiator.link.udp_path.sender.counters["clients_timed_out"] == 0
    assert acceptor.link.udp_path.sender.counters["clients_timed_out"] == 0
