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


def test_a_pattern_that_backtracks_without_end_matches_nothing_from_then_on(caplog):
    """PCRE gives up at its match limit; here the match is cut short, said once, and the pattern
    is not tried again (each try would cost the whole time limit on the worker's thread)."""
    pattern = compile_wildcard("(x|xx)+$")
    assert pattern.search("x" * 10) and not pattern.too_costly
    with caplog.at_level(logging.WARNING, logger="router.um.wildcard_patterns"):
        assert pattern.search("x" * 80 + "y") is None
        assert pattern.too_costly
        assert pattern.search("x" * 10) is None
    assert len([r for r in caplog.records if "backtracks without end" in r.getMessage()]) == 1
