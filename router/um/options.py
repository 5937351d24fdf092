"""The catalogue of UM configuration options this library understands: scope, type, default.

Names and defaults are UM's own (spec/dro.md §6). A value is parsed and range-checked here once, so
every reader (plain-text files, XML files, keyword overrides, the router's <lbm-attributes>) gives the
same error for the same mistake.
"""
from __future__ import annotations

import ipaddress
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

SCOPES = ("context", "source", "receiver", "wildcard_receiver", "event_queue")


class OptionError(ValueError):
    """An unknown option or a value out of range; the reader adds file and line."""


# Decimal (no leading zeros: C reads those as octal) or 0x hexadecimal, in ASCII: Python's int()
# also takes "13_965" and other scripts' digits, which UM does not, so a typo became another number.
_INTEGER = re.compile(r"[+-]?(0[xX][0-9a-fA-F]+|0+|[1-9][0-9]*)")
_MAX_DIGITS = 20                # more than any option's range has (2**63 - 1 has 19)


def _number(text: str) -> str:
    """The integer as written, checked to be one."""
    number = str(text).strip()
    if not _INTEGER.fullmatch(number):
        raise OptionError(f"'{text}' is not an integer")
    return number


def _int(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        number = _number(text)
        digits = len(number.lstrip("+-"))
        if digits > _MAX_DIGITS:        # out of range, and Python refuses to convert thousands of digits
            raise OptionError(f"a {digits}-digit number is outside {low}..{high}")
        value = int(number, 0)
        if not low <= value <= high:
            raise OptionError(f"{value} is outside {low}..{high}")
        return value
    return parse


def _ipv4(text: str) -> str:
    text = str(text).strip()
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise OptionError(f"'{text}' is not an IPv4 address") from None


def _interface(text: str) -> str:
    """An interface is an IPv4 address, a CIDR network (UM's 'a.b.c.0/24' form) or an interface's
    name (`eth0`: its address is looked up when a socket is opened, router.um.netif). UM's
    documentation writes a name in double quotes (`"eth0"`), so the quotes are not part of it."""
    text = str(text).strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1].strip()
    try:
        if "/" in text:
            return str(ipaddress.IPv4Network(text, strict=False))
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        # A name has a letter in it: '10.0.0.300' is a mistyped address, not a name.
        if _INTERFACE_NAME.match(text) and not set(text) <= set("0123456789."):
            return text
        raise OptionError(f"'{text}' is not an IPv4 address, a network or an interface name") from None


_INTERFACE_NAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")     # Linux: IFNAMSIZ - 1


def _multicast(text: str) -> str:
    address = _ipv4(text)
    if not ipaddress.IPv4Address(address).is_multicast:
        raise OptionError(f"'{address}' is not a multicast address")
    return address


def _multicast_or_off(text: str) -> str:
    """A multicast group, or 0.0.0.0: do not listen (UM's way to turn MIM reception off)."""
    address = _ipv4(text)
    return address if address == "0.0.0.0" else _multicast(address)


