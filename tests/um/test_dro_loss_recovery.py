"""transport_tcp_dro_loss_recovery_timeout / transport_lbtipc_dro_loss_recovery_timeout over real
TCP connections and LBT-IPC rings: a receiver behind a router may see messages late (a route
changed, and ones still on the old path come after ones on the new). With the option the
receiver waits that long, gets them in order and reports nothing lost; without it (UM's default
0) the gap is an unrecoverable loss at once and the late ones are dropped; what never comes is
told in its place when the wait is over.

The late arrival is made at the receiving stream: the frames chosen are taken out of the bytes
the socket (or ring) gave, and put back after a later frame."""
from __future__ import annotations

import pytest

from router.um.context import Context
from router.um.wire.lbmc import LBMC_TYPE_MESSAGE, MESSAGE_HEADER
from tests.support.domains import new_domain
from tests.um.test_otr import Collector
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration

OPTION = {"tcp": "transport_tcp_dro_loss_recovery_timeout", "lbtipc": "transport_lbtipc_dro_loss_recovery_timeout"}


class Late:
    """At the receiving stream: frames of `tidx` with sequence numbers in `late` are taken out of
    the reads and put back just after the frame `release` (topic index, sequence number) passes
    (None: never)."""

    def __init__(self, stream, tidx: int, late, release: tuple[int, int] | None):
        self.tidx, self.late, self.release = tidx, set(late), release
        self.held: list[bytes] = []
        self.original = stream._parse
        stream._parse = self._parse             # the stream calls its own _parse for every read

    def _parse(self, data, end=None, view=None) -> int:
        end = len(data) if end is None else end
        out, offset = bytearray(), 0
        while end - offset >= 4:
            length = (data[offset + 2] << 8) | data[offset + 3]
            if length < 4 or end - offset < length:
                break
            frame = bytes(data[offset:offset + length])
            offset += length
            if frame[0] == LBMC_TYPE_MESSAGE and length >= MESSAGE_HEADER.size:
                _, _, _, tidx, sqn = MESSAGE_HEADER.unpack_from(frame)
                if tidx == self.tidx and sqn in self.late:
                    self.held.append(frame)
                    continue
                out += frame
                if (tidx, sqn) == self.release:
                    out += b"".join(self.held)
                    self.held.clear()
                continue
            out += frame
        assert self.original(bytes(out)) == len(out)
        return offset


def _run(tmp_path, transport: str, timeout_ms: int | None, late, after, count: int = 60, topic: str = "dro.loss"):
    domain = new_domain(tmp_path)
    receiving_options = {} if timeout_ms is None else {OPTION[transport]: timeout_ms}
    with Context(**domain.overrides(), transport=transport) as sending, \
            Context(**domain.overrides(), **receiving_options) as receiving:
        source = sending.source(f"{topic}.{transport}")
        got = Collector(receiving, f"{topic}.{transport}")
        wait_for(lambda: any(e[0] == "BOS" for e in got.events) and source.receiver_count >= 1, 10,
                 message="the receiver joined, and the source knows it")
        [joined] = got.receiver.joined.values()
        stream = joined.client
        Late(stream, source.index, late, None if after is None else (source.index, after))
        for n in range(count):
            source.send(b"%06d" % n, flush=True)      # a read each, mostly: the late ones cross reads
        expected = count - (len(late) if after is None or timeout_ms is None else 0)
        wait_for(lambda: len(got.messages) >= expected, 15, message=f"{expected} messages")
        if after is None and timeout_ms:
            wait_for(lambda: got.losses, 15, message="the loss told when the wait is over")
        counters = dict(stream.counters)
    return got, counters


@pytest.mark.parametrize("transport", ["tcp", "lbtipc"])
def test_late_messages_within_the_timeout_come_in_order_and_nothing_is_reported_lost(tmp_path, transport):
    late = {10, 11, 12, 30}
    got, counters = _run(tmp_path, transport, 60_000, late, after=40)
    assert got.sqns == list(range(60))
    assert [m.data for m in got.messages] == [b"%06d" % n for n in range(60)]
    assert got.losses == []
    assert counters["frames_late"] == len(late) and counters["gaps_waited"] == 1     # one wait: 30 joins it
    assert counters["sequence_gaps"] == counters["frames_missing"] == 0


@pytest.mark.parametrize("transport", ["tcp", "lbtipc"])
def test_without_the_option_a_late_message_is_an_unrecoverable_loss_at_once(tmp_path, transport):
    late = {10, 11, 12, 30}
    got, counters = _run(tmp_path, transport, None, late, after=40)
    assert got.sqns == [n for n in range(60) if n not in late]          # the late ones: dropped as old
    assert got.losses == [(10, 3, 10), (30, 1, 27)]
    assert counters["sequence_gaps"] == 2 and counters["frames_missing"] == 4 and counters["gaps_waited"] == 0


@pytest.mark.parametrize("transport", ["tcp", "lbtipc"])
def test_what_does_not_come_within_the_timeout_is_lost_in_its_place(tmp_path, transport):
    got, counters = _run(tmp_path, transport, 300, {10, 11, 12}, after=None)
    assert got.sqns == [n for n in range(60) if n not in {10, 11, 12}]
    assert got.losses == [(10, 3, 10)]                                   # after 0-9, before 13-59
    assert counters["gaps_waited"] == 1 and counters["frames_missing"] == 3 and counters["frames_late"] == 0
