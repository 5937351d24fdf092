"""Early wake-ups on a running router (router/worker/datapath.py): the ingress worker wakes the
egress worker as a paced message becomes readable, before it is in the ring, and says so in its
counters; portals sharing a worker hand messages over in-process and wake no one."""
import pytest

from tests.support.routers import endpoint_xml, worker_group_xml

pytestmark = pytest.mark.integration

COUNT = 400          # paced at 200 a second: the egress worker sleeps between messages


def paced_messages(tools, lan1, lan2, topic: str) -> None:
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "-C", COUNT, "--timeout", 60, topic)
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", COUNT, "-P", 200, "-F", "--start-on-stdin", topic)
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    assert source.result(60)["sent"] == COUNT
    got = receiver.result(60)
    assert (got["received"], got["gaps"], got["duplicates"]) == (COUNT, 0, 0), got


def test_the_ingress_worker_wakes_the_egress_worker_ahead_of_each_paced_message(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path)
                           + endpoint_xml("LAN2", 2, lan2.config_path)).wait_ready()
    paced_messages(tools, lan1, lan2, "early.wake")
    counters = router.counters()
    # Every message found the egress worker asleep but for a few (the machine is shared with
    # other tests): most were announced before their record was written.
    assert counters[0]["ring_early_wakeups_sent"] >= COUNT // 2, counters[0]
    assert counters[1]["ring_early_wakeups_sent"] == 0           # LAN2 sent nothing on
    # An early wake-up with no record after it is the exception: data for no one (topic
    # resolution), or an ingress worker that did not get a CPU within the egress worker's wait
    # (EARLY_WAKE_SPIN), which on a machine shared with other tests was a quarter of them (CI).
    assert counters[1]["ring_early_wakeups_idle"] < counters[0]["ring_early_wakeups_sent"] // 2, counters[1]


def test_portals_sharing_a_worker_wake_no_one(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path),
                           daemon_extra=worker_group_xml("LAN1", "LAN2")).wait_ready()
    paced_messages(tools, lan1, lan2, "early.grouped")
    counters = router.counters()
    assert counters[0]["ring_early_wakeups_sent"] == counters[1]["ring_early_wakeups_sent"] == 0


def test_unicast_requests_and_their_answers_get_early_wake_ups_both_ways(routers, tools, make_domain):
    """umreq --unicast asks a umresp in the other domain, one request at a time: each request wakes
    LAN2's worker as it becomes readable at LAN1's portal, each answer wakes LAN1's worker as it
    becomes readable at LAN2's (the way the last one went), and every request is answered."""
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path)
                           + endpoint_xml("LAN2", 2, lan2.config_path)).wait_ready()
    requests = 200
    responder = tools.start("router.cli.umresp", "-c", lan2.config_path, "--json", "-C", requests, "--timeout", 90,
                            "--unicast", "early.uim")
    responder.wait_for_stderr("unicast immediate requests to TCP:", 30)
    line = next(line for line in responder.stderr.splitlines() if "unicast immediate requests to TCP:" in line)
    address = line.split("TCP:", 1)[1].split(" ", 1)[0]
    asked = tools.start("router.cli.umreq", "-c", lan1.config_path, "--json", "-R", requests, "-l", 32,
                        "--unicast", f"TCP:2:{address}", "--wait-timeout", 30, "--response-timeout", 10,
                        "early.uim").result(120)
    assert (asked["requests"], asked["answered"], asked["unanswered"]) == (requests, requests, 0), asked
    counters = router.counters()
    # As for paced messages: most found the other worker asleep and were announced (not every
    # one: the machine is shared with other tests).
    assert counters[0]["ring_early_wakeups_sent"] >= requests // 2, counters[0]
    assert counters[1]["ring_early_wakeups_sent"] >= requests // 2, counters[1]
