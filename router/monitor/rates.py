"""Per-portal traffic rates for `routerctl status` and the web monitor.

Counters are totals; an operator asking "is it moving?" wants fragments and bytes per second.
A timer on the supervisor's loop samples the counters every second and keeps the rates of the
last interval, so a status request never waits for a second sample.
"""
from __future__ import annotations

import time

INTERVAL = 1.0

# (rate name, counter) for each kind: what arrives from the portal's side, what leaves into it.
RATE_COUNTERS = {
    "endpoint": (("rx_fragments_per_s", "transport_topic_fragments_rcvd"),
                 ("rx_bytes_per_s", "transport_topic_fragment_bytes_rcvd"),
                 ("tx_fragments_per_s", "transport_topic_fragments_sent"),
                 ("tx_bytes_per_s", "transport_topic_fragment_bytes_sent")),
    "peer": (("rx_fragments_per_s", "data_msgs_rcvd"),
             ("rx_bytes_per_s", "data_msg_bytes_rcvd"),
             ("tx_fragments_per_s", "data_fragments_sent"),
             ("tx_bytes_per_s", "data_fragment_bytes_sent")),
}
RATE_NAMES = tuple(name for name, _ in RATE_COUNTERS["endpoint"])


class RateMeter:
    def __init__(self, supervisor, interval: float = INTERVAL):
        self.supervisor = supervisor
        self.previous: tuple[float, dict] | None = None
        self.current: dict[str, dict[str, float]] = {}
        self.sample()
        self.timer = supervisor.loop.call_every(interval, self.sample)

    def sample(self) -> None:
        now = time.monotonic()
        snapshot = self.supervisor.portal_counters()
        if self.previous is not None:
            then, before = self.previous
            elapsed = max(now - then, 1e-6)
            self.current = {name: self._rates(name, counters, before.get(name), elapsed)
                            for name, counters in snapshot.items()}
        self.previous = (now, snapshot)

    def _rates(self, name: str, counters: dict, before: dict | None, elapsed: float) -> dict[str, float]:
        worker = self.supervisor.workers.get(name)
        kind = worker.config.kind if worker is not None else "endpoint"
        rates = {}
        for rate_name, counter in RATE_COUNTERS.get(kind, RATE_COUNTERS["endpoint"]):
            # A portal added since the last sample, or counters reset, count from zero.
            delta = counters[counter] - (before or {}).get(counter, 0)
            rates[rate_name] = round(max(delta, 0) / elapsed, 1)
        return rates

    def rates(self, name: str) -> dict[str, float]:
        return self.current.get(name) or dict.fromkeys(RATE_NAMES, 0.0)

    def close(self) -> None:
        self.timer.cancel()


def start(supervisor) -> RateMeter:
    return RateMeter(supervisor)


def rates_of(supervisor, name: str) -> dict[str, float]:
    """The portal's rates, or zeros when the meter is not running (a fake supervisor in tests)."""
    for extension in getattr(supervisor, "extensions", ()):
        if isinstance(extension, RateMeter):
            return extension.rates(name)
    return dict.fromkeys(RATE_NAMES, 0.0)
