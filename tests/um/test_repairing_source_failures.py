"""A repairing source session (LBT-RM here) whose send fails in a way no socket error explains (a
fault in a header, an encoder, a bug): the loop counts and logs the failure, and what the rates
held back still goes at its time, not at the application's next send (or never, after its last)."""
from __future__ import annotations

import socket

import pytest

from router.um.lbtrm_source import LbtrmSourceSession
from router.um.loop import EventLoop
from router.um.wire.lbmc import LBMC_TYPE_MESSAGE, MESSAGE_HEADER, NHDR_DATA
from router.um.wire.lbtrm import encode_lbtrm_nak
from tests.support.domains import new_domain
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration

FRAME = MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, 1000, 1, 0) + bytes(1000 - MESSAGE_HEADER.size)


class _FailingOnce(LbtrmSourceSession):
    """Raises on the `fail_at`th call of `method` (1: the first), once."""

    def __init__(self, *args, method: str, fail_at: int, **kwargs):
        self.calls = 0
        self.method, self.fail_at = method, fail_at
        super().__init__(*args, **kwargs)

    def _fault(self) -> None:
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("a fault no socket error explains")

    def _send_data(self, sqn, datagram):
        if self.method == "_send_data":
            self._fault()
        super()._send_data(sqn, datagram)

    def _send_retransmission(self, datagram, to):
        if self.method == "_send_retransmission":
            self._fault()
        return super()._send_retransmission(datagram, to)


@pytest.fixture
def failing_session(tmp_path):
    domain = new_domain(tmp_path)
    loop = EventLoop("failing-source")
    loop.start_thread()
    made = []

    def make(**options):
        made.append(_FailingOnce(loop, "127.0.0.1", domain.lbtrm_group, domain.port, domain.tcp_low, domain.tcp_high,
                                 rate_interval=0.1, datagram_max_size=1400, batching_minimum_length=1, **options))
        return made[-1]
    yield loop, make
    for session in made:
        loop.call_and_wait(session.close)
    loop.stop()


def test_a_failed_send_from_the_rate_queue_leaves_the_rest_going_at_the_rate(failing_session):
    """A proxy session (overflow "drop") queues what the data rate holds back; the loop's pump sends
    it. One send failing in the pump must not leave the rest waiting for a next send that may
    never come: they go at the rate, and each got its sequence number (so a receiver NAKs or is
    told of the one that failed; none vanishes)."""
    loop, make = failing_session
    session = make(method="_send_data", fail_at=2, data_rate_limit=80_000, overflow="drop", max_queue=100_000)
    for _ in range(5):
        loop.call_and_wait(session.send_raw, FRAME, None, 1, True)
    assert loop.call_and_wait(lambda: len(session.pending)) > 0, "the rate held nothing back: nothing to pump"
    wait_for(lambda: session.calls > 2 and not session.pending, 10,
             message="what the rate held back goes after a failed send, with no send after it")
    assert loop.callback_errors == 1
    assert loop.call_and_wait(lambda: session.next_sqn) == 5


def test_a_failed_delayed_retransmission_leaves_the_rest_going_at_the_retransmit_rate(failing_session):
    """Retransmissions the retransmit rate holds back (NCF "rx delay": the receiver was told they
    are coming) go from the loop as the rate allows. One failing must not leave the rest waiting
    for a next NAK: the receivers were told not to ask again for a while."""
    loop, make = failing_session
    session = make(method="_send_retransmission", fail_at=2, data_rate_limit=0, retransmit_rate_limit=8 * 5_000)
    for _ in range(6):
        loop.call_and_wait(session.send_raw, FRAME, None, 1, True)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        receiver.sendto(encode_lbtrm_nak(session.session_id, session.port, range(6)), ("127.0.0.1", session.port))
    wait_for(lambda: session.counters["rxs_delayed"] > 1, 10, message="retransmissions held back by the rate")
    wait_for(lambda: session.calls > 2 and not session.rx_delayed, 10,
             message="the delayed retransmissions go after a failed one, with no NAK after it")
    assert loop.callback_errors == 1
