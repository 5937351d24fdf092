"""Message properties cross a router unchanged: it forwards a source's LBMC frames as they came
(the APPHDR_CHAIN header and the properties block at the payload's end, fragments too), so a
receiver in LAN2 gets what a source in LAN1 attached."""
import threading

import pytest

from router.um.context import Context
from router.um.messages import BOS
from router.um.wire.lbmc_properties import Property
from tests.router.test_two_lans import bridge
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration


def test_properties_sent_in_lan1_arrive_unchanged_in_lan2(routers, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = bridge(routers, lan1, lan2)
    sent = [(b"m%d" % n, {"n": Property("long", -n), "k": Property("string", "v%d" % n),
                          "ok": Property("boolean", n % 2 == 0), "x": Property("double", n / 4)})
            for n in range(50)]
    sent += [(b"plain", None), (bytes(range(256)) * 400, {"big": Property("float", -2.5)})]
    received, joined, done = [], threading.Event(), threading.Event()
    publisher, subscriber = Context(**lan1.overrides()), Context(**lan2.overrides())
    try:
        def on_message(message):
            received.append(message)
            if len(received) == len(sent):
                done.set()
        subscriber.receiver("props.cross", on_message, lambda event: event.kind == BOS and joined.set())
        source = publisher.source("props.cross")
        wait_for(lambda: source.receiver_count >= 1, 30, message="the router's proxy receiver joins")
        assert joined.wait(30), "the receiver in LAN2 never joined the router's proxy source"
        for data, properties in sent:
            source.send_with_properties(data, properties)
        source.flush()
        assert done.wait(30), f"{len(received)} of {len(sent)} arrived"
    finally:
        subscriber.close()
        publisher.close()
    assert [(m.data, m.properties) for m in received] == sent
    assert router.counters()[0]["transport_malformed"] == 0
