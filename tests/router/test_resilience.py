"""The router under trouble: a stalled receiver, a killed worker, reloads good and bad."""
import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from router.supervisor import CRASH_LOOP_RESTARTS
from tests.support.processes import wait_for
from tests.support.routers import LAYOUTS, endpoint_xml, free_port, worker_group_xml, write_config

pytestmark = pytest.mark.integration


def portals_xml(domains, max_queue=None):
    before = f"      <max-queue>{max_queue}</max-queue>\n" if max_queue else ""
    return "".join(endpoint_xml(f"LAN{i + 1}", i + 1, d.config_path, before_config=before)
                   for i, d in enumerate(domains))


@pytest.mark.parametrize("group", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_stalled_receiver_does_not_slow_the_others(routers, tools, make_domain, group):
    """With LAN1 and LAN2 in one worker, records for the stalled LAN2 go through the ring too."""
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    router = routers.start(portals_xml([lan1, lan2, lan3], max_queue=200_000),
                           daemon_extra=worker_group_xml(*group)).wait_ready()
    # Paced at a rate the healthy receiver keeps up with; big enough messages that the stalled
    # receiver's socket buffers (several MB) fill within the run and the portal queue overflows.
    count, length, rate = 24_000, 1000, 6000
    stalled = tools.umrcv("-c", lan2.config_path, "--json", "--timeout", 240, "fanout")
    healthy = tools.umrcv("-c", lan3.config_path, "--json", "-C", count, "--timeout", 240, "fanout")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-l", length, "-P", rate,
                         "--start-on-stdin", "fanout")
    for receiver in (stalled, healthy):
        receiver.wait_for_stderr("Beginning of Transport Session", 30)
    stalled.proc.send_signal(signal.SIGSTOP)
    try:
        source.send_line()
        assert source.result(240)["sent"] == count
        got = healthy.result(240)
        assert (got["received"], got["gaps"], got["duplicates"]) == (count, 0, 0), got
        wait_for(lambda: router.counters()[1]["transport_topic_fragment_bytes_dropped_would_block"] > 0, 10,
                 message="LAN2's portal counts what it dropped for its stalled receiver")
        lan2_counters = router.counters()[1]
        assert lan2_counters["data_bytes_enqueued_max"] <= 200_000 + 65_536
        assert router.counters()[2]["transport_topic_fragment_bytes_dropped_would_block"] == 0
        router.wait_for_log("UMR-3001-1")
        assert "portal LAN2: a receiver is not keeping up:" in router.log()
        began = [line for line in router.log().splitlines() if "UMR-3001-7" in line]
        assert began and all("portal LAN2: began enqueueing" in line for line in began), began
        stalled.proc.send_signal(signal.SIGCONT)
        # The receiver reads again: its backlog drains and the portal says so.
        wait_for(lambda: "UMR-3001-8: portal LAN2: queue flushed after" in router.log(), 60,
                 message="LAN2's queue drains once its receiver reads again")
    finally:
        stalled.proc.send_signal(signal.SIGCONT)


@pytest.mark.parametrize("victim", [0, 1], ids=["ingress-worker", "egress-worker"])
def test_killed_worker_is_restarted_and_traffic_resumes(routers, tools, make_domain, victim):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(portals_xml([lan1, lan2])).wait_ready()
    rate, seconds = 2000, 8
    # It ends when nothing comes for a while: longer than a restart takes on a loaded machine (its
    # backoff, the worker's start, re-resolution), or it leaves before traffic resumes.
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "--timeout", 60, "--idle-timeout", 10, "survivor")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", rate * seconds, "-P", rate, "--start-on-stdin",
                         "survivor")
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    before = router.worker_pids()
    wait_for(lambda: router.counters()[1]["transport_topic_fragments_sent"] > rate, 20, message="traffic flowing")
    os.kill(before[str(victim)], signal.SIGKILL)
    wait_for(lambda: router.worker_pids()[str(victim)] not in (0, before[str(victim)]), 20,
             message="the supervisor restarts the worker")
    assert source.result(120)["sent"] == rate * seconds
    got = receiver.result(60)
    lost = rate * seconds - got["unique"]
    # What a restart costs: messages the source sent while no proxy receiver was joined to it
    # (no retention at a UM source) — the restart backoff, the worker's start and re-resolution.
    print(f"killed the {'ingress' if victim == 0 else 'egress'} worker: {lost} of {rate * seconds} messages lost")
    per_source = next(iter(got["per_source"].values()))
    assert per_source["last_seq"] >= rate * seconds - rate // 2, "traffic resumed after the restart"
    assert got["duplicates"] == 0
    assert lost < rate * 5
    router.wait_for_log("UMR-1101-2")
    router.wait_for_log("UMR-1101-3")
    if victim == 1:
        # What LAN1 forwarded for LAN2 while no worker of LAN2 read it: counted by the new worker
        # and logged, not skipped unseen.
        wait_for(lambda: router.counters()[1]["ring_records_missed_while_down"] > 0, 10,
                 message="the restarted worker counts the records it missed")
        assert router.counters()[1]["ring_record_bytes_missed_while_down"] > 0
        router.wait_for_log("UMR-3002-3: portal LAN2: ")
    else:
        assert router.counters()[0]["ring_records_missed_while_down"] == 0     # nothing came for LAN1


