"""Portals sharing one worker process (`<daemon><worker-group>`): the same delivery and restarts as
portals with workers of their own, with records handed over inside the process. (Flow control in
both layouts: test_egress_flow_control.py and test_resilience.py.)"""
import os
import signal

import pytest

from router.ipc.ring import read_counters
from router.ipc.shm import SharedSegment
from tests.support.peer_links import routerctl
from tests.support.processes import wait_for
from tests.support.routers import endpoint_xml, worker_group_xml, write_config

pytestmark = pytest.mark.integration


def grouped_router(routers, domains, group=("LAN1", "LAN2")):
    portals = "".join(endpoint_xml(f"LAN{i + 1}", i + 1, d.config_path) for i, d in enumerate(domains))
    return routers.start(portals, daemon_extra=worker_group_xml(*group)).wait_ready()


def test_two_lans_in_one_worker_100k_messages_cross_with_no_loss(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = grouped_router(routers, [lan1, lan2])
    pids = router.worker_pids()
    assert pids["0"] == pids["1"] != 0, pids                   # one process for both portals
    status = {p["name"]: p for p in routerctl(router, "status")["portals"]}
    assert status["LAN1"]["pid"] == status["LAN2"]["pid"] == pids["0"]
    assert status["LAN1"]["worker_portals"] == status["LAN2"]["worker_portals"] == ["LAN1", "LAN2"]
    ring_before = _ring_records_written(router, 0)
    count = 100_000
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "-C", count, "--timeout", 240, "grouped")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-l", 64, "--start-on-stdin", "grouped")
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    assert source.result(240)["sent"] == count
    got = receiver.result(240)
    assert (got["received"], got["gaps"], got["duplicates"]) == (count, 0, 0), got
    counters = router.counters()
    assert counters[0]["transport_topic_fragments_forwarded"] >= count
    assert counters[1]["transport_topic_fragments_sent"] >= count
    # Handed over inside the process: the data never went through LAN1's ring. (Its adverts may
    # have, while LAN2's worker was still settling: a handful of records at most.)
    assert _ring_records_written(router, 0) - ring_before < 100


def test_a_killed_group_worker_restarts_every_portal_in_it(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = grouped_router(routers, [lan1, lan2])
    rate, seconds = 2000, 8
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "--timeout", 60, "--idle-timeout", 3, "grouped.survivor")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", rate * seconds, "-P", rate, "--start-on-stdin",
                         "grouped.survivor")
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    before = router.worker_pids()["0"]
    wait_for(lambda: router.counters()[1]["transport_topic_fragments_sent"] > rate, 20, message="traffic flowing")
    os.kill(before, signal.SIGKILL)
    wait_for(lambda: len(set(router.worker_pids().values()) - {0, before}) == 1
             and before not in router.worker_pids().values(), 20,
             message="the supervisor restarts the group's worker, both portals in one process again")
    assert source.result(120)["sent"] == rate * seconds
    got = receiver.result(60)
    per_source = next(iter(got["per_source"].values()))
    assert per_source["last_seq"] >= rate * seconds - rate // 2, "traffic resumed after the restart"
    assert got["duplicates"] == 0
    status = {p["name"]: p for p in routerctl(router, "status")["portals"]}
    assert status["LAN1"]["generation"] == status["LAN2"]["generation"] == 2
    assert status["LAN1"]["restarts"] == status["LAN2"]["restarts"] == 1


def test_reload_that_changes_a_grouped_portal_restarts_its_group_and_adds_others_alone(
        routers, tools, make_domain):
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    router = grouped_router(routers, [lan1, lan2])
    first = router.worker_pids()["0"]
    # LAN2's <max-queue> changes (a restart), LAN3 is new; the group is as it was.
    portals = (endpoint_xml("LAN1", 1, lan1.config_path) +
               endpoint_xml("LAN2", 2, lan2.config_path, before_config="      <max-queue>500000</max-queue>\n") +
               endpoint_xml("LAN3", 3, lan3.config_path))
    write_config(router.config.parent, router.name, portals, worker_group_xml("LAN1", "LAN2"))
    reply = routerctl(router, "reload")
    assert (reply["changed"], reply["added"], reply["daemon_pending"]) == (["LAN2"], ["LAN3"], []), reply

    def restarted() -> bool:
        pids = router.worker_pids()
        return pids.get("2", 0) != 0 and pids["0"] == pids["1"] not in (0, first)
    wait_for(restarted, 20, message="LAN1 and LAN2 in a new worker together, LAN3 in one of its own")
    status = {p["name"]: p for p in routerctl(router, "status")["portals"]}
    assert status["LAN3"]["worker_portals"] == ["LAN3"] and status["LAN3"]["pid"] != status["LAN1"]["pid"]
    assert status["LAN1"]["restarts"] == status["LAN2"]["restarts"] == 0     # asked for, not a failure
    receiver = tools.umrcv("-c", lan3.config_path, "--json", "-C", 1000, "--timeout", 60, "after.reload")
    source = tools.umsrc("-c", lan2.config_path, "--json", "-M", 1000, "--start-on-stdin", "after.reload")
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    got = receiver.result(60)
    assert (got["received"], got["gaps"]) == (1000, 0), got


def test_requests_and_responses_cross_a_group_handed_over_both_ways(routers, tools, make_domain):
    """Requests go LAN2 → LAN1 and responses LAN1 → LAN2 inside the one worker: every one answered."""
    from tests.router.test_request_response import _ask_across
    lan1, lan2 = make_domain(), make_domain()
    router = grouped_router(routers, [lan1, lan2])
    count = 30
    asked, answered = _ask_across(tools, lan1, lan2, "grouped.svc", count, 32,
                                  lambda: router.counters()[1]["receiver_topics"] == 1)
    assert (asked["answered"], asked["unanswered"]) == (count, 0), asked
    assert answered["responded"] == count, answered
    wait_for(lambda: router.counters()[1]["unicast_data_msgs_sent"] == count, 10,
             message="LAN2 sent every response on to the requester")
    assert router.counters()[0]["proxy_requests"] == count


def test_an_endpoint_and_a_peer_portal_in_one_worker_at_each_end_of_a_link(routers, tools, make_domain):
    """LAN1 - router A - peer link - router B - LAN2, each router's two portals in one worker:
    frames go from the endpoint straight to the link at A, from the link to the proxy source at B."""
    from tests.support.peer_links import linked_pair, send_across
    lan1, lan2 = make_domain(), make_domain()
    a, b = linked_pair(routers, lan1, lan2, "grp",
                       daemon_extra=(worker_group_xml("LAN1", "TO_B"), worker_group_xml("TO_A", "LAN2")))
    for router in (a, b):
        pids = router.worker_pids()
        assert pids["0"] == pids["1"] != 0, pids
    count = 50_000
    [got] = send_across(tools, lan1, [lan2], "grouped.link", count, rate=50_000)
    assert (got["received"], got["gaps"], got["duplicates"]) == (count, 0, 0), got
    assert a.counters()[1]["data_fragments_sent"] >= count          # the peer portal, onto the link
    assert b.counters()[1]["transport_topic_fragments_sent"] >= count


def _ring_records_written(router, index: int) -> int:
    """Records a portal's worker has written into its ring so far (the ring's own counter)."""
    segment = SharedSegment.attach(f"/umr.{router.name}.{router.pid}.ring{index}")
    try:
        return read_counters(segment.memory).records_written
    finally:
        segment.close()