def _choice(*values: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = str(text).strip().lower()
        if value not in values:
            raise OptionError(f"'{text}' is not one of {', '.join(values)}")
        return value
    return parse


def _int_choice(*values: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            number = _number(text)
            value = int(number, 0) if len(number) <= _MAX_DIGITS else None
        except OptionError:
            value = None
        if value not in values:
            raise OptionError(f"'{text}' is not one of {', '.join(map(str, values))}")
        return value
    return parse


def _bool(text: str) -> bool:
    value = str(text).strip().lower()
    if value in ("1", "yes", "true", "on"):
        return True
    if value in ("0", "no", "false", "off"):
        return False
    raise OptionError(f"'{text}' is not a boolean (1/0)")


def check_no_control_characters(name: str, text: str) -> None:
    """UM refuses a value with a control character in it (a NUL, a tab, DEL): no address, name or
    number has one, and C would cut the value at a NUL."""
    found = control_character(text)
    if found:
        raise OptionError(f"the value of {name} has a control character ({found})")


# What UM (C's isspace) takes for whitespace around a value and between a line's fields. Python's
# str.strip() and str.split() also take U+001C..U+001F and U+0085, control characters UM refuses.
WHITESPACE = " \t\n\r\v\f"


def control_character(text: str) -> str | None:
    """The first control character in `text`, as 'U+0000 at character 4' (never the character
    itself: a NUL or an escape would garble the message); whitespace around the text is not part of it."""
    for position, char in enumerate(text.strip(WHITESPACE), start=1):
        if unicodedata.category(char) == "Cc":
            return f"U+{ord(char):04X} at character {position}"
    return None


def _string(text: str) -> str:
    return str(text).strip()


class UnicastDaemon(NamedTuple):
    """One resolver daemon (lbmrd) of `resolver_unicast_daemon`: where to send, and optionally the
    local interface and source port to send from (None: resolver_unicast_interface and a port of
    resolver_unicast_port_low..high)."""
    host: str
    port: int
    interface: str | None = None
    source_port: int | None = None

    def __str__(self) -> str:
        local = "" if self.interface is None else (
            f"{self.interface}->" if self.source_port is None else f"{self.interface}:{self.source_port}->")
        return f"{local}{self.host}:{self.port}"


def _unicast_daemons(text: str) -> tuple[UnicastDaemon, ...]:
    """`[Iface[:SrcPort]->]IP:DestPort[,...]`, entries separated by commas or semicolons."""
    return _add_unicast_daemons((), text)


def _add_unicast_daemons(previous: tuple[UnicastDaemon, ...], text: str) -> tuple[UnicastDaemon, ...]:
    """UM adds each setting's daemons to those already set (two lines name two daemons), and an
    entry `0.0.0.0:0` clears the list so far; a daemon already listed is not listed twice."""
    daemons = list(previous)
    for item in re.split(r"[,;]", str(text)):
        item = item.strip()
        if not item:
            continue
        interface = source_port = None
        if "->" in item:
            local, item = (part.strip() for part in item.split("->", 1))
            name, sep, port = local.rpartition(":")
            if sep and port.strip().isdigit():
                local, source_port = name, _int(1, 65535)(port)
            interface = _interface(local)
        host, sep, port = item.rpartition(":")
        if not sep:
            raise OptionError(f"'{item}' is not IP:port")
        address = _ipv4(host)
        port_number = _int(0, 65535)(port)
        if address == "0.0.0.0" and port_number == 0:
            daemons.clear()
            continue
        daemon = UnicastDaemon(address, port_number, interface, source_port)
        if daemon not in daemons:
            daemons.append(daemon)
    return tuple(daemons)


U16 = _int(0, 65535)
U32 = _int(0, 0xFFFFFFFF)
MILLIS = _int(0, 0x7FFFFFFF)


@dataclass(frozen=True, slots=True)
class OptionSpec:
    name: str
    scopes: tuple[str, ...]
    default: Any
    parse: Callable[[str], Any]
    # For the few options each setting adds to rather than replaces: (value so far, text) -> value.
    add: Callable[[Any, str], Any] | None = None


def _spec(name: str, scopes: str, default: Any, parse: Callable[[str], Any],
          add: Callable[[Any, str], Any] | None = None) -> OptionSpec:
    return OptionSpec(name, tuple(scopes.split()), default, parse, add)


# Loopback is this library's default resolver interface (UM's is the first multicast-capable
# interface): nothing leaves the host until an operator names an interface on purpose.
DEFAULT_INTERFACE = "127.0.0.1"

OPTIONS: dict[str, OptionSpec] = {o.name: o for o in (
    _spec("resolver_multicast_address", "context", "224.9.10.11", _multicast),
    _spec("resolver_multicast_port", "context", 12965, U16),
    _spec("resolver_multicast_incoming_address", "context", None, _multicast),
    _spec("resolver_multicast_incoming_port", "context", None, U16),
    _spec("resolver_multicast_outgoing_address", "context", None, _multicast),
    _spec("resolver_multicast_outgoing_port", "context", None, U16),
    _spec("resolver_multicast_interface", "context", DEFAULT_INTERFACE, _interface),
    _spec("resolver_multicast_ttl", "context", 16, _int(0, 255)),
    _spec("resolver_multicast_receiver_socket_buffer", "context", 8388608, U32),
    _spec("resolver_unicast_receiver_socket_buffer", "context", 8388608, U32),
    _spec("resolver_unicast_daemon", "context", (), _unicast_daemons, add=_add_unicast_daemons),
    _spec("resolver_unicast_interface", "context", DEFAULT_INTERFACE, _interface),
    _spec("resolver_unicast_port_low", "context", 14402, U16),
    _spec("resolver_unicast_port_high", "context", 14406, U16),
    _spec("resolver_unicast_keepalive_interval", "context", 500, MILLIS),
    _spec("resolver_unicast_activity_timeout", "context", 1000, MILLIS),
    _spec("resolver_unicast_force_alive", "context", False, _bool),
    _spec("resolver_datagram_max_size", "context", 8192, _int(500, 65535)),
    _spec("resolver_domain_id_active_propagation_timeout", "context", 0, _int(-1, 0x7FFFFFFF)),
    _spec("resolver_advertisement_minimum_initial_interval", "source", 10, MILLIS),
    _spec("resolver_advertisement_maximum_initial_interval", "source", 500, MILLIS),
    _spec("resolver_advertisement_minimum_initial_duration", "source", 5000, MILLIS),
    _spec("resolver_advertisement_sustain_interval", "source", 1000, MILLIS),
    _spec("resolver_advertisement_minimum_sustain_duration", "source", 60, _int(0, 0x7FFFFFFF)),
    _spec("resolver_send_final_advertisements", "source", 0, _int(0, 1000)),
    _spec("resolver_query_minimum_initial_interval", "receiver", 20, MILLIS),
    _spec("resolver_query_maximum_initial_interval", "receiver", 200, MILLIS),
    _spec("resolver_query_minimum_initial_duration", "receiver", 5000, MILLIS),
    _spec("resolver_query_sustain_interval", "receiver", 1000, MILLIS),
    _spec("resolver_query_minimum_sustain_duration", "receiver", 60, _int(0, 0x7FFFFFFF)),
    _spec("resolver_query_minimum_interval", "wildcard_receiver", 50, MILLIS),
    _spec("resolver_query_maximum_interval", "wildcard_receiver", 1000, MILLIS),
    _spec("resolver_query_minimum_duration", "wildcard_receiver", 60, _int(0, 0x7FFFFFFF)),
    _spec("resolution_number_of_sources_query_threshold", "receiver", 10000000, U32),
    _spec("pattern_type", "wildcard_receiver", "pcre", _choice("pcre", "regex")),
    _spec("transport", "source", "tcp", _choice("tcp", "lbtipc", "lbt-ipc", "lbtrm", "lbt-rm", "lbtru", "lbt-ru",
                                                 "lbtsmx", "lbt-smx")),
    _spec("transport_tcp_port_low", "context", 14371, U16),
    _spec("transport_tcp_port_high", "context", 14390, U16),
    _spec("transport_tcp_port", "source", 0, U16),
    _spec("transport_tcp_interface", "context source receiver", None, _interface),
    _spec("transport_tcp_datagram_max_size", "context", 65535, _int(500, 65535)),
    _spec("transport_tcp_activity_timeout", "receiver", 0, MILLIS),
    _spec("transport_tcp_nodelay", "source", True, _bool),
    # SO_SNDBUF of a source's accepted connections; 0 leaves the kernel's (which grows it as needed).
    _spec("transport_tcp_sender_socket_buffer", "source", 0, U32),
    # SO_RCVBUF of a receiver's connection to a source, set before it connects; 0 leaves the
    # kernel's. UM's default is 0: ours is 4 MiB, so that a busy stream is read in large batches
    # (the kernel's own starts at 128 KB on loopback and the sender waits for it to grow).
    _spec("transport_tcp_receiver_socket_buffer", "receiver", 4 * 1024 * 1024, U32),
    _spec("transport_tcp_dro_loss_recovery_timeout", "receiver", 0, MILLIS),
    _spec("transport_lbtipc_datagram_max_size", "context", 65535, _int(500, 65535)),
    _spec("transport_lbtipc_id_low", "context", 20001, U16),
    _spec("transport_lbtipc_id_high", "context", 20005, U16),
    _spec("transport_lbtipc_transmission_window_size", "source", 25165824, U32),
    _spec("transport_lbtipc_sm_interval", "source", 10000, _int(1, 0x7FFFFFFF)),
    _spec("transport_lbtipc_activity_timeout", "receiver", 60000, MILLIS),
    _spec("transport_lbtipc_dro_loss_recovery_timeout", "receiver", 0, MILLIS),
    # LBT-RM (router.um.lbtrm_source, router.um.lbtrm_receiver).
    _spec("transport_lbtrm_multicast_address_low", "context", "224.10.10.10", _multicast),
    _spec("transport_lbtrm_multicast_address_high", "context", "224.10.10.14", _multicast),
    _spec("transport_lbtrm_multicast_address", "source", None, _multicast),
    _spec("transport_lbtrm_destination_port", "context", 14400, U16),
    _spec("transport_lbtrm_source_port_low", "context", 14390, U16),
    _spec("transport_lbtrm_source_port_high", "context", 14399, U16),
    _spec("transport_lbtrm_data_rate_limit", "context", 10000000, _int(0, 2**63 - 1)),
    _spec("transport_lbtrm_retransmit_rate_limit", "context", 5000000, _int(0, 2**63 - 1)),
    _spec("transport_lbtrm_activity_timeout", "receiver", 60000, MILLIS),
    _spec("transport_lbtrm_datagram_max_size", "context", 8192, _int(500, 65535)),
    _spec("transport_lbtrm_receiver_socket_buffer", "context", 8388608, U32),     # also MIM's receive socket
    _spec("transport_lbtrm_transmission_window_size", "source", 25165824, _int(1, 0x7FFFFFFF)),
    _spec("transport_lbtrm_transmission_window_limit", "source", 0, U32),
    _spec("transport_lbtrm_ignore_interval", "source", 500, MILLIS),
    _spec("transport_lbtrm_sm_minimum_interval", "source", 200, _int(1, 0x7FFFFFFF)),
    _spec("transport_lbtrm_sm_maximum_interval", "source", 10000, _int(1, 0x7FFFFFFF)),
    _spec("transport_lbtrm_rate_interval", "context", 100, _int_choice(10, 20, 50, 100)),
    _spec("transport_lbtrm_nak_initial_backoff_interval", "receiver", 50, MILLIS),
    _spec("transport_lbtrm_nak_backoff_interval", "receiver", 200, _int(1, 0x7FFFFFFF)),
    _spec("transport_lbtrm_nak_suppress_interval", "receiver", 1000, MILLIS),
    _spec("transport_lbtrm_nak_generation_interval", "receiver", 10000, _int(1, 0x7FFFFFFF)),
    _spec("transport_lbtrm_send_naks", "receiver", True, _bool),
    # LBT-RU (router.um.lbtru_source, router.um.lbtru_receiver). The port range is the sources'
    # in context scope and the receivers' in receiver scope, each with UM's own default.
    _spec("transport_lbtru_port_low", "context receiver", {"context": 14380, "receiver": 14360}, U16),
    _spec("transport_lbtru_port_high", "context receiver", {"context": 14389, "receiver": 14379}, U16),
    _spec("transport_lbtru_interface", "context source receiver", None, _interface),
    _spec("transport_lbtru_data_rate_limit", "context", 10000000, _int(0, 2**63 - 1)),
    _spec("transport_lbtru_retransmit_rate_limit", "context", 5000000, _int(0, 2**63 - 1)),
    _spec("transport_lbtru_rate_interval", "context", 100, _int_choice(10, 20, 50, 100)),
    _spec("transport_lbtru_datagram_max_size", "context", 8192, _int(500, 65535)),
    _spec("transport_lbtru_receiver_socket_buffer", "context", 524288, U32),
    _spec("transport_lbtru_transmission_window_size", "source", 25165824, _int(1, 0x7FFFFFFF)),
    _spec("transport_lbtru_transmission_window_limit", "source", 0, U32),
    _spec("transport_lbtru_ignore_interval", "source", 500, MILLIS),
    _spec("transport_lbtru_sm_minimum_interval", "source", 200, _int(1, 0x7FFFFFFF)),
    _spec("transport_lbtru_sm_maximum_interval", "source", 10000, _int(1, 0x7FFFFFFF)),
    _spec("transport_lbtru_client_activity_timeout", "source", 10000, _int(1, 0x7FFFFFFF)),
    _spec("transport_lbtru_coalesce_threshold", "source", 15, _int(1, 0x7FFFFFFF)),
    _spec("transport_lbtru_activity_timeout", "receiver", 60000, MILLIS),
    _spec("transport_lbtru_connect_interval", "receiver", 100, _int(1, 0x7FFFFFFF)),
    _spec("transport_lbtru_maximum_connect_attempts", "receiver", 50, _int(1, 0x7FFFFFFF)),
    _spec("transport_lbtru_acknowledgement_interval", "receiver", 100, _int(1, 0x7FFFFFFF)),
    _spec("transport_lbtru_nak_backoff_interval", "receiver", 200, _int(1, 0x7FFFFFFF)),
    _spec("transport_lbtru_nak_suppress_interval", "receiver", 1000, MILLIS),
    _spec("transport_lbtru_nak_generation_interval", "receiver", 10000, _int(1, 0x7FFFFFFF)),
    _spec("transport_lbtru_send_naks", "receiver", True, _bool),
    _spec("transport_lbtsmx_datagram_max_size", "source", 8192, _int(500, 65535)),
    # Multicast immediate messaging (router.um.immediate). mim_address and mim_destination_port set
    # both directions; the incoming/outgoing forms override one (None: take the shared one).
    _spec("mim_address", "context", "224.10.10.21", _multicast),
    _spec("mim_incoming_address", "context", None, _multicast_or_off),
    _spec("mim_outgoing_address", "context", None, _multicast),
    _spec("mim_destination_port", "context", 14401, U16),
    _spec("mim_incoming_destination_port", "context", None, U16),
    _spec("mim_outgoing_destination_port", "context", None, U16),
    _spec("mim_ttl", "context", 16, _int(0, 255)),
    _spec("mim_sqn_window_size", "context", 8192, _int(1, 0x7FFFFFFF)),
    _spec("mim_src_deletion_timeout", "context", 30000, MILLIS),
    # Late join (router.um.late_join, router.um.retention).
    _spec("late_join", "source", False, _bool),
    _spec("retransmit_retention_size_limit", "source", 25165824, _int(0, 0x7FFFFFFF)),
    _spec("retransmit_retention_size_threshold", "source", 0, _int(0, 0x7FFFFFFF)),
    _spec("retransmit_retention_age_threshold", "source", 0, _int(0, 0x7FFFFFFF)),
    _spec("use_late_join", "receiver", True, _bool),
    _spec("retransmit_request_maximum", "receiver", 0, _int(0, 0x7FFFFFFF)),
    _spec("retransmit_request_interval", "receiver", 500, _int(1, 0x7FFFFFFF)),
    _spec("retransmit_request_message_timeout", "receiver", 10000, _int(1, 0x7FFFFFFF)),
    _spec("retransmit_request_outstanding_maximum", "receiver", 200, _int(1, 0x7FFFFFFF)),
    _spec("late_join_info_request_interval", "receiver", 1000, _int(1, 0x7FFFFFFF)),
    _spec("late_join_info_request_maximum", "receiver", 60, _int(1, 0x7FFFFFFF)),
    # Hot failover receivers (router.um.hot_failover): a later copy of a number delivered flagged
    # (1) or discarded (0); how many messages may wait for a gap to fill (UM's ordered-delivery
    # map bound, UM's default; 0: no bound); how often a gap that has not moved is given up.
    _spec("hf_duplicate_delivery", "receiver", False, _bool),
    _spec("delivery_control_maximum_total_map_entries", "receiver", 200000, _int(0, 0x7FFFFFFF)),
    _spec("delivery_control_loss_check_interval", "receiver", 0, _int(0, 0x7FFFFFFF)),   # ms; 0: off
    # DRO Hotlinks (router.um.hotlinks): a receiver joins every path of a source that redundant
    # routers forward and delivers the first copy of each message. A source needs nothing for it
    # here (the routers' <hotlink-index> makes both paths carry it): accepted, so that a UM
    # configuration written for hotlinks loads as it is.
    _spec("use_hotlink", "source receiver", False, _bool),
    # Off-transport recovery (router.um.otr): a receiver asks a late-join source's retention for
    # what its transport lost. Defaults as UM documents them (UM 5.3's OTR option reference).
    _spec("use_otr", "receiver", False, _bool),
    _spec("otr_request_initial_delay", "receiver", 10000, _int(0, 0x7FFFFFFF)),
    _spec("otr_request_minimum_interval", "receiver", 1000, _int(1, 0x7FFFFFFF)),
    _spec("otr_request_maximum_interval", "receiver", 10000, _int(1, 0x7FFFFFFF)),
    _spec("otr_request_duration", "receiver", 20000, _int(1, 0x7FFFFFFF)),
    _spec("otr_request_outstanding_maximum", "receiver", 200, _int(0, 0x7FFFFFFF)),
    _spec("otr_request_log_alert_cooldown", "receiver", 300, _int(0, 0x7FFFFFFF)),
    _spec("otr_message_caching_threshold", "receiver", 10000, _int(1, 0x7FFFFFFF)),
    # Topic sequence number info (TSNI): an idle source's last sequence numbers, so receivers see
    # a lost tail (router.um.sequence_info); the active threshold is in seconds (0: always).
    _spec("transport_topic_sequence_number_info_interval", "source", 5000, _int(1, 0x7FFFFFFF)),
    _spec("transport_topic_sequence_number_info_active_threshold", "source", 60, _int(0, 0x7FFFFFFF)),
    _spec("implicit_batching_minimum_length", "source", 2048, _int(1, 0x7FFFFFFF)),
    _spec("implicit_batching_interval", "source", 200, MILLIS),
    _spec("context_name", "context", "", _string),
    # Automatic monitoring (router.um.monitoring): statistics every monitor_interval seconds.
    _spec("monitor_interval", "context", 0, _int(0, 0x7FFFFFFF)),
    _spec("monitor_transport", "context", "lbm", _choice("lbm", "lbmsnmp", "udp")),
    _spec("monitor_transport_opts", "context", "", _string),
    _spec("monitor_format", "context", "csv", _choice("csv", "pb")),
    _spec("monitor_format_opts", "context", "", _string),
    _spec("monitor_appid", "context", "", _string),
    _spec("request_tcp_interface", "context", None, _interface),
    _spec("request_tcp_port_low", "context", 14391, U16),
    _spec("request_tcp_port_high", "context", 14395, U16),
    # How long a response connection with nothing left to send stays open (router.um.responder).
    _spec("response_tcp_deletion_timeout", "context", 2000, MILLIS),
    _spec("source_cost_evaluation_function", "context", None, _string),
    _spec("operational_mode", "context", "embedded", _choice("embedded", "sequential")),
)}


# (scope, low end, high end) of the options that give a range of ports, ids or multicast groups.
RANGES = (
    ("context", "resolver_unicast_port_low", "resolver_unicast_port_high"),
    ("context", "transport_tcp_port_low", "transport_tcp_port_high"),
    ("context", "transport_lbtipc_id_low", "transport_lbtipc_id_high"),
    ("context", "transport_lbtrm_multicast_address_low", "transport_lbtrm_multicast_address_high"),
    ("context", "transport_lbtrm_source_port_low", "transport_lbtrm_source_port_high"),
    ("context", "transport_lbtru_port_low", "transport_lbtru_port_high"),
    ("receiver", "transport_lbtru_port_low", "transport_lbtru_port_high"),
    ("context", "request_tcp_port_low", "request_tcp_port_high"),
)


# (scope, minimum, maximum) of the intervals that start at their minimum and double up to their
# maximum (session messages, resolver queries and advertisements, OTR requests).
INTERVAL_BOUNDS = (
    ("source", "transport_lbtrm_sm_minimum_interval", "transport_lbtrm_sm_maximum_interval"),
    ("source", "transport_lbtru_sm_minimum_interval", "transport_lbtru_sm_maximum_interval"),
    ("source", "resolver_advertisement_minimum_initial_interval", "resolver_advertisement_maximum_initial_interval"),
    ("receiver", "resolver_query_minimum_initial_interval", "resolver_query_maximum_initial_interval"),
    ("wildcard_receiver", "resolver_query_minimum_interval", "resolver_query_maximum_interval"),
    ("receiver", "otr_request_minimum_interval", "otr_request_maximum_interval"),
)


def lookup(scope: str, name: str) -> OptionSpec:
    """The spec of option `name` in `scope`, or OptionError naming what is wrong."""
    scope = scope.strip().lower()
    if scope not in SCOPES:
        raise OptionError(f"unknown scope '{scope}' (expected one of {', '.join(SCOPES)})")
    spec = OPTIONS.get(name.strip().lower())
    if spec is None:
        raise OptionError(f"unknown option '{name}'")
    if scope not in spec.scopes:
        raise OptionError(f"option '{name}' belongs to scope {'/'.join(spec.scopes)}, not {scope}")
    return spec


def defaults() -> dict[str, Any]:
    return {name: spec.default for name, spec in OPTIONS.items()}
