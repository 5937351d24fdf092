"""Control messages on a TCP peer link whose queue is full of data (the companion slow, a WAN
saturated), over real sockets on loopback: data beyond <max-queue> is dropped and counted, but an
interest message, an advertisement or its EOS is never refused, as nothing would send it again
until the link reconnects."""
from __future__ import annotations

import pytest

from router.config.model import Batching
from router.um.wire.lbmc import LBMC_TYPE_CONTROL, LBMC_TYPE_MESSAGE, GatewayName, LbmcMessage

pytestmark = pytest.mark.integration


def test_control_messages_are_never_refused_by_a_queue_full_of_data(harness):
    acceptor, initiator = harness.pair(
        {"timeout": 20000, "receive_buffer": 65536},
        {"timeout": 20000, "max_queue": 200_000, "send_buffer": 65536, "batching": Batching(1, 3)})
    arrived = {"data": 0}
    controls: list[tuple[str, int]] = []            # (name, data messages arrived before it)
    acceptor.link.on_data = lambda tidx, frames, count, longest: arrived.__setitem__("data", arrived["data"] + count)
    acceptor.link.on_message = lambda message: controls.append((message.headers[0].name, arrived["data"]))
    acceptor.link.pause_reading()                   # the companion stops reading
    taken = 0
    while initiator.link.send_data(LbmcMessage(LBMC_TYPE_MESSAGE, [], b"d" * 1000, tidx=1, sqn=taken)):
        taken += 1
    # Far more control bytes than <max-queue> leaves (none) or any allowance beyond it would.
    names = [f"interest-{n:04}-" + "x" * 60 for n in range(3000)]
    refused = [name for name in names if not initiator.link.send_control(LbmcMessage(LBMC_TYPE_CONTROL,
                                                                                     [GatewayName(name)]))]
    assert refused == []
    assert initiator.counter("gateway_cntl_msgs_sent") == initiator.counter("gateway_cntl_msgs")
    assert not initiator.link.send_data(LbmcMessage(LBMC_TYPE_MESSAGE, [], b"d" * 1000, tidx=1, sqn=taken))
    acceptor.link.resume_reading()
    harness.run_until(lambda: len(controls) == len(names), 20, "every control message")
    assert [name for name, _ in controls] == names
    assert all(before == taken for _, before in controls)       # each behind the data queued before it
    assert initiator.link.is_up and acceptor.link.is_up


def test_a_companion_that_reads_nothing_past_the_control_backlog_has_its_link_dropped(harness, monkeypatch):
    """A companion that keeps sending keepalives while it reads nothing for good (its own rings
    full) would make control messages pile up without end: past CONTROL_BACKLOG the link goes
    down instead, and comes up again with the state sent afresh."""
    from router.portals import peer_outbound
    monkeypatch.setattr(peer_outbound, "CONTROL_BACKLOG", 100_000)
    acceptor, initiator = harness.pair({"timeout": 20000, "receive_buffer": 65536},
                                       {"timeout": 20000, "max_queue": 100_000, "send_buffer": 65536})
    acceptor.link.pause_reading()
    sent = 0
    while initiator.link.send_control(LbmcMessage(LBMC_TYPE_CONTROL, [GatewayName("x" * 100)])):
        sent += 1
        assert sent < 100_000, "control messages were never refused"
    assert sent * 100 > 100_000                             # the backlog was taken first
    harness.run_until(lambda: initiator.downs, 10, "the link to drop")
    assert "has not read" in initiator.downs[0]
    acceptor.link.resume_reading()
    harness.run_until(lambda: initiator.link.is_up and acceptor.link.is_up, 20, "the link to come back")
