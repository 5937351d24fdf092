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
    # An early wake-up with no record after it is the exception (data for no one: topic resolution).
    assert counters[1]["ring_early_wakeups_idle"] <= counters[0]["ring_early_wakeups_sent"] // 4, counters[1]


def test_portals_sharing_a_worker_wake_no_one(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path),
                           daemon_extra=worker_group_xml("LAN1", "LAN2")).wait_ready()
    paced_messages(tools, lan1, lan2, "early.grouped")
    counters = router.counters()
    assert counters[0]["ring_early_wakeups_sent"] == counters[1]["ring_early_wakeups_sent"] == 0
