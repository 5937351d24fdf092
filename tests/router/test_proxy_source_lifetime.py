"""Proxy sources that other interest still needs, or that could not be made at first."""
import signal
import socket

import pytest

from router.um.tcp_source import CLOSE_DRAIN_TIMEOUT
from tests.support.processes import wait_for
from tests.support.routers import FAST_PURGE, endpoint_xml

pytestmark = pytest.mark.integration


def start_router(routers, domains, after_config=""):
    portals = "".join(endpoint_xml(f"LAN{i + 1}", i + 1, d.config_path, after_config=after_config)
                      for i, d in enumerate(domains))
    return routers.start(portals).wait_ready()


def test_a_purged_topic_keeps_the_proxy_source_a_wildcard_receiver_still_uses(routers, tools, make_domain):
    """LAN2 has a receiver for `pat.one` and a wildcard receiver for `^pat\\.`. When the topic
    receiver leaves, the topic's interest is purged, but the pattern still wants the topic: the
    proxy source must stay and the wildcard receiver must keep getting the data."""
    lan1, lan2 = make_domain(), make_domain()
    router = start_router(routers, [lan1, lan2], after_config=FAST_PURGE)
    wildcard = tools.umwrcv("-c", lan2.config_path, "--json", "--timeout", 120, r"^pat\.")
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "-C", 50, "--timeout", 60, "pat.one")
    wait_for(lambda: router.counters()[1]["local_interest_topics"] == 1
             and router.counters()[1]["local_interest_pcre_patterns"] == 1, 20, message="both interests heard")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", 20_000, "-P", 200, "-W", 1, "pat.one")
    assert receiver.result(60)["received"] >= 50        # it leaves: its context sends a leave
    wait_for(lambda: router.counters()[1]["local_interest_topics"] == 0, 15, message="topic interest purged")
    assert router.counters()[1]["local_interest_pcre_patterns"] == 1
    sent = router.counters()[1]["transport_topic_fragments_sent"]
    wait_for(lambda: router.counters()[1]["transport_topic_fragments_sent"] > sent + 200, 20,
             message="data still forwarded to the wildcard receiver after the topic's interest went")
    assert router.counters()[1]["proxy_sources"] == 1
    source.stop()
    wildcard.stop()


def test_a_proxy_source_that_could_not_be_created_is_tried_again(routers, tools, make_domain):
    """LAN2's transport ports are all taken when the stream is announced there, so its proxy
    source fails; once a port is free again the stream must still reach LAN2's receiver (no
    route or interest change comes to announce it a second time)."""
    lan1, lan2 = make_domain(), make_domain()
    taken = []
    for port in range(lan2.tcp_low, lan2.tcp_high + 1):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", port))
        sock.listen(1)
        taken.append(sock)
    try:
        router = start_router(routers, [lan1, lan2])
        receiver = tools.umrcv("-c", lan2.config_path, "--json", "-C", 100, "--timeout", 120, "retried")
        source = tools.umsrc("-c", lan1.config_path, "--json", "-M", 20_000, "-P", 200, "-W", 1, "retried")
        wait_for(lambda: router.counters()[1]["transport_topic_fragments_dropped_error"] > 0, 30,
                 message="the stream's data dropped: no proxy source in LAN2")
    finally:
        for sock in taken:
            sock.close()
    got = receiver.result(60)
    assert got["received"] >= 100, got
    assert router.counters()[1]["proxy_sources"] == 1
    source.stop()


# Small socket buffers on LAN2's stuck connection (the router's proxy source sends, umrcv
# receives; the kernel doubles each): once the few hundred KB they hold are full, everything else
# waits in the connection's queue or is dropped, whatever the machine's load or its sysctls.
SMALL_BUFFERS = ("source transport_tcp_sender_socket_buffer 65536", "receiver transport_tcp_receiver_socket_buffer 65536")


def test_what_a_deleted_proxy_source_never_delivered_to_a_stuck_receiver_is_counted(routers, tools, make_domain):
    """LAN2's receiver stops reading; its proxy source's queue fills and the rest is dropped. The
    stream then ends and the proxy source goes: what the stuck receiver's connection still held
    is given up once the session's close has waited for it, and must show in the portal's
    would-block drop counters like every other drop, after the proxy source is gone."""
    lan1, lan2 = make_domain(), make_domain(*SMALL_BUFFERS)
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) +
                           endpoint_xml("LAN2", 2, lan2.config_path, before_config="      <max-queue>200000</max-queue>\n")
                           ).wait_ready()
    stuck = tools.umrcv("-c", lan2.config_path, "--json", "--timeout", 120, "stuck.topic")
    # The stopped receiver's kernel buffers take what they can first (what fills fast is dropped
    # meanwhile); what comes once they are full waits in the connection's queue for good: 16 MB
    # is sent, some forty times what the buffers and the queue hold.
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", 2000, "-l", 8192, "--start-on-stdin",
                         "stuck.topic")
    stuck.wait_for_stderr("Beginning of Transport Session", 30)
    stuck.proc.send_signal(signal.SIGSTOP)
    try:
        source.send_line()
        source.result(60)                   # all sent; the source is gone: its stream ends
        wait_for(lambda: router.counters()[1]["proxy_sources_deleted"] == 1, 30, message="the proxy source deleted")
        counted = router.counters()[1]["transport_topic_fragment_bytes_dropped_would_block"]
        assert counted > 0
        wait_for(lambda: router.counters()[1]["transport_topic_fragment_bytes_dropped_would_block"] > counted,
                 CLOSE_DRAIN_TIMEOUT + 10, message="what the stuck receiver never took counted as dropped")
    finally:
        stuck.proc.send_signal(signal.SIGCONT)
        stuck.stop()
