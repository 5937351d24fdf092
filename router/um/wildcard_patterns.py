"""Wildcard receiver patterns (PCRE and POSIX extended regex) as UM matches them, on Python's `re`.

UM hands a pattern to PCRE (or regcomp) unanchored, with no flags: `re.search` does the same, and
the two syntaxes agree with Python's for what topic patterns use — with one exception that matters:
POSIX character classes inside a bracket expression, ``[[:digit:]]``, ``[^[:space:]]``, which both
PCRE and POSIX regex support and Python does not (it reads ``[[:digit:]]+`` as a set of ``[:dgit``
followed by literal ``]``s: matching ``":]"`` and not ``"42"``, with no error). Such a pattern
would never have matched the topics its receivers want, wherever it is matched: in the router's
interest table, its proxy wildcard receivers, or a context answering wildcard queries. So each
class is rewritten to its ASCII ranges (UM's C locale) before compiling; a class name PCRE does not
know is an error, as it is there.

Matching is bounded in time. A pattern comes from any application in a domain (a wildcard receiver
or query) and is matched against every topic the router sees, on a worker's only thread; Python's
`re` backtracks without limit, so one pattern such as ``(a|aa)+$`` against a long topic name would
stop the worker for hours (and again after each restart, the pattern being heard again). PCRE stops
at its match limit instead. So patterns are checked with `re` (its errors, as before) and matched
with the `regex` library, which takes a timeout: a topic the pattern cannot be matched against in
that time is not matched, as PCRE's match limit makes it (and not tried again: each try costs the
whole time on the worker's thread); the pattern still matches other topics, as in UM (an ACL's
reject pattern keeps rejecting them).
"""
from __future__ import annotations

import functools
import logging
import re

import regex

log = logging.getLogger(__name__)

# PCRE's default match limit (ten million steps) takes tens of milliseconds; a topic name is short,
# a sane pattern matches it in microseconds.
MATCH_TIME_LIMIT = 0.05
MAX_COSTLY_TOPICS = 1024

_CLASSES = {
    "alnum": "a-zA-Z0-9", "alpha": "a-zA-Z", "ascii": "\\x00-\\x7f", "blank": " \\t",
    "cntrl": "\\x00-\\x1f\\x7f", "digit": "0-9", "graph": "!-~", "lower": "a-z", "print": " -~",
    "punct": "!-/:-@\\[-`{-~", "space": "\\t\\n\\x0b\\x0c\\r ", "upper": "A-Z", "word": "a-zA-Z0-9_",
    "xdigit": "0-9A-Fa-f",
}
_CLASS_AT = re.compile(r"\[:(\^?)([A-Za-z]*):\]")


def _bracket(pattern: str, start: int) -> tuple[str, int]:
    """The bracket expression opening at `start`, rewritten for Python; and where it ends."""
    out, position, end = ["["], start + 1, len(pattern)
    if position < end and pattern[position] == "^":
        out.append("^")
        position += 1
    if position < end and pattern[position] == "]":         # a ']' first is literal
        out.append("\\]")
        position += 1
    while position < end:
        char = pattern[position]
        if char == "]":
            out.append("]")
            return "".join(out), position + 1
        if char == "\\":
            out.append(pattern[position:position + 2])
            position += 2
            continue
        if char == "[":
            named = _CLASS_AT.match(pattern, position)
            if named is not None:
                negated, name = named.groups()
                if negated or name not in _CLASSES:
                    raise re.error(f"unsupported POSIX class name [:{negated}{name}:]", pattern, position)
                out.append(_CLASSES[name])
                position = named.end()
                continue
            out.append("\\[")                                # a literal '[' (no nested sets in PCRE)
            position += 1
            continue
        out.append(char)
        position += 1
    raise re.error("missing terminating ] for character class", pattern, start)


def translate(pattern: str) -> str:
    """`pattern` in Python's syntax (unchanged unless it has POSIX classes)."""
    if "[:" not in pattern:
        return pattern
    out, position, end = [], 0, len(pattern)
    while position < end:
        char = pattern[position]
        if char == "\\":
            out.append(pattern[position:position + 2])
            position += 2
        elif char == "[":
            text, position = _bracket(pattern, position)
            out.append(text)
        else:
            out.append(char)
            position += 1
    return "".join(out)


class WildcardPattern:
    """A compiled wildcard pattern; `search(topic)` as `re.Pattern.search`, bounded in time."""

    __slots__ = ("text", "timeouts", "_matcher", "_too_costly")

    def __init__(self, text: str, matcher: regex.Pattern):
        self.text, self._matcher = text, matcher
        self.timeouts = 0                       # topics it took longer than MATCH_TIME_LIMIT to match
        self._too_costly: dict[str, None] = {}  # those topics (the latest MAX_COSTLY_TOPICS): not tried again

    def search(self, topic: str):
        if topic in self._too_costly:
            return None
        try:
            return self._matcher.search(topic, timeout=MATCH_TIME_LIMIT)
        except TimeoutError:
            self.timeouts += 1
            if len(self._too_costly) >= MAX_COSTLY_TOPICS:
                del self._too_costly[next(iter(self._too_costly))]
            self._too_costly[topic] = None
            if self.timeouts == 1:
                log.warning("wildcard pattern %r took more than %.0f ms to match topic %r: it backtracks without "
                            "end; that topic is not matched (PCRE stops at its match limit), nor any other it "
                            "takes as long for", self.text, MATCH_TIME_LIMIT * 1000, topic[:200])
            return None


@functools.lru_cache(maxsize=1024)
def compile_wildcard(pattern: str) -> WildcardPattern:
    """A wildcard pattern compiled to match as UM does (`.search`); re.error if it cannot."""
    translated = translate(pattern)
    try:
        re.compile(translated)
        matcher = regex.compile(translated, regex.VERSION0)
    except (RecursionError, OverflowError) as err:
        # Groups nested thousands deep (a query from any application in the domain, or a typo in
        # a configuration file) exhaust the compiler's recursion: bad like any unparsable pattern.
        raise re.error(f"pattern too deeply nested or too large to compile ({err})", pattern) from None
    except regex.error as err:            # accepted by re (whose errors callers expect), not by regex
        raise re.error(str(err), pattern) from None
    return WildcardPattern(pattern, matcher)