def test_a_worker_that_keeps_dying_is_called_a_crash_loop(routers, make_domain):
    """Restarts back off; after CRASH_LOOP_RESTARTS quick deaths in a row the router says so once,
    at CRITICAL, and routerctl status marks the portal until it stays up."""
    lan1, lan2 = make_domain(), make_domain()
    web = free_port()
    router = routers.start(portals_xml([lan1, lan2]),
                           daemon_extra=f"    <web-monitor>127.0.0.1:{web}</web-monitor>\n").wait_ready()
    pid = router.worker_pids()["1"]
    for death in range(1, CRASH_LOOP_RESTARTS + 1):
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: router.log().count("UMR-1101-2") == death, 10, message="the death is logged")
        if death < CRASH_LOOP_RESTARTS:
            assert "UMR-1101-5" not in router.log()
            wait_for(lambda: router.worker_pids()["1"] not in (0, pid), 30, message=f"restart {death}")
            pid = router.worker_pids()["1"]
    # Said by the supervisor once it has reaped the last death: a moment after the death's own line.
    wait_for(lambda: "UMR-1101-5" in router.log(), 10, message="the crash loop said")
    lines = [line for line in router.log().splitlines() if "UMR-1101-5" in line]
    assert len(lines) == 1 and "[CRITICAL]" in lines[0] and "portal LAN2" in lines[0], lines
    assert f"died {CRASH_LOOP_RESTARTS} times in a row" in lines[0] and "(last: signal SIGKILL)" in lines[0], lines[0]
    out = subprocess.run([sys.executable, "-m", "router.cli.routerctl", "-n", router.name, "--json", "status"],
                         capture_output=True, text=True, timeout=30)
    portals = {p["name"]: p for p in json.loads(out.stdout)["portals"]}
    assert portals["LAN2"]["crash_loop"] and not portals["LAN1"]["crash_loop"], portals
    assert portals["LAN2"]["restarts"] == CRASH_LOOP_RESTARTS
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{web}/metrics", timeout=10).read().decode()
    crash_loop = {sample.labels["portal"]: sample.value for family in text_string_to_metric_families(metrics)
                  for sample in family.samples if sample.name == "umrouter_portal_crash_loop"}
    assert crash_loop == {"LAN1": 0, "LAN2": 1}, crash_loop


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting for a parent to reap it."""
    try:
        return "\nState:\tZ" not in open(f"/proc/{pid}/status").read()
    except FileNotFoundError:
        return False


def test_workers_stop_when_the_supervisor_is_killed(routers, tools, make_domain):
    """A supervisor killed with SIGKILL (or by the OOM killer) leaves no worker routing on alone:
    each stops as when told to, and the receiver hears its proxy source end."""
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(portals_xml([lan1, lan2])).wait_ready()
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "--timeout", 120, "orphan.topic")
    tools.umsrc("-c", lan1.config_path, "-M", 1, "-W", 1, "-L", 300, "orphan.topic")      # a source that stays
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    workers = list(router.worker_pids().values())
    assert len(workers) == 2 and all(_running(pid) for pid in workers)
    os.kill(router.pid, signal.SIGKILL)
    wait_for(lambda: not any(_running(pid) for pid in workers), 20, message="both workers stopped")
    receiver.wait_for_stderr("End of Transport Session", 20)      # the proxy source went away


def test_reload_adds_an_endpoint_without_disturbing_traffic(routers, tools, make_domain):
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    router = routers.start(portals_xml([lan1, lan2])).wait_ready()
    rate, seconds = 2000, 8
    steady = tools.umrcv("-c", lan2.config_path, "--json", "-C", rate * seconds, "--timeout", 60, "steady")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", rate * seconds, "-P", rate, "--start-on-stdin", "steady")
    steady.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    pids = router.worker_pids()
    write_config(router.config.parent, router.name, portals_xml([lan1, lan2, lan3]))
    router.signal(signal.SIGHUP)
    wait_for(lambda: "UMR-1002-1" in router.log(), 10, message="reload logged")
    newcomer = tools.umrcv("-c", lan3.config_path, "--json", "-C", 100, "--timeout", 60, "steady")
    assert newcomer.result(60)["received"] >= 100
    assert {k: v for k, v in router.worker_pids().items() if k in ("0", "1")} == pids
    source.result(120)
    got = steady.result(60)
    assert (got["unique"], got["gaps"], got["duplicates"]) == (rate * seconds, 0, 0), got


def test_reload_with_an_invalid_file_keeps_the_old_configuration(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(portals_xml([lan1, lan2])).wait_ready()
    pids = router.worker_pids()
    good = router.config.read_text()
    router.config.write_text(good.replace("<domain-id>2</domain-id>", "<domain-id>two</domain-id>"))
    router.signal(signal.SIGHUP)
    wait_for(lambda: "UMR-1002-2" in router.log(), 10, message="the rejected reload is logged")
    router.wait_for_log(f"{router.config}:")
    router.wait_for_log("domain-id")
    assert router.worker_pids() == pids
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "-C", 1000, "--timeout", 60, "still.routing")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", 1000, "--start-on-stdin", "still.routing")
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    assert receiver.result(60)["received"] == 1000
