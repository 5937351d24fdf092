"""Lifecycle log lines with stable message ids, the way DRO operators grep their logs.

    [2026-11-22 04:15:00.123456] [information] UMR-2001-1: portal LAN1: proxy source created: ...

Ids never change meaning once released; alerting rules key on them. (UMR-3001-3 and UMR-3002-1
were reserved and never logged; they stay unused.) `configure_logging` sets up
the `<log>` destination (console, file, syslog) for the supervisor and its workers.
"""
from __future__ import annotations

import logging
import logging.handlers
import sys
import time

from router.log_rate import LogRate, unsaid
from router.logfile import RollingLogFile

log = logging.getLogger("router")

MESSAGE_IDS: dict[str, tuple[str, int]] = {
    # id, severity
    "router-started": ("UMR-1001-1", logging.INFO),
    "router-stopping": ("UMR-1001-2", logging.INFO),
    "router-stopped": ("UMR-1001-3", logging.INFO),
    "config-reloaded": ("UMR-1002-1", logging.INFO),
    "config-rejected": ("UMR-1002-2", logging.ERROR),
    "portal-up": ("UMR-1101-1", logging.INFO),
    "portal-down": ("UMR-1101-2", logging.WARNING),
    "portal-restarting": ("UMR-1101-3", logging.WARNING),
    "portal-hung": ("UMR-1101-4", logging.ERROR),
    "portal-crash-loop": ("UMR-1101-5", logging.CRITICAL),
    "portal-stopped": ("UMR-1101-6", logging.INFO),
    "portal-reconfigured": ("UMR-1101-7", logging.INFO),       # stopped by a reload, starting again
    "interest-added": ("UMR-2001-1", logging.INFO),
    "interest-removed": ("UMR-2001-2", logging.INFO),
    "proxy-receiver-created": ("UMR-2002-1", logging.INFO),
    "proxy-receiver-deleted": ("UMR-2002-2", logging.INFO),
    "proxy-wildcard-receiver-created": ("UMR-2002-3", logging.INFO),
    "proxy-source-created": ("UMR-2003-1", logging.INFO),
    "proxy-source-deleted": ("UMR-2003-2", logging.INFO),
    "proxy-source-failed": ("UMR-2003-3", logging.WARNING),
    "proxy-transport-converted": ("UMR-2003-4", logging.WARNING),
    "acl-rejected": ("UMR-2004-1", logging.INFO),
    "drops-would-block": ("UMR-3001-1", logging.WARNING),
    "drops-size-error": ("UMR-3001-2", logging.WARNING),
    "drops-immediate-size-error": ("UMR-3001-4", logging.WARNING),
    "drops-immediate-error": ("UMR-3001-5", logging.WARNING),
    "drops-duplicate": ("UMR-3001-6", logging.INFO),           # <sqn-window>: copies, nothing lost
    "queue-began": ("UMR-3001-7", logging.WARNING),             # the DRO's Gwd-6945-1
    "queue-flushed": ("UMR-3001-8", logging.INFO),              # the DRO's Gwd-6945-3
    "drops-ended": ("UMR-3001-9", logging.INFO),                # a drop episode's queue drained
    "ring-lapped": ("UMR-3002-2", logging.ERROR),               # records overwritten before they were sent
    "ring-missed": ("UMR-3002-3", logging.WARNING),             # records for a portal while its worker was down
    "malformed-input": ("UMR-3003-1", logging.WARNING),
    "pattern-invalid": ("UMR-3003-2", logging.WARNING),
    "request-port-unavailable": ("UMR-3004-1", logging.WARNING),
    "proxy-requests-evicted": ("UMR-3004-2", logging.WARNING),
    "response-no-proxy-request": ("UMR-3004-3", logging.WARNING),
    "response-incomplete": ("UMR-3004-4", logging.WARNING),    # its pieces stopped coming over a link
    "unicast-no-route": ("UMR-3005-1", logging.WARNING),        # the DRO's Gwd-6361-123
    "unicast-before-routes": ("UMR-3005-2", logging.WARNING),   # the DRO's Gwd-6361-124
    "unicast-loop": ("UMR-3005-3", logging.WARNING),
    "domain-route-connect-failed": ("UMR-3005-4", logging.WARNING),
    "peer-link-up": ("UMR-1201-1", logging.INFO),
    "peer-link-down": ("UMR-1201-2", logging.WARNING),
    "peer-connect-failed": ("UMR-1201-3", logging.WARNING),
    "peer-connection-refused": ("UMR-1201-4", logging.WARNING),
    "peer-handshake-failed": ("UMR-1201-5", logging.WARNING),
    "route-change-noted": ("UMR-4001-1", logging.INFO),
    "route-recalculated": ("UMR-4001-2", logging.INFO),
    "route-recalculation-held-up": ("UMR-4001-3", logging.WARNING),
    "route-recalculation-slow": ("UMR-4001-4", logging.WARNING),
    "forbidden-topology": ("UMR-4002-1", logging.ERROR),
    "hop-count-exceeded": ("UMR-4003-1", logging.WARNING),      # a source looping between routers
    # The supervisor's own services: statistics on disk, the web monitor, the admin socket.
    "statistics-write-failed": ("UMR-5001-1", logging.ERROR),   # retried every interval
    "statistics-removed": ("UMR-5001-2", logging.INFO),         # older than <format-module> retain_days
    "statistics-directory-taken": ("UMR-5001-3", logging.ERROR),  # another router of the same name writes it
    "web-monitor-unavailable": ("UMR-5002-1", logging.ERROR),
    "admin-socket-unavailable": ("UMR-5003-1", logging.ERROR),
}


