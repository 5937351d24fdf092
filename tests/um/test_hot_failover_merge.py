"""The HF receiver's delivery logic (router.um.hot_failover.HfMerge): copies of two sources in,
each number once and in order out."""
import random

from router.um.hot_failover import HfMerge
from router.um.messages import BOS, EOS, UNRECOVERABLE_LOSS, Message, ReceiverEvent

A, B = "TCP:10.0.0.1:14371:1", "TCP:10.0.0.2:14371:1"


class Merged:
    """An HfMerge with two joined sources and what it delivered."""

    def __init__(self, duplicate_delivery: bool = False, hold_limit: int = 0):
        self.delivered: list = []
        self.events: list[ReceiverEvent] = []
        self.merge = HfMerge("T", None, self.events.append, self.delivered.extend, duplicate_delivery, hold_limit)
        for source in (A, B):
            self.merge.on_source_event(ReceiverEvent(BOS, "T", source))
        self.events.clear()

    def send(self, source: str, *numbers: int) -> None:
        self.merge.on_messages([Message("T", source, n & 0xFFFFFFFF, b"%d" % n) for n in numbers])

    def lost(self, source: str, first: int, count: int) -> None:
        self.merge.on_source_event(ReceiverEvent(UNRECOVERABLE_LOSS, "T", source, None, first, count))

    def end(self, source: str) -> None:
        self.merge.on_source_event(ReceiverEvent(EOS, "T", source))

    @property
    def numbers(self) -> list[int]:
        return [m.sequence_number for m in self.delivered]

    @property
    def losses(self) -> list[tuple[int, int]]:
        return [(e.sequence_number, e.count) for e in self.events if e.kind == UNRECOVERABLE_LOSS]


def test_each_number_is_delivered_once_in_order_first_copy_wins():
    merged = Merged()
    merged.send(A, 1, 2, 3)
    merged.send(B, 1, 2, 3, 4)
    merged.send(A, 4, 5)
    assert merged.numbers == [1, 2, 3, 4, 5]
    assert [m.source for m in merged.delivered] == [A, A, A, B, A]
    assert merged.merge.counters["duplicates_discarded"] == 4


def test_duplicates_are_delivered_flagged_with_hf_duplicate_delivery():
    merged = Merged(duplicate_delivery=True)
    merged.send(A, 1, 2)
    merged.send(B, 1, 2)
    assert merged.numbers == [1, 2, 1, 2]
    assert [m.hf_duplicate for m in merged.delivered] == [False, False, True, True]
    assert merged.merge.counters["duplicates_discarded"] == 0


def test_a_gap_waits_for_the_other_source_to_fill_it():
    merged = Merged()
    merged.send(A, 1, 2)
    merged.lost(A, 3, 2)            # A's transport gave up 3 and 4
    merged.send(A, 5, 6)
    assert merged.numbers == [1, 2]         # B has not passed 3 yet: it may have it
    merged.send(B, 1, 2, 3)
    assert merged.numbers == [1, 2, 3]
    merged.send(B, 4)
    assert merged.numbers == [1, 2, 3, 4, 5, 6]
    assert merged.losses == []


def test_a_number_is_lost_only_when_every_source_passed_it():
    merged = Merged()
    merged.send(A, 1, 2)
    merged.lost(A, 3, 1)
    merged.send(A, 4)
    merged.send(B, 1, 2)
    assert merged.numbers == [1, 2] and merged.losses == []
    merged.lost(B, 3, 1)
    assert merged.losses == [(3, 1)]
    merged.send(B, 4, 5)
    assert merged.numbers == [1, 2, 4, 5]
    assert merged.losses == [(3, 1)]          # one event for the run, delivery goes on


def test_a_loss_is_declared_when_the_source_still_waited_for_ends():
    merged = Merged()
    merged.send(A, 1)
    merged.lost(A, 2, 3)
    merged.send(A, 5)
    merged.end(B)                   # B never delivered: nobody else can fill 2..4
    assert merged.numbers == [1, 5]
    assert merged.losses == [(2, 3)]
    assert merged.events[0].kind == EOS and merged.events[1].kind == UNRECOVERABLE_LOSS


def test_numbers_no_source_sent_are_not_a_loss():
    """The later fragments of a large message take numbers: each source passes them without
    its transport declaring anything."""
    merged = Merged()
    merged.send(A, 1, 4, 5)
    merged.send(B, 1, 4)
    assert merged.numbers == [1, 4, 5]
    assert merged.losses == []


