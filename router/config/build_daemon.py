"""<daemon> → DaemonConfig: log, identity, monitoring, routing timers, the admin endpoint, the
workers' scheduling."""
from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from lxml import etree

from router.config.model import (DaemonConfig, HashMapConfig, LogConfig, MonitorConfig, RouteInfo,
                                 RouteRecalculation, WebMonitorConfig, WorkerGroup)
from router.config.reader import INT32_MAX, UINT32_MAX, ElementReader
from router.cpu_latency import MAX_LIMIT_US
from router.hostnames import is_host_name
from router.ipc.shm import segment_name
from router.um import monitoring
from router.um.config import ConfigError, UMConfig, load_file
from router.um.xml_config import children
from router.worker.scheduling import MODES as SCHEDULING_MODES

MAX_NAME_LENGTH = 256                   # TNWG_DSTAT_MAX_GATEWAY_NAME_LEN
# A router's name is in its socket paths, RUNTIME_DIR/NAME.PID.bus-pub, and a Unix socket's path is
# at most 107 bytes: with /run/user/UID/umrouter, a 7-digit pid and the suffix, 64 is what fits.
MAX_ROUTER_NAME_LENGTH = 64
MAX_LOG_SIZE = 4000                     # millions of bytes (spec/dro.md §1.3)
TRANSPORT_MODULES = ("lbm", "lbmsnmp", "udp")
FORMAT_MODULES = ("csv", "pb", "parquet")   # parquet: umrouter's Parquet sink (DESIGN.md §5)


def build_daemon(reader: ElementReader, element: etree._Element | None, config_path: Path) -> DaemonConfig:
    daemon = DaemonConfig(name=_name_of_file(config_path))
    if element is None:
        return daemon
    daemon.line, daemon.locations = element.sourceline, reader.locations(element)
    name = reader.child(element, "name")
    if name is not None:
        daemon.name = _router_name(reader, name)
    daemon.log = _log(reader, reader.child(element, "log"))
    for tag in ("uid", "gid"):          # switched to when started as root (router/identity.py)
        if reader.child(element, tag) is not None:
            setattr(daemon, tag, reader.child_int(element, tag, 0, 0, UINT32_MAX))
    daemon.pidfile = reader.child_path(element, "pidfile")
    daemon.lbm_license_file = reader.child_path(element, "lbm-license-file")
    daemon.topicmap = _hash_map(reader, reader.child(element, "topicmap"))
    daemon.patternmap = _hash_map(reader, reader.child(element, "patternmap"))
    daemon.monitor = _monitor(reader, reader.child(element, "monitor"))
    daemon.web_monitor = _web_monitor(reader, reader.child(element, "web-monitor"))
    for tag, why in (("daemon-monitor", "deprecated binary daemon statistics are not implemented"),
                     ("propagation-delay", "eliminated")):
        if reader.child(element, tag) is not None:
            reader.warn(reader.child(element, tag), f"element has been deprecated and will be ignored ({why})")
    daemon.xml_config = reader.child_path(element, "xml-config")
    daemon.route_info = _route_info(reader, reader.child(element, "route-info"))
    daemon.route_recalculation = _route_recalculation(reader, reader.child(element, "route-recalculation"))
    daemon.admin = _admin(reader, reader.child(element, "admin"))
    scheduling = reader.child(element, "worker-scheduling")
    if scheduling is not None:
        daemon.worker_scheduling = reader.text(scheduling)
        if daemon.worker_scheduling not in SCHEDULING_MODES:
            reader.fail(scheduling, f"expected one of {', '.join(SCHEDULING_MODES)}, got '{daemon.worker_scheduling}'")
    if reader.child(element, "cpu-latency-limit") is not None:
        daemon.cpu_latency_limit = reader.child_int(element, "cpu-latency-limit", 0, 0, MAX_LIMIT_US)
    daemon.worker_groups = _worker_groups(reader, element)
    return daemon


def _worker_groups(reader: ElementReader, daemon: etree._Element) -> list[WorkerGroup]:
    """Each portal in at most one group; that the names are portals of the file is checked
    with the portals (router.config.validate)."""
    groups, grouped = [], {}
    for group in children(daemon, "worker-group"):
        where = {}
        for item in children(group, "portal-name"):
            name = reader.text(item)
            if not name:
                reader.fail(item, "a portal name must not be empty")
            if name in grouped:
                reader.fail(item, f"portal '{name}' is already in the worker group at line {grouped[name]}; "
                                  "a portal runs in one worker")
            grouped[name] = group.sourceline
            where[name] = reader.source.where(item)
        groups.append(WorkerGroup(tuple(where), where))
    return groups


