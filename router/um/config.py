"""UM configuration: plain-text files (`context|source|receiver OPTION VALUE`), keyword overrides.

A `UMConfig` holds one value per (scope, option). Every error names the file and line it came from,
because an operator with forty configuration files needs to know which one to open.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from router.um.options import (INTERVAL_BOUNDS, OPTIONS, RANGES, WHITESPACE, OptionError, UnicastDaemon,
                                check_no_control_characters, control_character, lookup)


class ConfigError(ValueError):
    """A configuration mistake, with where it was made."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None,
                 element: str | None = None):
        self.path, self.line, self.element, self.reason = path, line, element, message
        where = path or "<config>"
        if line is not None:
            where += f":{line}"
        if element:
            where += f": <{element}>"
        super().__init__(f"{where}: {message}")


@dataclass
class UMConfig:
    """Values by scope; a value set for one scope never leaks into another."""

    values: dict[tuple[str, str], Any] = field(default_factory=dict)
    # (file, line) each value was set at, when it came from a file: what a dump shows beside the
    # value, so an operator knows which file to edit. Not part of a configuration's equality.
    origins: dict[tuple[str, str], tuple[str, int | None]] = field(default_factory=dict, compare=False, repr=False)

    def get(self, scope: str, name: str) -> Any:
        """The value of `name` for `scope`, else the option's default."""
        key = (scope, name)
        if key in self.values:
            return self.values[key]
        return _default(OPTIONS[name], scope)

    def set(self, scope: str, name: str, text: Any, where: tuple[str | None, int | None] = (None, None)) -> None:
        try:
            spec = lookup(scope, name)
            key = (scope.strip().lower(), spec.name)
            text = _as_text(text)
            check_no_control_characters(spec.name, text)
            if spec.add is not None and key in self.values:     # resolver_unicast_daemon: a list
                value = spec.add(self.values[key], text)
            else:
                value = spec.parse(text)
        except OptionError as err:
            raise ConfigError(str(err), where[0], where[1]) from None
        self.values[key] = value
        if where[0] is not None:
            self.origins[key] = where
        else:
            self.origins.pop(key, None)

    def check_ranges(self) -> None:
        """Each low..high pair names at least one value, and each minimum interval is at most its
        maximum (UM checks these when a context is created).
        Run once every layer is in: a file may move one end past the other's default that a later
        layer moves too. The error is at the line that set the high end, else the low end."""
        for scope, low_name, high_name in RANGES:
            low, high = self.get(scope, low_name), self.get(scope, high_name)
            if _ordered(low) <= _ordered(high):
                continue
            path, line = self.origins.get((scope, high_name)) or self.origins.get((scope, low_name), (None, None))
            raise ConfigError(f"{low_name} ({low}) must not be above {high_name} ({high}): the range is empty",
                              path, line)
        self._check_interval_bounds()

    def _check_interval_bounds(self) -> None:
        """Each interval's minimum is at most its maximum: one above gave timers that start above
        their cap and drop to it at the first doubling. A 0 at either end turns a resolver phase off
        (router.um.schedule), so it bounds nothing."""
        for scope, minimum_name, maximum_name in INTERVAL_BOUNDS:
            minimum, maximum = self.get(scope, minimum_name), self.get(scope, maximum_name)
            if minimum <= maximum or 0 in (minimum, maximum):
                continue
            path, line = (self.origins.get((scope, maximum_name))
                          or self.origins.get((scope, minimum_name), (None, None)))
            raise ConfigError(f"{minimum_name} ({minimum}, {self._set_where(scope, minimum_name)}) must not be "
                              f"above {maximum_name} ({maximum}, {self._set_where(scope, maximum_name)})",
                              path, line)

    def _set_where(self, scope: str, name: str) -> str:
        """Where a value came from, for an error naming two options that disagree."""
        key = (scope, name)
        if key not in self.values:
            return "the default"
        where = self.origins.get(key)
        if where is None:
            return "set by the program"
        return f"set at {where[0]}:{where[1]}" if where[1] is not None else f"set in {where[0]}"

    def merged(self, other: "UMConfig") -> "UMConfig":
        """A copy with `other`'s values taking precedence."""
        origins = {key: where for key, where in self.origins.items() if key not in other.values}
        return UMConfig({**self.values, **other.values}, {**origins, **other.origins})

    def copy(self) -> "UMConfig":
        return UMConfig(dict(self.values), dict(self.origins))

    def dump(self, scope: str) -> list[dict]:
        """Every option of `scope` with the value this configuration gives it (UM's
        lbm_context_dump / lbm_src_topic_dump): name, value, default, whether it was set, and the
        file and line that set it (None for a default, or a value set by the program)."""
        scope = scope.strip().lower()
        rows = []
        for name, spec in sorted(OPTIONS.items()):
            if scope not in spec.scopes:
                continue
            default = _default(spec, scope)
            key = (scope, name)
            where = self.origins.get(key)
            rows.append({"option": name, "value": _shown(self.get(scope, name)), "default": _shown(default),
                         "set": key in self.values,
                         "origin": None if where is None else f"{where[0]}:{where[1]}" if where[1] else where[0]})
        return rows