def test_numbers_wrap_at_two_to_the_32():
    merged = Merged()
    top = 0xFFFFFFFF
    merged.send(A, top - 1, top)
    merged.lost(A, 0, 1)
    merged.send(A, 1, 2)
    merged.send(B, top - 1, top, 0, 1)
    assert merged.numbers == [top - 1, top, 0, 1, 2]
    assert merged.merge.counters["duplicates_discarded"] == 3


def test_the_first_number_delivered_is_the_lowest_first_seen_and_older_copies_are_discarded():
    merged = Merged()
    merged.merge.on_messages([Message("T", A, 10, b"10"), Message("T", B, 8, b"8"), Message("T", A, 11, b"11")])
    assert merged.numbers == [8]                  # 9 is waited for: B has not passed it
    merged.send(B, 9, 10, 11, 12)
    merged.send(A, 7)                             # before the run: an older copy
    assert merged.numbers == [8, 9, 10, 11, 12]
    assert merged.merge.counters["duplicates_discarded"] == 3


def test_the_hold_limit_gives_up_a_gap_a_stalled_source_would_hold():
    merged = Merged(hold_limit=3)
    merged.send(B, 1)               # B then stalls: it never passes 3
    merged.send(A, 1, 2)
    merged.lost(A, 3, 1)
    merged.send(A, 4, 5, 6)
    assert merged.numbers == [1, 2]
    merged.send(A, 7)               # a fourth held message: past the limit
    assert merged.numbers == [1, 2, 4, 5, 6, 7]
    assert merged.losses == [(3, 1)]
    assert merged.merge.counters["hold_limit_releases"] == 1
    merged.send(B, 2, 3, 4)         # B's late copies come after the run moved on
    assert merged.numbers == [1, 2, 4, 5, 6, 7]


def test_a_gap_still_held_at_the_next_loss_check_is_given_up():
    """delivery_control_loss_check_interval: the hold limit counts messages, and on a quiet topic
    a stopped source (its connection still open) would hold a gap for as long as it is stopped."""
    merged = Merged()
    merged.send(B, 1)               # B then stops
    merged.send(A, 1, 2)
    merged.lost(A, 3, 1)
    merged.send(A, 4, 5)
    merged.merge.check_loss()       # the gap is seen waiting
    assert merged.numbers == [1, 2] and merged.losses == []
    merged.merge.check_loss()       # still waiting a whole interval later: given up
    assert merged.numbers == [1, 2, 4, 5]
    assert merged.losses == [(3, 1)]
    assert merged.merge.counters["loss_check_releases"] == 1


def test_a_gap_that_moved_between_loss_checks_is_not_given_up():
    merged = Merged()
    merged.send(B, 1)
    merged.send(A, 1, 2)
    merged.lost(A, 3, 1)
    merged.send(A, 4)
    merged.merge.check_loss()
    merged.send(B, 2, 3)            # B fills it, then A loses 5
    merged.lost(A, 5, 1)
    merged.send(A, 6)
    merged.merge.check_loss()       # a new gap: seen, not yet given up
    assert merged.numbers == [1, 2, 3, 4] and merged.losses == []
    assert merged.merge.counters["loss_check_releases"] == 0


def test_sources_losing_different_numbers_in_any_interleaving_deliver_every_number_once():
    """Each source's transport declares its own losses (a skip looks the same) before the batch
    after them; however the two sources' batches interleave, the other's copies fill them."""
    count = 300
    for seed in range(200):
        rnd = random.Random(seed)
        lost_by_a = set(rnd.sample(range(1, count), 10))
        lost_by_b = set(rnd.sample(range(1, count), 10)) - lost_by_a
        merged = Merged()
        pending = {A: [(n in lost_by_a, n) for n in range(count)], B: [(n in lost_by_b, n) for n in range(count)]}
        while pending[A] or pending[B]:
            source = rnd.choice([s for s in (A, B) if pending[s]])
            size = rnd.randint(1, 6)
            chunk, pending[source] = pending[source][:size], pending[source][size:]
            batch = []
            for lost, number in chunk:
                if not lost:
                    batch.append(number)
                    continue
                if batch:
                    merged.send(source, *batch)
                    batch = []
                merged.lost(source, number, 1)
            if batch:
                merged.send(source, *batch)
        assert merged.numbers == list(range(count)), seed
        assert merged.losses == [], seed
