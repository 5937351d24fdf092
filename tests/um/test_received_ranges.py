"""Which bytes of a message in pieces have arrived (router/um/received_ranges.py), against a plain
set of byte positions."""
from hypothesis import given, strategies as st

from router.um.received_ranges import ReceivedRanges


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60)), max_size=40))
def test_each_byte_counts_once_however_the_pieces_overlap(pieces):
    ranges, had = ReceivedRanges(), set()
    for start, length in pieces:
        new = set(range(start, start + length)) - had
        assert ranges.add(start, start + length) == len(new)
        had |= new
        assert ranges.covered == len(had)
    assert all(a < b for a, b in zip(ranges.ends, ranges.starts[1:]))      # merged: no two touch
    assert sum(e - s for s, e in zip(ranges.starts, ranges.ends)) == len(had)


def test_pieces_in_order_stay_one_range():
    ranges = ReceivedRanges()
    for offset in range(0, 65_000 * 1000, 65_000):
        assert ranges.add(offset, offset + 65_000) == 65_000
    assert ranges.starts == [0] and ranges.ends == [65_000_000] and ranges.covered == 65_000_000