class _DroFormatter(logging.Formatter):
    """`[YYYY-MM-DD HH:MM:SS.uuuuuu] [severity] text`, local time or UTC (`tnwgd -u`)."""

    def __init__(self, utc: bool = False):
        super().__init__()
        self.convert = time.gmtime if utc else time.localtime

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", self.convert(record.created))
        micros = int((record.created % 1) * 1_000_000)
        severity = {logging.INFO: "information", logging.WARNING: "WARNING", logging.ERROR: "ERROR",
                    logging.CRITICAL: "CRITICAL", logging.DEBUG: "debug"}.get(record.levelno, record.levelname)
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return f"[{stamp}.{micros:06d}] [{severity}] {text}"


def configure_logging(log_type: str = "console", path: str | None = None, utc: bool = False,
                      verbose: bool = False, frequency: str = "disable", size: int = 0) -> None:
    if log_type == "file" and path:
        # Appended, never overwritten; rolled by time and/or size (router/logfile.py).
        handler: logging.Handler = RollingLogFile(str(path), frequency, size)
    elif log_type == "syslog":
        handler = logging.handlers.SysLogHandler(address="/dev/log")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_DroFormatter(utc))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)


def _log_file() -> RollingLogFile | None:
    return next((h for h in logging.getLogger().handlers if isinstance(h, RollingLogFile)), None)


def claim_log_file() -> None:
    """The calling process (the supervisor) rolls the log file; its workers only follow it."""
    handler = _log_file()
    if handler is not None:
        handler.claim()


def roll_log_if_due() -> None:
    """Called every second by the supervisor: a file only workers write to still rolls on time."""
    handler = _log_file()
    if handler is not None:
        handler.roll_if_due()


def event(name: str, text: str, portal: str | None = None) -> None:
    message_id, level = MESSAGE_IDS[name]
    prefix = f"portal {portal}: " if portal else ""
    log.log(level, "%s: %s%s", message_id, prefix, text)


class RateLimitedEvents:
    """`log_event` for events that come in bursts (drops, stray input): one line per name every
    `interval` seconds, saying how many went unsaid since; the counters have them all."""

    def __init__(self, log_event, interval: float = 10.0, clock=time.monotonic):
        self.log_event, self.rate = log_event, LogRate(interval, clock)

    def __call__(self, name: str, text: str) -> None:
        count = self.rate.due(name)
        if count is not None:
            self.log_event(name, text + unsaid(count))


def portal_logger(portal: str):
    """`log_event(name, text)` for one portal's worker."""
    return lambda name, text: event(name, text, portal)
