"""Interest messages an endpoint sends to the other routers on its domain (spec/dro.md §1.5, §2.2
"Multi-Hop"): topics are repeated within `<remote-topic-interest>`'s bounds, patterns within
`<remote-pattern-interest>`'s, each kind by its own element. Heard on the wire, as the next
router hears them."""
from __future__ import annotations


import pytest

from router.um.context import Context
from router.um.wire.errors import WireError
from router.um.wire.lbmr import GatewayInterest, decode_lbmr
from router.um.wire.lbmr_constants import INTEREST_CANCEL, INTEREST_PATTERN
from tests.support.processes import wait_for
from tests.support.routers import endpoint_xml

pytestmark = pytest.mark.integration

TOPIC, PATTERN = "announced.topic", "^announced\\.pattern\\."
# Patterns repeated every 100-200 ms; topics at the defaults (1 s, doubling up to 60 s).
PATTERN_BOUNDS = ('      <topic-resolution>\n'
                  '        <remote-pattern-interest min-interval="100" max-interval="200"/>\n'
                  '      </topic-resolution>\n')


class InterestListener:
    """Every gateway interest record sent into `domain`, counted by (pattern?, symbol)."""

    def __init__(self, domain):
        self.sock = domain.resolver_listener()
        self.heard: dict[tuple[bool, str], int] = {}

    def poll(self) -> dict[tuple[bool, str], int]:
        while True:
            try:
                packet = decode_lbmr(self.sock.recv(65536))
            except BlockingIOError:
                return self.heard
            except WireError:
                continue
            if isinstance(packet.body, GatewayInterest):
                for record in packet.body.records:
                    if not record.flags & INTEREST_CANCEL:
                        key = (bool(record.flags & INTEREST_PATTERN), record.symbol)
                        self.heard[key] = self.heard.get(key, 0) + 1

    def close(self) -> None:
        self.sock.close()


def test_pattern_interest_follows_its_own_intervals(routers, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    listener = InterestListener(lan1)
    try:
        router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path, after_config=PATTERN_BOUNDS)
                               + endpoint_xml("LAN2", 2, lan2.config_path)).wait_ready()
        with Context(**lan2.overrides()) as receiving:
            receiving.receiver(TOPIC, on_message=lambda message: None)
            receiving.wildcard_receiver(PATTERN, on_message=lambda message: None)
            wait_for(lambda: router.counters()[0]["receiver_topics"] == 1
                     and router.counters()[0]["receiver_pcre_patterns"] == 1, 20,
                     message="LAN1 pulls in LAN2's topic and pattern")
            # Ten pattern messages take under 2 s at 100-200 ms apart; at the topics' pace
            # (1, 2, 4, 8 s apart) they would take over a minute.
            wait_for(lambda: listener.poll().get((True, PATTERN), 0) >= 10, 15,
                     message="LAN1 repeats the pattern every 200 ms at most")
            # Topics keep their own, slower pace.
            assert 1 <= listener.poll().get((False, TOPIC), 0) <= 5, listener.heard
    finally:
        listener.close()
