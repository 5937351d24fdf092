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
"""
from __future__ import annotations

import functools
import re

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


@functools.lru_cache(maxsize=1024)
def compile_wildcard(pattern: str) -> re.Pattern:
    """A wildcard pattern compiled to match as UM does (`.search`); re.error if it cannot."""
    try:
        return re.compile(translate(pattern))
    except (RecursionError, OverflowError) as err:
        # Groups nested thousands deep (a query from any application in the domain, or a typo in
        # a configuration file) exhaust the compiler's recursion: bad like any unparsable pattern.
        raise re.error(f"pattern too deeply nested or too large to compile ({err})", pattern) from None
