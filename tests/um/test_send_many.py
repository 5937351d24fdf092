"""A run of messages (BatchingSession.send_many, Source.send_many) goes out as the same messages
sent one by one would: the same frames, in the same batches, kept by retention alike (a session
that keeps each batch it would send); and live on LBT-TCP, whole, in order, decoded by tshark."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from router.um.batching_session import BatchingSession
from router.um.source import Source
from router.um.wire.lbmr import TcpInfo
from tests.support.captured_exchange import captured_exchange
from tests.support.tshark import assert_no_expert_info, decode

TIDX = 5


class _Session(BatchingSession):
    """Each batch it would send, as it was cut; the flush timers it asked for."""

    def __init__(self, minimum: int = 200):
        self.timers_armed = 0
        loop = SimpleNamespace(call_soon_threadsafe=lambda callback: self._timer_asked())
        super().__init__(loop, datagram_max_size=1000, batching_minimum_length=minimum, batching_interval=1.0,
                         overflow="drop", max_queue=1 << 20)
        self.batches: list[bytes] = []

    def _timer_asked(self) -> None:
        self.timers_armed += 1

    def _deliver(self, data) -> None:
        self.batches.append(bytes(data))

    def advertised_info(self) -> TcpInfo:
        return TcpInfo("127.0.0.1", 14001, 7)


class _Retention:
    def __init__(self):
        self.frames: list[tuple[int, bytes]] = []

    def add(self, sqn: int, frame) -> None:
        self.frames.append((sqn, bytes(frame)))


def _messages() -> list[bytes]:
    """Small ones, one that fits no datagram (fragmented), small ones again, of varied lengths."""
    small = [bytes([n]) * (20 + n % 50) for n in range(40)]
    return small + [b"F" * 2500] + small[:25] + [b"tail"]


def _one_by_one(session: _Session, messages, sqn: int = 0) -> int:
    for message in messages:
        sqn = session.send(TIDX, sqn, message)
    return sqn


def test_a_run_goes_out_in_the_batches_that_sending_one_by_one_makes():
    alone, run = _Session(), _Session()
    # A partial batch before the run: the run's first batch is cut where it would be.
    _one_by_one(alone, [b"before" * 10])
    _one_by_one(run, [b"before" * 10])
    expected = _one_by_one(alone, _messages(), 2**32 - 30)    # across the wrap, through the fragments
    assert run.send_many(TIDX, 2**32 - 30, iter(_messages())) == (expected, True)
    assert run.batches == alone.batches and len(run.batches) > 10
    assert bytes(run.batch) == bytes(alone.batch) != b""      # the tail waits for the timer, in both


def test_a_run_may_reuse_one_buffer_for_every_message():
    """umsrc stamps each message into one buffer: each must be copied before the next is made."""
    alone, run = _Session(), _Session()
    buffer = bytearray(30)

    def stamped():
        for n in range(50):
            buffer[:2] = n.to_bytes(2, "big")
            yield buffer
    _one_by_one(alone, [n.to_bytes(2, "big") + bytes(28) for n in range(50)])
    run.send_many(TIDX, 0, stamped())
    assert run.batches == alone.batches and bytes(run.batch) == bytes(alone.batch)


def test_what_a_run_leaves_in_the_batch_arms_the_flush_timer():
    session = _Session()
    session.send_many(TIDX, 0, [b"x" * 30] * 3)               # 126 bytes of 200: not sent yet
    assert session.batches == [] and len(session.batch) == 126
    assert session.flush_timer_armed and session.timers_armed == 1


def test_a_retained_topic_keeps_every_frame_of_a_run_as_it_keeps_those_sent_one_by_one():
    kept = {}
    for name, send in (("alone", lambda s: _one_by_one(s, _messages())),
                       ("run", lambda s: s.send_many(TIDX, 0, _messages()))):
        session = _Session()
        kept[name] = _Retention()
        session.retain(TIDX, kept[name])
        send(session)
    assert kept["run"].frames == kept["alone"].frames
    assert [sqn for sqn, _ in kept["run"].frames] == list(range(len(_messages()) + 2))   # 3 fragments


def test_an_empty_run_sends_nothing_and_says_so():
    session = _Session()
    assert session.send_many(TIDX, 7, []) == (7, False)
    assert session.batches == [] and session.batch == bytearray() and session.timers_armed == 0
    source = Source(SimpleNamespace(context_id=1), "topic", session, TIDX, otid=bytes(32))
    source.send_many(iter([]))
    assert source.last_sequence_number() is None
    source.send_many(iter([b"a"]))
    assert source.last_sequence_number() == 0


@pytest.mark.integration
def test_a_run_on_lbt_tcp_arrives_whole_in_order_and_decodes_cleanly(domain, tmp_path):
    """Live: send_many's batches (small messages, a fragmented one among them) reach a receiver
    as they were sent, and tshark reads the stream with no expert info."""
    pcap = tmp_path / "run.pcapng"
    messages = [b"run message %d" % n for n in range(300)]
    messages[150:150] = [bytes([7]) * 150_000]                # fragmented at 65535, mid-run
    received, decode_as, prefs = captured_exchange(domain, pcap, "run.topic", len(messages),
                                                   lambda source: source.send_many(iter(messages)))
    assert [m.data for m in received] == messages
    # The fragmented message is numbered by its first fragment; its three frames take 150..152.
    assert [m.sequence_number for m in received] == [*range(151), *range(153, 303)]
    assert_no_expert_info(pcap, decode_as, prefs, min_severity="warn")
    frames = decode(pcap, decode_as, prefs, fields=["lbmc.topic", "lbmc.frag.offset"])
    assert any("run.topic" in f.get("lbmc.topic", []) for f in frames), "tshark tied no data frame to the topic"
    assert any(f.get("lbmc.frag.offset") for f in frames), "no fragment headers decoded"


def test_what_a_run_gave_before_its_iterable_failed_is_sent_as_one_by_one():
    """A run's frames wait outside the batch: an iterable that raises must not take them along."""
    def failing():
        yield from [b"one" * 10, b"two" * 10]
        raise ValueError("the application's iterable broke")
    alone, run = _Session(), _Session()
    _one_by_one(alone, [b"one" * 10, b"two" * 10])
    with pytest.raises(ValueError):
        run.send_many(TIDX, 0, failing())
    assert bytes(run.batch) == bytes(alone.batch) != b"" and run.batches == alone.batches


def test_a_source_whose_run_failed_midway_numbers_its_next_message_after_what_went_out():
    def failing():
        yield from [b"one" * 10, b"two" * 10]
        raise ValueError("the application's iterable broke")
    session = _Session()
    source = Source(SimpleNamespace(context_id=1), "topic", session, TIDX, otid=bytes(32))
    with pytest.raises(ValueError):
        source.send_many(failing())
    assert source.last_sequence_number() == 1
    source.send_many([b"three" * 10])
    assert source.last_sequence_number() == 2
