"""Off-transport recovery through the router: what a portal drops for a receiver that stopped
reading (its queue full) is still in the proxy source's retention when the domain's sources retain
(`source late_join 1`), so a receiver with `use_otr` asks for it and gets every message, in order.
A dropped tail (nothing after it shows the gap) is told by the proxy source's TSNIs. Where the
proxy sources keep nothing, the requests go to the originating source (router.portals.late_join_relay)."""
import signal

import pytest

from tests.support.processes import wait_for
from tests.support.routers import endpoint_xml

pytestmark = pytest.mark.integration

# The receivers' OTR timing, shortened from UM's (10 s before the first request) for the test.
_OTR = ("receiver use_otr 1", "receiver otr_request_initial_delay 200", "receiver otr_request_minimum_interval 200")


# Who keeps what was sent: the proxy sources in LAN2, only the originating source in LAN1 (the
# router relays the requests to it), or both, the proxy sources too little (100 KB: what they no
# longer have is asked of the origin, <late-join forward="yes">'s default). The origin, or a proxy
# alone, keeps 100 MB: all the test sends (16 MB). Idle, the proxy sources say where their topics
# are every 500 ms (UM: 5 s).
_RETAIN = ("source late_join 1", "source retransmit_retention_size_limit 100000000")
_RETAIN_LITTLE = ("source late_join 1", "source retransmit_retention_size_limit 100000")
_TSNI = "source transport_topic_sequence_number_info_interval 500"
_LAN1 = {"proxy": (), "origin": _RETAIN, "both": _RETAIN}
_LAN2 = {"proxy": _RETAIN, "origin": (), "both": _RETAIN_LITTLE}


@pytest.mark.parametrize("retained_by", ["proxy", "origin", "both"])
def test_what_a_full_portal_queue_dropped_is_recovered(routers, tools, make_domain, retained_by):
    lan1 = make_domain(*_LAN1[retained_by])
    lan2 = make_domain(*_LAN2[retained_by], _TSNI, *_OTR)
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) +
                           endpoint_xml("LAN2", 2, lan2.config_path, before_config="      <max-queue>200000</max-queue>\n")
                           ).wait_ready()
    count, length = 2_000, 8192
    stopped = tools.umrcv("-c", lan2.config_path, "--json", "-C", count, "--timeout", 120, "otr.routed")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-l", length, "--linger", 60,
                         "--start-on-stdin", "otr.routed")
    stopped.wait_for_stderr("Beginning of Transport Session", 30)
    stopped.proc.send_signal(signal.SIGSTOP)
    try:
        source.send_line()
        wait_for(lambda: router.counters()[1]["transport_topic_fragments_dropped_would_block"] > 0, 60,
                 message="LAN2's portal dropping for the stopped receiver")
        wait_for(lambda: router.counters()[0]["transport_topic_fragments_rcvd"] >= count, 60,
                 message="every message at the router")
    finally:
        stopped.proc.send_signal(signal.SIGCONT)
    got = stopped.result(120)
    dropped = router.counters()[1]["transport_topic_fragments_dropped_would_block"]
    assert (got["received"], got["unique"], got["gaps"], got["duplicates"], got["out_of_order"]) == \
        (count, count, 0, 0, 0), got
    print(f"LAN2 dropped {dropped} messages, OTR recovered {got['otr_recovered']}")
    assert got["otr_recovered"] == dropped and got["unrecoverable_loss"] == 0, (dropped, got)
    relayed = router.counters()[0]["late_join_requests_relayed"]
    assert (relayed > 0) == (retained_by != "proxy"), relayed
