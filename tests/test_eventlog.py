"""Every lifecycle event the router logs has a message id, and every id is logged somewhere.

An event name without an id raises in the middle of whatever was logging it (a worker's loop
survives, the rest of that callback does not): the unit tests of portals pass their own
`log_event`, so only this check sees every call site.
"""
from __future__ import annotations

import ast
import logging
from pathlib import Path

import router
from router.eventlog import MESSAGE_IDS, RateLimitedEvents, event
from router.log_rate import LogRate, unsaid

ROUTER = Path(router.__file__).parent

# Callables taking an event name, and the position of that name among their arguments.
EVENT_CALLS = {"event": 0, "log_event": 0, "_log_event": 0, "_log": 0, "_rate_limited": 0, "no_route": 1}


def _event_names_logged() -> dict[str, list[str]]:
    """Event names passed literally to the event-logging calls of router/, with where."""
    found: dict[str, list[str]] = {}
    for path in sorted(ROUTER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            position = EVENT_CALLS.get(callee)
            if position is None or len(node.args) <= position:
                continue
            name = node.args[position]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                found.setdefault(name.value, []).append(f"{path.relative_to(ROUTER.parent)}:{node.lineno}")
    return found


def test_every_event_logged_has_a_message_id():
    logged = _event_names_logged()
    assert len(logged) > 30, "the scan finds the router's event calls"
    missing = {name: where for name, where in logged.items() if name not in MESSAGE_IDS}
    assert not missing, f"events without a message id in router.eventlog.MESSAGE_IDS: {missing}"


def test_every_message_id_is_logged_somewhere():
    logged = set(_event_names_logged())
    assert not set(MESSAGE_IDS) - logged, f"ids nothing logs: {sorted(set(MESSAGE_IDS) - logged)}"


def test_ids_are_unique():
    ids = [message_id for message_id, _ in MESSAGE_IDS.values()]
    assert len(ids) == len(set(ids))


def test_an_event_line_has_its_id_severity_and_portal(caplog):
    with caplog.at_level(logging.INFO, logger="router"):
        event("hop-count-exceeded", "source X of topic T has crossed 255 routers", "LAN1")
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "UMR-4003-1: portal LAN1: source X of topic T has crossed 255 routers"


def test_rate_limited_events_log_one_line_per_interval():
    lines = []
    limited = RateLimitedEvents(lambda name, text: lines.append(name), interval=3600)
    for _ in range(5):
        limited("drops-would-block", "full")
    limited("drops-size-error", "too big")
    assert lines == ["drops-would-block", "drops-size-error"]


def test_a_rate_limited_line_says_how_many_went_unsaid_since_the_last():
    now = [100.0]
    lines = []
    limited = RateLimitedEvents(lambda name, text: lines.append(text), interval=10, clock=lambda: now[0])
    for second in range(25):            # one event a second for 25 s: lines at 0, 10 and 20 s
        now[0] = 100.0 + second
        limited("drops-would-block", "full")
    assert lines == ["full", "full (9 more since the last such line)", "full (9 more since the last such line)"]


def test_log_rate_keys_are_independent_and_a_forgotten_key_is_said_at_once():
    rate = LogRate(interval=1000, clock=lambda: 0.0)
    assert rate.due("LAN1", now=0) == 0
    assert rate.due("LAN1", now=999) is None
    assert rate.due("LAN2", now=999) == 0         # another portal's first line is not held back
    assert rate.due("LAN1", now=1000) == 1
    rate.due("LAN1", now=1500)
    rate.forget("LAN1")                         # the portal was removed; a new one of its name starts afresh
    assert rate.due("LAN1", now=1600) == 0
    assert unsaid(0) == "" and unsaid(3) == " (3 more since the last such line)"


def test_the_first_event_is_said_even_right_after_the_clock_starts():
    """A clock near zero (a fresh boot, a container) must not hold back the very first line."""
    rate = LogRate(interval=10.0, clock=lambda: 0.5)
    assert rate.due() == 0
