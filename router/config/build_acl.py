"""<acl> → Acl: ordered access control entries whose conditions are checked once, at load time.

Patterns are compiled here so a bad regular expression is a configuration error with a line number,
not a surprise when the first topic arrives. Comparison spellings are normalised (equal → eq).
"""
from __future__ import annotations

import ipaddress
import re

from lxml import etree

from router.config.model import Ace, Acl, Condition
from router.config.reader import UINT32_MAX, ElementReader
from router.um.wildcard_patterns import compile_wildcard
from router.um.xml_config import children

TEXT_CONDITIONS = ("topic", "pcre-pattern", "regex-pattern")
INBOUND_ONLY = ("transport", "source-ip", "multicast-group", "udp-source-port",
                "udp-destination-port", "tcp-source-port", "xport-id")
NUMBER_LIMITS = {"udp-source-port": 65535, "udp-destination-port": 65535, "tcp-source-port": 65535,
                 "xport-id": UINT32_MAX}
COMPARISONS = {"eq": "eq", "equal": "eq", "ne": "ne", "notequal": "ne", "lt": "lt", "lessthan": "lt",
               "le": "le", "lessthanequal": "le", "gt": "gt", "greaterthan": "gt",
               "ge": "ge", "greaterthanequal": "ge"}
TRANSPORTS = {"lbt-rm": "lbtrm", "lbt-ru": "lbtru", "lbt-ipc": "lbtipc"}


def build_acl(reader: ElementReader, element: etree._Element | None) -> Acl | None:
    if element is None:
        return None
    acl = Acl()
    for direction in ("inbound", "outbound"):
        for entries in children(element, direction):
            aces = [_ace(reader, ace, direction) for ace in children(entries, "ace")]
            getattr(acl, direction).extend(aces)
    return acl


def _ace(reader: ElementReader, element: etree._Element, direction: str) -> Ace:
    conditions = []
    for condition in children(element):
        if direction == "outbound" and condition.tag in INBOUND_ONLY:
            reader.warn(condition, "applies to inbound ACLs only; ignored in an outbound ACL")
        conditions.append(_condition(reader, condition))
    return Ace(element.get("match"), conditions)


def _condition(reader: ElementReader, element: etree._Element) -> Condition:
    kind = element.tag
    if kind in TEXT_CONDITIONS:
        text = reader.text(element)
        if not text:
            reader.fail(element, f"<{kind}> needs a topic name or pattern")
        if kind != "topic":
            try:
                compile_wildcard(text)        # as the ACL matches it (POSIX classes too)
            except re.error as err:
                reader.fail(element, f"invalid pattern '{text}': {err}")
        return Condition(kind, text)
    value, comparison = element.get("value").strip(), COMPARISONS[element.get("comparison")]
    if kind == "transport":
        value = TRANSPORTS.get(value, value)
    elif kind in NUMBER_LIMITS:
        value = str(reader.integer(element, value, "attribute 'value'", 0, NUMBER_LIMITS[kind]))
    else:
        value = _host(reader, element, value, multicast=kind == "multicast-group")
    return Condition(kind, value, comparison)


def _host(reader: ElementReader, element: etree._Element, value: str, multicast: bool) -> str:
    host = reader.host(element, value)
    if multicast and re.fullmatch(r"[0-9.]+", host) and not ipaddress.IPv4Address(host).is_multicast:
        reader.fail(element, f"'{value}' is not a multicast address")
    return host