def _ordered(value: int | str) -> int:
    """A port or id as is; an address as the number it is."""
    return int(ipaddress.IPv4Address(value)) if isinstance(value, str) else value


def _as_text(value: Any) -> str:
    """Keyword overrides may pass Python values; they go through the same parser as file text."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (tuple, list)):        # resolver daemons: UnicastDaemons or (host, port)
        return ",".join(str(UnicastDaemon(*daemon)) for daemon in value)
    return str(value)


def _default(spec, scope: str) -> Any:
    """A few options have a default of their own per scope (transport_lbtru_port_low: the
    sources' range in context scope, the receivers' in receiver scope)."""
    return spec.default[scope] if isinstance(spec.default, dict) else spec.default


def _shown(value: Any) -> str:
    return "" if value is None else _as_text(value)


# UM's whitespace only: any other control character stays in its field, to be refused there.
_FIELD_SEPARATOR = re.compile(f"[{re.escape(WHITESPACE)}]+")

UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def parse_lines(lines: Iterable[str], path: str | None = None, into: UMConfig | None = None) -> UMConfig:
    """Parse UM plain-text configuration lines: `scope option value`, `#` comments, blank lines."""
    config = into if into is not None else UMConfig()
    for number, raw in enumerate(lines, start=1):
        text = raw.split("#", 1)[0].strip(WHITESPACE)
        if not text:
            continue
        parts = _FIELD_SEPARATOR.split(text, maxsplit=2)
        found = next(filter(None, map(control_character, parts[:2])), None)
        if found:       # the value's own check names its option; here there is none to name
            raise ConfigError(f"a control character ({found}) in the scope or option name; "
                              "spaces or tabs separate them", path, number)
        if len(parts) < 3:
            raise ConfigError(f"expected 'scope option value', got '{text}'", path, number)
        scope, name, value = parts
        config.set(scope, name, value, (path, number))
    return config


def load_file(path: str | Path, into: UMConfig | None = None) -> UMConfig:
    """Read a UM plain-text configuration file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read configuration file: {err.strerror}", str(path)) from None
    return parse_lines(decode_lines(data, str(path)), str(path), into)


def decode_lines(data: bytes, path: str | None = None) -> list[str]:
    """The lines of a plain-text file, comments cut off. UM reads these files as bytes, so a
    comment may be in any encoding (an editor's Latin-1 "réseau"); what is parsed, scope, option
    and value, must be UTF-8, else the error names the line. A leading byte-order mark is the
    editor's, not part of the first scope."""
    if data.startswith(UTF16_BOMS):
        raise ConfigError("UTF-16 text (it starts with a UTF-16 byte-order mark); save it as UTF-8 or ASCII",
                          path, 1)
    data = data.removeprefix(UTF8_BOM)
    lines = []
    for number, raw in enumerate(data.splitlines(), start=1):
        content = raw.split(b"#", 1)[0]
        try:
            lines.append(content.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise ConfigError(f"not UTF-8 text (byte {content[err.start]:#04x} at column {err.start + 1}); "
                              "only comments may use another encoding", path, number) from None
    return lines


def from_overrides(overrides: dict[str, Any], into: UMConfig | None = None) -> UMConfig:
    """Keyword overrides: `{"resolver_multicast_port": 13000}` or `{"source:transport": "lbtipc"}`.

    Without an explicit scope the option's first (home) scope is used.
    """
    config = into if into is not None else UMConfig()
    for key, value in overrides.items():
        scope, sep, name = key.partition(":")
        if not sep:
            name = scope
            spec = OPTIONS.get(name)
            if spec is None:
                raise ConfigError(f"unknown option '{name}'")
            scope = spec.scopes[0]
        config.set(scope, name, value)
    return config