def build_name(reader: ElementReader, element: etree._Element | None, default: str) -> str:
    if element is None:
        return default
    name = reader.text(element)
    if not name:
        reader.fail(element, "a name must not be empty")
    if len(name.encode()) > MAX_NAME_LENGTH:
        reader.fail(element, f"a name is at most {MAX_NAME_LENGTH} bytes long")
    return name


def _router_name(reader: ElementReader, element: etree._Element) -> str:
    """The router's name also names what it creates on its host: shared memory (/umr.NAME.PID.*)
    and the admin and bus sockets (NAME.admin, NAME.PID.bus). A name those cannot carry would
    stop the router at start, so it is refused here, where it was written."""
    name = build_name(reader, element, "")
    try:
        segment_name(name, "check", 0)
    except ValueError:
        reader.fail(element, f"the router name {name!r} also names its shared memory and sockets: use "
                             "letters, digits, '_' and '-' only")
    if len(name) > MAX_ROUTER_NAME_LENGTH:
        reader.fail(element, f"the router name is {len(name)} characters long; it also names the router's "
                             f"sockets (RUNTIME_DIR/NAME.PID.bus), whose paths are at most 107 bytes: use at "
                             f"most {MAX_ROUTER_NAME_LENGTH} characters")
    return name


def _name_of_file(config_path: Path) -> str:
    """The default name, the file's stem, in the characters a router name may use
    ("nyc.dro.xml" names the router "nyc-dro"), and no longer than a router name may be."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", config_path.stem).strip("-")[:MAX_ROUTER_NAME_LENGTH]
    return name.rstrip("-") or "tnwgd"


def _log(reader: ElementReader, element: etree._Element | None) -> LogConfig:
    if element is None:
        return LogConfig()
    log = LogConfig(type=element.get("type", "console"), frequency=element.get("frequency", "disable"),
                    size=reader.attr_int(element, "size", 0, 0, MAX_LOG_SIZE))
    if log.type == "file":
        if not reader.text(element):
            reader.fail(element, 'type="file" needs the log file path as the element text')
        log.path = reader.path(element)
    elif log.frequency != "disable" or log.size:
        reader.warn(element, "frequency and size apply only to type=\"file\"; ignored")
    return log


def _hash_map(reader: ElementReader, element: etree._Element | None) -> HashMapConfig:
    if element is None:
        return HashMapConfig()
    return HashMapConfig(element.get("hash-function", "murmur2"),
                         reader.attr_int(element, "size", 131111, 1, INT32_MAX))


def _monitor(reader: ElementReader, element: etree._Element | None) -> MonitorConfig:
    monitor = MonitorConfig()
    if element is None:
        return monitor
    monitor.interval = reader.attr_int(element, "interval", 0, 0, INT32_MAX)
    transport = reader.child(element, "transport-module")
    if transport is not None:
        monitor.transport_module = _module(reader, transport, "lbm", TRANSPORT_MODULES)
        monitor.transport_options = _resolved(reader, reader.key_values(transport, "options"), "config")
    formatter = reader.child(element, "format-module")
    if formatter is not None:
        monitor.format_module = _module(reader, formatter, "csv", FORMAT_MODULES)
        monitor.format_options = _resolved(reader, reader.key_values(formatter, "options"), "dir")
    if (monitor.transport_module, monitor.format_module) == ("lbm", "csv"):
        # The portals publish UM statistics with these (router.um.monitoring): check them now.
        try:
            monitoring.settings(monitor.interval, "check", monitor.transport_module, monitor.transport_options,
                                monitor.format_module, monitor.format_options)
        except monitoring.MonitoringError as err:
            reader.fail(transport if transport is not None else element, str(err))
        for key, value in monitor.transport_options.items():
            if "|" in key:          # scope|option=value: set in the monitoring context (spec/dro.md §1.3)
                scope, _, option = key.partition("|")
                try:
                    UMConfig().set(scope, option, value)
                except ConfigError as err:
                    reader.fail(transport, f"options '{key}={value}': {err.reason}")
        config = monitor.transport_options.get("config")
        if config:
            try:
                load_file(config)
            except (ConfigError, OSError) as err:
                reader.fail(transport, f"the monitoring context's configuration: {err}")
    return monitor


def _module(reader: ElementReader, element: etree._Element, default: str, known: tuple[str, ...]) -> str:
    module = element.get("module", default)
    if module not in known:
        reader.fail(element, f"module must be {' | '.join(known)}, got '{module}'")
    return module


def _resolved(reader: ElementReader, options: dict[str, str], path_key: str) -> dict[str, str]:
    """A file or directory named in module options is relative to the configuration file too."""
    if options.get(path_key):
        options[path_key] = str((reader.base_dir / options[path_key]).resolve())
    return options


def _web_monitor(reader: ElementReader, element: etree._Element | None) -> WebMonitorConfig | None:
    if element is None:
        return None
    text = reader.text(element)
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        reader.fail(element, f"expected 'interface:port' such as '*:15304', got '{text}'")
    number = reader.integer(element, port, "the port", 1, 65535)
    if host == "*":
        return WebMonitorConfig("0.0.0.0", number)
    problem = _web_monitor_host_problem(host)
    if problem:
        reader.fail(element, f"interface '{host}' {problem} (an IPv4 address, a network such as 10.29.3.0/24, "
                             "an interface name, a host name, [an IPv6 address] or *)")
    return WebMonitorConfig(host.strip("[]"), number)


def _web_monitor_host_problem(host: str) -> str:
    """What is wrong with the interface part of <web-monitor> (the running router resolves a name
    or network to this host's address then): '' when nothing is."""
    try:
        if host.startswith("["):
            ipaddress.IPv6Address(host.strip("[]"))
        elif "/" in host:
            ipaddress.IPv4Network(host, strict=False)
        elif re.fullmatch(r"[0-9.]+", host):
            ipaddress.IPv4Address(host)
        elif not is_host_name(host):
            return "is not a name"
    except ValueError as err:
        return f"is not valid: {err}"
    return ""


def _route_info(reader: ElementReader, element: etree._Element | None) -> RouteInfo:
    if element is None:
        return RouteInfo()
    return RouteInfo(reader.attr_int(element, "propagation-interval", 1000, 1),
                     reader.attr_int(element, "check-interval", 750, 1),
                     reader.attr_int(element, "timeout", 4000, 1),
                     reader.attr_int(element, "max-hop-count", 100, 1, 255))


def _route_recalculation(reader: ElementReader, element: etree._Element | None) -> RouteRecalculation:
    if element is None:
        return RouteRecalculation()
    result = RouteRecalculation(reader.attr_int(element, "backoff-interval", 5000),
                                reader.attr_int(element, "warning-interval", 10000))
    if result.backoff_interval > result.warning_interval:
        reader.fail(element, f"backoff-interval ({result.backoff_interval}) must not exceed "
                             f"warning-interval ({result.warning_interval})")
    return result


def _ipv4_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.IPv4Address(host).is_loopback
    except ValueError:
        return False


def _admin(reader: ElementReader, element: etree._Element | None) -> str | None:
    """ipc://PATH (relative to the configuration file) or tcp:// on loopback: the admin socket
    accepts commands without authentication, so it must not be reachable from the network."""
    if element is None:
        return None
    text = reader.text(element)
    if text.startswith("ipc://"):
        path = text[len("ipc://"):]
        if not path:
            reader.fail(element, "ipc:// needs a path")
        if path.startswith("@") or path.startswith("/"):
            return text
        return f"ipc://{(reader.base_dir / path).resolve()}"
    if text.startswith("tcp://"):
        host, sep, port = text[len("tcp://"):].rpartition(":")
        if not sep:
            reader.fail(element, f"expected tcp://127.0.0.1:PORT, got '{text}'")
        if not _ipv4_loopback(host):
            # The admin socket is IPv4 (ZeroMQ binds "::1" only with IPv6 enabled, which it is not).
            reader.fail(element, f"tcp:// admin endpoints must be on loopback (127.0.0.1 or localhost), got '{host}'")
        if not (re.fullmatch(r"[0-9]{1,5}", port) and 1 <= int(port) <= 65535):
            # ZeroMQ would bind '*' or 0 to a port routerctl cannot know, and 99999 to 99999 % 65536.
            reader.fail(element, f"the port must be 1..65535, got '{port}'")
        return text
    reader.fail(element, f"expected an ipc:// or tcp:// endpoint, got '{text}'")
