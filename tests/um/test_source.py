"""A source's sequence numbers (router.um.source), without a network: a session that keeps what
it would send."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from router.um.batching_session import BatchingSession
from router.um.frame_runs import frames_and_last_sequence_numbers
from router.um.source import Source
from router.um.wire.lbmr import TcpInfo

TIDX = 3


class _Session(BatchingSession):
    """Batches go to `sent` at once (a batch is one message long; a timer is never needed)."""

    def __init__(self):
        loop = SimpleNamespace(call_soon_threadsafe=lambda callback: None)
        super().__init__(loop, datagram_max_size=8192, batching_minimum_length=1, batching_interval=1.0,
                         overflow="drop", max_queue=1 << 20)
        self.sent = bytearray()

    def _deliver(self, data) -> None:
        self.sent += data

    def advertised_info(self) -> TcpInfo:
        return TcpInfo("127.0.0.1", 14001, 7)


def _source() -> tuple[Source, _Session]:
    session = _Session()
    return Source(SimpleNamespace(context_id=1), "topic", session, TIDX, otid=bytes(32)), session


def _last_sent(session: _Session) -> int:
    return frames_and_last_sequence_numbers(session.sent)[1][TIDX]


def test_the_last_sequence_number_is_right_at_and_across_the_32_bit_wrap():
    source, session = _source()
    assert source.last_sequence_number() is None                         # nothing sent
    source.sequence_number = 2**32 - 2          # as if 2^32 - 2 frames had been sent (the counter set)
    assert source.last_sequence_number() is None                         # still nothing sent
    source.send(b"a")
    assert source.last_sequence_number() == _last_sent(session) == 2**32 - 2
    source.send(b"b")                           # the 2^32nd frame: the next number is 0 again
    assert source.sequence_number == 0
    assert source.last_sequence_number() == _last_sent(session) == 2**32 - 1
    source.send(b"c")
    assert source.last_sequence_number() == _last_sent(session) == 0
    source.send_many([b"d", b"e"])
    assert source.last_sequence_number() == _last_sent(session) == 2
    source.send_many([])
    assert source.last_sequence_number() == 2


def test_a_message_in_fragments_across_the_wrap_ends_at_its_last_fragment():
    source, session = _source()
    source.sequence_number = 2**32 - 1
    source.send(b"x" * 20_000)                  # three fragments: 2^32 - 1, 0, 1
    assert source.sequence_number == 2
    assert source.last_sequence_number() == _last_sent(session) == 1
    source, session = _source()
    source.sequence_number = 2**32 - 3
    source.send_many([b"x" * 20_000])           # 2^32 - 3 .. 2^32 - 1: the next is 0
    assert source.sequence_number == 0
    assert source.last_sequence_number() == _last_sent(session) == 2**32 - 1


def test_a_source_that_sent_nothing_says_what_it_retains_or_the_origin_said():
    source, _ = _source()
    source.sequence_number = 2**32 - 1          # a counter set, nothing sent through it
    source.upstream_last = 9                    # a router's proxy source: the origin's TSNIs told 9
    assert source.last_sequence_number() == 9


def test_a_closed_source_refuses_a_run_of_messages_as_it_refuses_one():
    """Its session may go on for the context's other sources: what a closed source sent would go
    out under a topic index its receivers were told had ended, with nothing said to the sender."""
    session = _Session()
    closed_sources = []
    context = SimpleNamespace(context_id=1, _close_source=lambda source, finals: closed_sources.append(source))
    source = Source(context, "topic", session, TIDX, otid=bytes(32))
    source.send(b"before")
    source.close()
    assert closed_sources == [source]
    sent = bytes(session.sent)
    with pytest.raises(RuntimeError, match="closed"):
        source.send(b"after")
    with pytest.raises(RuntimeError, match="closed"):
        source.send_many([b"after", b"again"])
    assert bytes(session.sent) == sent and source.last_sequence_number() == 0
