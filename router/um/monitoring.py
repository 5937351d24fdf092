"""Automatic monitoring: a context publishes its own statistics and its transport sessions' (UM's
lbmmon source controller; the DRO's `<monitor>` does this for every portal context).

Every `monitor_interval` seconds the monitored context's statistics go out as UM messages on a
topic (`/29west/statistics` unless the transport options say `topic=NAME`) from a monitoring
context of its own, named `29west_statistics_context`, configured by the transport options'
`config=FILE` and `scope|option=value` pairs (without a file: the monitored context's own
configuration), so statistics can be sent into another domain than the one monitored. `ummon` (router/cli/ummon.py) receives and prints them.

One message per record, in the `csv` format: the separator (`separator=C` in the format options,
a comma by default) between

    version (1), record type, application id, time (ms since the epoch), object, values...

with the values in the order of `FIELDS[record type]`:

    context   the context's own: topic resolution datagrams and topics, immediate messages
    source    one per transport session its sources send on (TCP:ip:port:session, LBT-IPC:...),
              with LBT-RM's and LBT-RU's NAKs answered and retransmissions sent
    receiver  one per transport session its receivers have joined, with LBT-RM's and LBT-RU's
              NAKs, NCFs and what could not be repaired

Only the lbm transport module and the csv format exist here; a configuration asking for others
is refused with a clear error (router configuration names the file and line).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from router.um.config import load_file
from router.um.source_cache import key_string, session_string, transport_key

log = logging.getLogger(__name__)

VERSION = "1"
DEFAULT_TOPIC = "/29west/statistics"
CONTEXT_NAME = "29west_statistics_context"

# LBT-RM and LBT-RU loss repair, by UM's names for them (its lbtrm/lbtru transport statistics):
# datagrams, NAKs and NCFs each way, what was given up. Zero for transports that do not NAK.
_SOURCE_REPAIR = ("msgs_sent", "nak_pckts_rcved", "naks_rcved", "naks_ignored", "naks_shed",
                  "naks_rx_delay_ignored", "rxs_sent", "rx_bytes_sent")
_RECEIVER_REPAIR = ("msgs_rcved", "nak_pckts_sent", "naks_sent", "lost", "ncfs_ignored", "ncfs_shed",
                    "ncfs_rx_delay", "ncfs_unknown", "duplicate_data", "unrecovered_txw", "unrecovered_tmo",
                    "retransmissions_rcved")

FIELDS: dict[str, tuple[str, ...]] = {
    "context": ("tr_dgrams_sent", "tr_bytes_sent", "tr_dgrams_rcved", "tr_bytes_rcved", "tr_dgrams_dropped_malformed",
                "tr_dgrams_send_failed", "tr_src_topics", "tr_rcv_topics", "tr_rcv_unresolved_topics",
                "mim_msgs_sent", "mim_msgs_rcved", "mim_dup_msgs_rcved", "mim_dgrams_dropped_malformed"),
    "source": ("transport", "num_clients", "bytes_sent", "batches_sent", "bytes_buffered",
               "bytes_dropped_would_block", *_SOURCE_REPAIR),
    "receiver": ("transport", "bytes_rcved", "lbm_msgs_rcved", "control_msgs_rcved", "unknown_msgs_rcved",
                 "fragments_rcved", "msgs_reassembled", "msgs_dropped_malformed", *_RECEIVER_REPAIR),
}


_TEXT_FIELDS = frozenset({"transport"})       # every other value is a counter


class MonitoringError(ValueError):
    """A monitoring setting this library cannot honour."""


@dataclass(frozen=True)
class MonitorSettings:
    interval: float                         # seconds; 0: off
    application_id: str
    topic: str = DEFAULT_TOPIC
    config_file: str | None = None          # the monitoring context's configuration
    options: tuple = ()                     # (scope, option, value) for the monitoring context
    separator: str = ","


def settings(interval: float, application_id: str, transport: str, transport_options: str | dict,
             format_module: str, format_options: str | dict, base_dir: Path | None = None) -> MonitorSettings:
    """Settings from UM's monitor_* options (or the DRO's <monitor> element): `transport_options`
    like "config=FILE;topic=NAME;context|resolver_multicast_port=13000" (or those pairs as a dict),
    `format_options` like "separator=|". MonitoringError for a transport or format that is not
    implemented here, or an option it does not know."""
    if transport != "lbm":
        raise MonitoringError(f"monitoring transport '{transport}' is not available here (only lbm)")
    if format_module != "csv":
        raise MonitoringError(f"monitoring format '{format_module}' is not available here (only csv)")
    topic, config_file, options = DEFAULT_TOPIC, None, []
    for key, value in _pairs(transport_options):
        if key == "topic":
            topic = value
        elif key == "config":
            config_file = str((base_dir / value) if base_dir and not Path(value).is_absolute() else Path(value))
        elif "|" in key:
            scope, _, option = key.partition("|")
            options.append((scope, option, value))
        else:
            raise MonitoringError(f"unknown monitoring transport option '{key}'")
    separator = ","
    for key, value in _pairs(format_options):
        if key != "separator" or len(value) != 1:
            raise MonitoringError(f"unknown or bad monitoring format option '{key}={value}' (separator=C is known)")
        separator = value
    return MonitorSettings(interval, application_id, topic, config_file, tuple(options), separator)


def _pairs(options: str | dict) -> list[tuple[str, str]]:
    if isinstance(options, dict):
        return list(options.items())
    pairs = []
    for item in (options or "").split(";"):
        key, _, value = item.strip().partition("=")
        if key:
            pairs.append((key.strip(), value.strip()))
    return pairs


def records(context, application_id: str, which: tuple[str, ...] = ("context", "source", "receiver")) -> list[tuple]:
    """(record type, application id, object, values) for a context now (on its loop thread)."""
    found = []
    if "context" in which:
        counters = context.counters()
        resolver = context.resolver
        unresolved = sum(1 for topic, receivers in resolver.receivers.items()
                         if not any(r.joined for r in receivers))
        values = (counters.get("lbmr_packets_sent", 0), counters.get("lbmr_bytes_sent", 0),
                  counters.get("lbmr_packets_received", 0), counters.get("lbmr_bytes_received", 0),
                  counters.get("lbmr_malformed", 0), counters.get("lbmr_send_errors", 0),
                  len(resolver.sources), len(resolver.receivers), unresolved,
                  counters.get("mim_messages_sent", 0), counters.get("mim_messages_received", 0),
                  counters.get("mim_duplicates", 0), counters.get("mim_malformed", 0))
        found.append(("context", application_id, context.name, values))
    if "source" in which:
        for session in list(context.session_users):
            info = session.advertised_info()
            counters = session.counters
            found.append(("source", application_id, session_string(info), (
                transport_key(info)[0], session.receiver_count or 0,     # multicast: not known
                counters.get("bytes_sent", 0), counters.get("batches", 0), session.queued_bytes(),
                counters.get("dropped_would_block_bytes", 0), *(counters.get(name, 0) for name in _SOURCE_REPAIR))))
    if "receiver" in which:
        for key, client in list(context.clients.items()):
            counters = client.counters
            control = counters.get("control_frames", 0)
            found.append(("receiver", application_id, key_string(key), (
                key[0], counters["bytes"], counters["frames"] - control - counters["unknown_frames"], control,
                counters["unknown_frames"], counters["fragments"], counters["reassembled"], counters["malformed"],
                *(counters.get(name, 0) for name in _RECEIVER_REPAIR))))
    return found


def encode(record_type: str, application_id: str, what: str, values, separator: str = ",",
           when_ms: int | None = None) -> bytes:
    when_ms = int(time.time() * 1000) if when_ms is None else when_ms
    fields = (VERSION, record_type, application_id, str(when_ms), what, *map(str, values))
    if any(separator in field for field in fields):
        raise MonitoringError(f"a statistics field holds the separator {separator!r}: {fields}")
    return separator.join(fields).encode("utf-8", "surrogateescape")


def decode(data: bytes, separator: str = ",") -> dict:
    """One statistics message as a dict; MonitoringError if it is not one."""
    fields = data.decode(errors="replace").split(separator)
    if len(fields) < 5 or fields[0] != VERSION or fields[1] not in FIELDS:
        raise MonitoringError(f"not a version {VERSION} statistics record: {data[:80]!r}")
    names = FIELDS[fields[1]]
    if len(fields) != 5 + len(names):
        raise MonitoringError(f"a {fields[1]} record has {len(fields) - 5} values, not {len(names)}")
    values = {name: value if name in _TEXT_FIELDS else _number(fields[1], name, value)
              for name, value in zip(names, fields[5:])}
    return {"type": fields[1], "application_id": fields[2], "time_ms": _number(fields[1], "time", fields[3]),
            "object": fields[4], **values}


def _number(record_type: str, name: str, value: str) -> int:
    """A record's counter or time: a decimal integer, else the record is not one of ours."""
    if value.isascii() and value.lstrip("-").isdigit() and value.count("-") <= 1:
        return int(value)
    raise MonitoringError(f"a {record_type} record's {name} is not a number: {value[:40]!r}")


