"""Wildcard patterns match topics as UM's PCRE and POSIX regex do, POSIX character classes too."""
import pytest

from router.ipc import bus_messages as bm
from router.portals.interest import InterestTable, pattern_problem
from router.um.receiver import WildcardReceiver

CLASSES = [
    (r"^feed\.[[:digit:]]+$", ["feed.42"], ["feed.x", "feed.:]", "feed."]),
    (r"^[[:upper:]][[:lower:]]+\.[^[:space:]]+$", ["Prices.eu-1"], ["prices.eu", "Prices.e u"]),
    (r"^px[[:punct:][:xdigit:]]+$", ["px.ff-0A"], ["px.fg"]),
    (r"^[]a[:alpha:]]+$", ["]ab"], ["1"]),                   # a ']' first in a set is literal
    (r"^a\[[[:alnum:]_]+\]$", ["a[b_1]"], ["a[-]"]),
]


@pytest.mark.parametrize("pattern, matching, other", CLASSES)
def test_posix_classes_in_the_interest_table(pattern, matching, other):
    assert pattern_problem(pattern) is None
    for kind in (bm.INTEREST_PCRE, bm.INTEREST_REGEX):
        table = InterestTable()
        table.apply(bm.Interest("E2", 2, kind, pattern, bm.OP_ADD))
        assert [t for t in matching if table.portals_for(t) == {("E2", 2)}] == matching
        assert [t for t in other if table.portals_for(t)] == []


@pytest.mark.parametrize("pattern, matching, other", CLASSES)
def test_posix_classes_in_a_wildcard_receiver(pattern, matching, other):
    receiver = WildcardReceiver(None, pattern, None)
    assert [t for t in matching if receiver.matches(t)] == matching
    assert [t for t in other if receiver.matches(t)] == []


@pytest.mark.parametrize("pattern", [r"^[[:nope:]]", r"^[[:^digit:]]", r"^[[:digit:]"])
def test_a_class_pcre_does_not_know_is_an_invalid_pattern(pattern):
    assert pattern_problem(pattern) is not None
    with pytest.raises(ValueError):
        WildcardReceiver(None, pattern, None)
