"""A hotlink receiver's delivery logic (router.um.hotlinks.HotlinkMerge): the copies of each source
that redundant routers forward (one OTID, one path per router) in, each number of each source once
and in order out."""
from types import SimpleNamespace

from router.um.hotlinks import HotlinkMerge
from router.um.messages import BOS, EOS, UNRECOVERABLE_LOSS, Message, ReceiverEvent

# Two sources of the topic (two OTIDs), each forwarded by routers A and B (two paths each).
OTID_1, OTID_2 = b"\x01" * 32, b"\x02" * 32
PATHS = {"A1": OTID_1, "B1": OTID_1, "A2": OTID_2, "B2": OTID_2}


class Merged:
    def __init__(self, paths=tuple(PATHS), hold_limit: int = 0):
        self.delivered: list = []
        self.events: list[ReceiverEvent] = []
        self.merge = HotlinkMerge("T", None, self.events.append, self.delivered.extend, hold_limit)
        for path in paths:
            self.merge.on_source_event(self._event(BOS, path))

    @staticmethod
    def _event(kind: str, path: str, first: int = 0, count: int = 0) -> ReceiverEvent:
        joined = SimpleNamespace(candidate=SimpleNamespace(otid=PATHS[path]))
        return ReceiverEvent(kind, "T", path, joined, first, count)

    def send(self, path: str, *numbers: int) -> None:
        self.merge.on_messages([Message("T", path, n, b"%s:%d" % (PATHS[path][:1], n)) for n in numbers])

    def lost(self, path: str, first: int, count: int) -> None:
        self.merge.on_source_event(self._event(UNRECOVERABLE_LOSS, path, first, count))

    def end(self, path: str) -> None:
        self.merge.on_source_event(self._event(EOS, path))

    def numbers(self, otid: bytes) -> list[int]:
        return [m.sequence_number for m in self.delivered if PATHS[m.source] == otid]

    @property
    def losses(self) -> list[tuple[str, int, int]]:
        return [(e.source, e.sequence_number, e.count) for e in self.events if e.kind == UNRECOVERABLE_LOSS]


def test_each_source_is_merged_on_its_own_first_copy_wins():
    """Two sources of one topic number their messages each from 0: a number one source delivered
    is no duplicate of the other's."""
    merged = Merged()
    merged.send("A1", 0, 1, 2)
    merged.send("A2", 0, 1)
    merged.send("B1", 0, 1, 2, 3)
    merged.send("B2", 0, 1, 2)
    merged.send("A1", 3, 4)
    assert merged.numbers(OTID_1) == [0, 1, 2, 3, 4]
    assert merged.numbers(OTID_2) == [0, 1, 2]
    assert [m.source for m in merged.delivered if PATHS[m.source] == OTID_1] == ["A1", "A1", "A1", "B1", "A1"]
    assert merged.merge.counters["duplicates_discarded"] == 3 + 1 + 2
    assert merged.losses == []


def test_a_gap_on_one_path_is_filled_by_the_other():
    merged = Merged(paths=("A1", "B1"))
    merged.send("A1", 0, 1, 3, 4)          # A's copy of 2 is missing (on the way, or lost)
    assert merged.numbers(OTID_1) == [0, 1]
    merged.send("B1", 0, 1, 2)
    assert merged.numbers(OTID_1) == [0, 1, 2, 3, 4]
    assert merged.losses == []


def test_a_gap_is_lost_only_once_every_path_has_passed_it():
    merged = Merged(paths=("A1", "B1"))
    merged.send("A1", 0, 1, 3)
    merged.lost("A1", 2, 1)
    assert merged.losses == [], "B may still bring 2"
    merged.send("B1", 0, 1)
    merged.lost("B1", 2, 1)
    merged.send("B1", 3)
    assert merged.numbers(OTID_1) == [0, 1, 3]
    assert merged.losses == [("", 2, 1)]


def test_a_path_that_ends_no_longer_holds_delivery_back():
    """Router A dies: its path ends, B's copy carries on with nothing lost and nothing twice."""
    merged = Merged(paths=("A1", "B1"))
    merged.send("A1", 0, 1, 2)
    merged.send("B1", 0, 1)
    merged.end("A1")
    merged.send("B1", 2, 3, 4)
    assert merged.numbers(OTID_1) == [0, 1, 2, 3, 4]
    assert merged.losses == []
    assert [e.kind for e in merged.events] == [BOS, BOS, EOS]


def test_when_the_last_path_ends_what_waits_is_delivered_after_its_gap_is_reported():
    merged = Merged(paths=("A1", "B1"))
    merged.send("A1", 0, 2, 3)            # 1 is waited for from B, which never brings it
    merged.send("B1", 0)
    merged.end("A1")
    assert merged.numbers(OTID_1) == [0]
    merged.end("B1")
    assert merged.numbers(OTID_1) == [0, 2, 3]
    assert merged.losses == [("", 1, 1)]
    assert OTID_1 not in merged.merge.merges, "a source with no path left is forgotten"
    assert merged.merge.counters["messages_lost"] == 1, "its counts are kept"


def test_messages_of_no_joined_path_go_through_as_they_came():
    """An immediate message to the topic has no path: it is delivered, not merged."""
    merged = Merged(paths=("A1",))
    merged.merge.on_messages([Message("T", "immediate", 0, b"x")])
    merged.send("A1", 0)
    assert [m.source for m in merged.delivered] == ["immediate", "A1"]
