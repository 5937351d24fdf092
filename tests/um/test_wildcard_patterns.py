"""Wildcard patterns as UM matches them: PCRE syntax on Python, POSIX classes, bounded matching."""
import logging
import re

import pytest

from router.um.wildcard_patterns import compile_wildcard


def test_a_pattern_searches_unanchored_and_knows_posix_classes():
    assert compile_wildcard("prices").search("md.prices.AAPL")
    assert compile_wildcard("^feed\\.[[:digit:]]+$").search("feed.42")
    assert not compile_wildcard("^feed\\.[[:digit:]]+$").search("feed.:]")


@pytest.mark.parametrize("text", ["(unbalanced", "[[:digits:]]", "(" * 3000 + "x" + ")" * 3000])
def test_a_pattern_that_does_not_compile_is_a_re_error(text):
    with pytest.raises(re.error):
        compile_wildcard(text)


def test_a_topic_a_pattern_backtracks_on_without_end_is_not_matched_and_others_still_are(caplog):
    """PCRE gives up at its match limit on that one topic; here that match is cut short, said
    once, and not tried again (each try would cost the whole time limit on the worker's thread).
    The pattern still matches other topics: an ACL's reject pattern keeps rejecting them."""
    pattern = compile_wildcard("^(x|xx)+$")
    assert pattern.search("x" * 10) and pattern.timeouts == 0
    with caplog.at_level(logging.WARNING, logger="router.um.wildcard_patterns"):
        assert pattern.search("x" * 80 + "y") is None
        assert pattern.search("x" * 80 + "y") is None       # remembered: not tried again
        assert pattern.search("x" * 12)
    assert pattern.timeouts == 1
    assert len([r for r in caplog.records if "backtracks without end" in r.getMessage()]) == 1