class StatisticsPublisher:
    """Publishes `monitored`'s records every interval from a monitoring context on the same loop.
    `application_ids` maps an application id to the record types it publishes (a DRO portal
    publishes its receive side and its send side under two ids)."""

    def __init__(self, monitored, settings_: MonitorSettings, application_ids: dict[str, tuple[str, ...]] | None = None):
        from router.um.context import Context      # a context owns its publisher
        # Without config=FILE the statistics go into the monitored context's own domain.
        config = load_file(settings_.config_file) if settings_.config_file else monitored.config.copy()
        for scope, option, value in settings_.options:
            config.set(scope, option, value)
        config.set("context", "context_name", CONTEXT_NAME)
        config.set("context", "monitor_interval", 0)          # the monitoring context is not monitored
        self.settings = settings_
        self.monitored = monitored
        self.application_ids = application_ids or {settings_.application_id: tuple(FIELDS)}
        self.context = Context(config=config, loop=monitored.loop)
        # Publishing runs on the monitored context's loop: a statistics receiver that stops
        # reading must neither hold that loop (a blocking send waits for it to drain) nor make
        # its queue grow for good. What it does not take is dropped past the session's queue
        # limit and counted (dropped_would_block): statistics are worth less than the context.
        self.source = self.context.source(settings_.topic, overflow="drop")
        self.published = self.failed = 0
        self._timer = monitored.loop.call_every(settings_.interval, self.publish)

    def publish(self) -> None:
        try:
            for application_id, which in self.application_ids.items():
                for record_type, app, what, values in records(self.monitored, application_id, which):
                    self.source.send(encode(record_type, app, what, values, self.settings.separator))
                    self.published += 1
            self.source.flush()
        except (OSError, MonitoringError) as err:
            self.failed += 1
            if self.failed & (self.failed - 1) == 0:           # the 1st, 2nd, 4th ... failure
                log.warning("statistics of context %s not published: %s", self.monitored.name, err)

    def close(self) -> None:
        self._timer.cancel()
        self.source.close()
        self.context.close()
