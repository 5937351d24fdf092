"""Egress flow control: a receiver that is behind makes the router hold records in its rings (and,
when they fill, push back on the source) instead of dropping them, as long as no other portal
pays for it (router.worker.datapath)."""
import signal

import pytest

from tests.support.processes import wait_for
from tests.support.routers import LAYOUTS, endpoint_xml, worker_group_xml

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("group", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_an_unpaced_source_loses_nothing_to_a_receiver_that_keeps_up_on_average(routers, tools, make_domain, group):
    """In one worker the same: records for LAN2 go through the ring while its sends would block."""
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) +
                           endpoint_xml("LAN2", 2, lan2.config_path), daemon_extra=worker_group_xml(*group)).wait_ready()
    # 8 KB messages as fast as the source can send: far faster than the receiver's socket drains
    # in bursts, far more than the socket buffers and the 1 MB <max-queue> hold (160 MB in all).
    count, length = 20_000, 8192
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "-C", count, "--timeout", 120, "--idle-timeout", 10,
                           "unpaced")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-l", length, "--start-on-stdin",
                         "unpaced")
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    assert source.result(120)["sent"] == count
    got = receiver.result(120)
    lan2_counters = router.counters()[1]
    print(f"LAN2 portal held records back {lan2_counters['egress_backlog_holds']} times, "
          f"released {lan2_counters['egress_backlog_releases']} times")
    assert (got["received"], got["gaps"], got["duplicates"]) == (count, 0, 0), got
    assert lan2_counters["transport_topic_fragments_dropped_would_block"] == 0
    assert lan2_counters["transport_topic_fragments_sent"] >= count


def test_a_stopped_receiver_is_let_go_and_its_portal_drops_instead_of_stalling_the_source(
        routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) +
                           endpoint_xml("LAN2", 2, lan2.config_path, before_config="      <max-queue>200000</max-queue>\n")
                           ).wait_ready()
    # Far more than the stopped receiver's socket buffers, the ring and <max-queue> hold together.
    count, length = 8_000, 8192
    stopped = tools.umrcv("-c", lan2.config_path, "--json", "--timeout", 120, "stopped")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-l", length, "--start-on-stdin", "stopped")
    stopped.wait_for_stderr("Beginning of Transport Session", 30)
    stopped.proc.send_signal(signal.SIGSTOP)
    try:
        source.send_line()
        assert source.result(120)["sent"] == count          # held for a moment, then not stalled any more
        wait_for(lambda: router.counters()[1]["egress_backlog_releases"] >= 1, 10,
                 message="LAN2's portal stops holding records back for a receiver that takes nothing")
        lan2_counters = router.counters()[1]
        assert lan2_counters["transport_topic_fragments_dropped_would_block"] > 0
        assert lan2_counters["egress_backlog_holds"] >= 1
        # A batch the socket took in part is queued whole (a frame cut short would corrupt the
        # stream): the queue may pass <max-queue> by one batch, at most one ingress read (256 KB).
        assert lan2_counters["data_bytes_enqueued_max"] <= 200_000 + 256 * 1024
    finally:
        stopped.proc.send_signal(signal.SIGCONT)


# 4,000 is less than any batch here (each holds an 8 KB message at least): the first batch to find the
# ring full must start the backlog all the same, or the portal never holds back and only drops.
@pytest.mark.parametrize("max_queue", [200_000, 4_000])
def test_a_stopped_lbt_ipc_receiver_is_held_for_then_let_go(routers, tools, make_domain, max_queue):
    """The same for proxy sources on LBT-IPC: a full shared-memory ring queues up to <max-queue>,
    the portal holds records in the router's rings, then lets go and drops, counted."""
    lan1 = make_domain()
    lan2 = make_domain("source transport lbtipc")
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) +
                           endpoint_xml("LAN2", 2, lan2.config_path,
                                        before_config=f"      <max-queue>{max_queue}</max-queue>\n")
                           ).wait_ready()
    count, length = 8_000, 8192               # 64 MB: more than the LBT-IPC ring, the router's and the queue
    stopped = tools.umrcv("-c", lan2.config_path, "--json", "--timeout", 120, "ipc.stopped")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-l", length, "--start-on-stdin",
                         "ipc.stopped")
    stopped.wait_for_stderr("Beginning of Transport Session", 30)
    stopped.proc.send_signal(signal.SIGSTOP)
    try:
        source.send_line()
        assert source.result(120)["sent"] == count
        wait_for(lambda: router.counters()[1]["transport_topic_fragments_dropped_would_block"] > 0, 10,
                 message="LAN2's portal counts what its stopped LBT-IPC receiver could not take")
        lan2_counters = router.counters()[1]
        assert lan2_counters["egress_backlog_holds"] >= 1 and lan2_counters["egress_backlog_releases"] >= 1
        assert lan2_counters["data_bytes_enqueued_max"] <= max_queue + 256 * 1024
    finally:
        stopped.proc.send_signal(signal.SIGCONT)
