"""Setting the topic index of forwarded LBMC frames (a proxy source or a peer link whose index
differs from the origin's): every frame's index changes, and nothing else."""
from hypothesis import given
from hypothesis import strategies as st

from router.um.batching_session import BatchingSession, set_topic_index, with_topic_index
from router.um.wire.lbmc import LBMC_TYPE_MESSAGE, MESSAGE_HEADER, NHDR_DATA


def frames_of(lengths: list[int], tidx: int) -> bytes:
    out = bytearray()
    for sqn, length in enumerate(lengths):
        payload = bytes((sqn + k) & 0xFF for k in range(length - MESSAGE_HEADER.size))
        out += MESSAGE_HEADER.pack(LBMC_TYPE_MESSAGE, NHDR_DATA, length, tidx, sqn) + payload
    return bytes(out)


@given(st.lists(st.integers(MESSAGE_HEADER.size, 200), min_size=1, max_size=60), st.integers(0, 2**32 - 1))
def test_every_frame_gets_the_new_index_and_nothing_else_changes(lengths, tidx):
    assert with_topic_index(frames_of(lengths, 7), tidx, len(lengths)) == frames_of(lengths, tidx)


def test_frames_of_one_length_and_lengths_that_only_add_up_alike():
    uniform = [76] * 40
    alternating = [72, 80] * 20          # the same total as 40 × 76: not one length, walked frame by frame
    for lengths in (uniform, alternating):
        assert with_topic_index(frames_of(lengths, 1), 9, len(lengths)) == frames_of(lengths, 9)


def test_in_place_after_earlier_bytes_of_a_batch():
    batch = bytearray(b"earlier batch bytes")
    start = len(batch)
    batch += frames_of([64] * 20, 3)
    set_topic_index(batch, start, 5, 20)
    assert batch == b"earlier batch bytes" + frames_of([64] * 20, 5)


class SentBatches(BatchingSession):
    """A session whose transport keeps what it is given (the batching logic is what is tested)."""

    def __init__(self):
        super().__init__(None, datagram_max_size=8192, batching_minimum_length=2048, batching_interval=0.2,
                         overflow="drop", max_queue=1 << 20)
        self.sent: list[bytes] = []

    def _deliver(self, data) -> None:
        self.sent.append(bytes(data))


def test_a_lone_record_with_a_new_index_goes_out_at_once_and_the_callers_bytes_stay():
    """`now` (a reader with nothing to batch it with) sends rewritten frames at once too, as it
    sends frames that keep their index: no batch waiting for a flush."""
    session = SentBatches()
    frames = frames_of([64] * 3, 3)
    ring_view = memoryview(bytearray(frames))
    session.send_raw(ring_view, 5, 3, now=True)
    assert session.sent == [frames_of([64] * 3, 5)] and not session.batch
    assert ring_view == frames
    session.send_raw(frames, None, 3, now=True)
    assert session.sent[-1] == frames and session.counters["batches"] == 2
