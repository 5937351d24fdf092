"""Running several of the router's event loops (router.um.loop.EventLoop) in one test thread."""
from __future__ import annotations

import time


def spin(loops, condition, timeout: float = 10.0) -> None:
    """Turn each loop in `loops` until `condition()` holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        for loop in loops:
            loop.run_once(0.005)
