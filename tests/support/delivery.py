"""umsrc → (routers) → umrcv runs for tests of a transport through the router: start a receiver
(optionally losing some of what it hears, by the transport's *_LOSS_RATE variable) and a source
that waits for a line, then check that everything arrived once."""
from __future__ import annotations

import json


def start_receiver(tools, domain, topic: str, count: int, loss_percent: int = 0, loss_variable: str = ""):
    env = {loss_variable: str(loss_percent)} if loss_percent else None
    return tools.start("router.cli.umrcv", "-c", domain.config_path, "--json", "-C", count, "--timeout", 240,
                       topic, env=env)


def start_source(tools, domain, topic: str, count: int, size: int = 64):
    return tools.umsrc("-c", domain.config_path, "--json", "-M", count, "-l", size, "--start-on-stdin", topic)


def complete(summary: dict, count: int) -> bool:
    return (summary["received"], summary["gaps"], summary["duplicates"]) == (count, 0, 0)


def send_and_receive(source, receiver, count: int) -> dict:
    """Start the waiting source once the receiver has joined; the receiver's summary."""
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    assert source.result(240)["sent"] == count
    got = receiver.result(240)
    assert complete(got, count), json.dumps(got)
    return got
