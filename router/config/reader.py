"""Reading values out of a validated tnw-gateway tree, each mistake reported at its element.

The DTD has already fixed which elements and attributes exist; what is left is their values:
integers in range, flags, paths relative to the configuration file, "key=value;..." lists.
"""
from __future__ import annotations

import ipaddress
import logging
import re
from pathlib import Path
from typing import NoReturn

from lxml import etree

from router.hostnames import is_host_name
from router.um.options import control_character
from router.um.xml_config import XML_SPACE, XmlFile, children

log = logging.getLogger("router.config")

INT32_MAX = 0x7FFFFFFF
UINT32_MAX = 0xFFFFFFFF
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_MAX_DIGITS = 20                # more than any value read here can have (UINT32_MAX has 10)


class ElementReader:
    """Typed access to elements and attributes of one configuration file."""

    def __init__(self, source: XmlFile, base_dir: Path):
        self.source = source
        self.base_dir = base_dir

    # -- errors and warnings

    def fail(self, element: etree._Element, message: str) -> NoReturn:
        raise self.source.error(element, message)

    def warn(self, element: etree._Element, message: str) -> None:
        path, line = self.source.where(element)
        log.warning("%s:%s: <%s>: %s", path, line, element.tag, message)

    def locations(self, element: etree._Element) -> dict[str, tuple[str, int | None]]:
        """The element's own location under its tag, and its children's under theirs."""
        found = {element.tag: self.source.where(element)}
        for child in children(element):
            found.setdefault(child.tag, self.source.where(child))
        return found

    # -- structure

    def child(self, parent: etree._Element | None, tag: str) -> etree._Element | None:
        if parent is None:
            return None
        return next(children(parent, tag), None)

    def text(self, element: etree._Element) -> str:
        """Element text; trimmed unless xml:space="preserve". Comments and processing
        instructions inside it are not part of it: `<cost><!-- WAN -->5</cost>` is 5, and
        `<name>LAN<!-- B -->2</name>` is LAN2 (the text after one is that node's tail). A control
        character (`&#9;`, `&#127;`) is refused: no name, path or number has one."""
        raw = (element.text or "") + "".join(child.tail or "" for child in element
                                             if not isinstance(child.tag, str))
        found = control_character(raw)
        if found:
            self.fail(element, f"the text has a control character ({found})")
        return raw if element.get(XML_SPACE) == "preserve" else raw.strip()

    def child_text(self, parent: etree._Element | None, tag: str, default: str | None = None) -> str | None:
        element = self.child(parent, tag)
        if element is None:
            return default
        text = self.text(element)
        if not text:
            self.fail(element, "must not be empty")
        return text

    # -- numbers

    def integer(self, element: etree._Element, text: str, what: str, low: int, high: int) -> int:
        if not _INTEGER.match(text.strip()):
            self.fail(element, f"{what} must be an integer, got '{text}'")
        number = text.strip()
        sign, digits = number[0].strip("0123456789"), number.lstrip("+-").lstrip("0")
        if len(digits) > _MAX_DIGITS:
            # Out of every range here; and Python refuses to convert thousands of digits at all.
            self.fail(element, f"{what} must be {_range(low, high)}, got a {len(digits)}-digit number")
        value = int(sign + (digits or "0"))
        if not low <= value <= high:
            self.fail(element, f"{what} must be {_range(low, high)}, got {value}")
        return value

    def child_int(self, parent: etree._Element | None, tag: str, default: int,
                  low: int = 0, high: int = INT32_MAX) -> int:
        element = self.child(parent, tag)
        if element is None:
            return default
        return self.integer(element, self.text(element), tag, low, high)

    def attr_int(self, element: etree._Element | None, name: str, default: int,
                 low: int = 0, high: int = INT32_MAX) -> int:
        if element is None or element.get(name) is None:
            return default
        return self.integer(element, element.get(name), f"attribute '{name}'", low, high)

    def child_flag(self, parent: etree._Element | None, tag: str, default: bool = False) -> bool:
        """A 0/1 element such as <smart-batch>."""
        element = self.child(parent, tag)
        if element is None:
            return default
        text = self.text(element)
        if text not in ("0", "1"):
            self.fail(element, f"{tag} must be 0 or 1, got '{text}'")
        return text == "1"

    def attr_yes_no(self, element: etree._Element | None, name: str, default: bool) -> bool:
        if element is None or element.get(name) is None:
            return default
        return element.get(name) == "yes"

    def min_below_max(self, element: etree._Element | None, low: int, high: int) -> None:
        if element is not None and low >= high:
            self.fail(element, f"min-interval ({low}) must be less than max-interval ({high})")

    # -- text values

    def path(self, element: etree._Element) -> Path:
        """A path relative to the configuration file's directory."""
        return (self.base_dir / self.text(element)).resolve()

    def child_path(self, parent: etree._Element | None, tag: str) -> Path | None:
        element = self.child(parent, tag)
        if element is None:
            return None
        if not self.text(element):
            self.fail(element, "must name a file")
        return self.path(element)

    def interface(self, element: etree._Element) -> str:
        """A local IPv4 address or CIDR network, normalised."""
        text = self.text(element)
        try:
            if "/" in text:
                return str(ipaddress.IPv4Network(text, strict=False))
            return str(ipaddress.IPv4Address(text))
        except ValueError:
            self.fail(element, f"'{text}' is not an IPv4 address or network (a.b.c.d or a.b.c.0/24)")

    def host(self, element: etree._Element, value: str) -> str:
        """An IPv4 address (checked, normalised) or a DNS name (resolved later, when put to use)."""
        if not re.fullmatch(r"[0-9.]+", value):
            if not is_host_name(value):
                self.fail(element, f"'{value}' is neither an IPv4 address nor a DNS name")
            return value
        try:
            return str(ipaddress.IPv4Address(value))
        except ValueError:
            self.fail(element, f"'{value}' is not an IPv4 address")

    def key_values(self, element: etree._Element, attribute: str) -> dict[str, str]:
        """'k=v;k=v' (DRO module options); empty items are skipped."""
        result: dict[str, str] = {}
        for item in (element.get(attribute) or "").split(";"):
            if not item.strip():
                continue
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                self.fail(element, f"{attribute} must be 'key=value;key=value', got '{item.strip()}'")
            result[key.strip()] = value.strip()
        return result


def _range(low: int, high: int) -> str:
    if high == INT32_MAX and low == 1:
        return "a positive integer (1 or more)"
    if high == INT32_MAX:
        return f"at least {low}"
    return f"{low}..{high}"
