"""Adversarial reloads on a running router, with traffic flowing: what an operator does to a live
DRO (SIGHUP / `routerctl reload` after editing the file, kills, hangs, stops) and what must hold
afterwards: unchanged portals keep forwarding with no gap and no duplicate and keep their worker
pids, changed portals run their new configuration, removed ones leave nothing behind, and SIGTERM
still stops everything cleanly.

Five bugs these tests found (an endpoint's domain changed or two names swapped by reload kept the old
routes; a removed portal stayed in the bus's snapshots; a portal re-added after leaving a worker group
ran twice; a crash during a reload was not counted) were fixed with them.
"""
from __future__ import annotations

import glob
import os
import signal
import time

import pytest

from tests.support.peer_links import converged, routerctl
from tests.support.processes import wait_for
from tests.support.routers import (FAST_PURGE, FAST_ROUTING, endpoint_xml, free_port, peer_xml, worker_group_xml,
                                   write_config)

pytestmark = pytest.mark.integration

MAX_QUEUE = "      <max-queue>300000</max-queue>\n"


# -- helpers ---------------------------------------------------------------------------------------

def lans(domains, ids=None, names=None, before=None) -> str:
    """Endpoint portals LAN1..n on `domains` (domain ids 1..n unless `ids`), `before` by name."""
    ids = ids or [i + 1 for i in range(len(domains))]
    names = names or [f"LAN{i + 1}" for i in range(len(domains))]
    before = before or {}
    return "".join(endpoint_xml(name, domain_id, d.config_path, before_config=before.get(name, ""))
                   for name, domain_id, d in zip(names, ids, domains))


def rewrite(router, portals: str, daemon_extra: str = "") -> None:
    write_config(router.config.parent, router.name, portals, daemon_extra)


def status(router) -> dict[str, dict]:
    return {p["name"]: p for p in routerctl(router, "status")["portals"]}


def pids_of(router) -> dict[str, int]:
    return {name: p["pid"] for name, p in status(router).items()}


def all_up(router, names) -> bool:
    portals = status(router)
    return sorted(portals) == sorted(names) and all(p["state"] == "up" for p in portals.values())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie is dead
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    return True


def proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def kill_leftovers(pids) -> None:
    """Processes a test saw as workers of its routers and that outlived them (orphans)."""
    for pid in pids:
        if pid and alive(pid):
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def start_stream(tools, source_domain, receiver_domain, topic: str, count: int, rate: int):
    """A paced umsrc → router → umrcv stream, running once this returns."""
    receiver = tools.umrcv("-c", receiver_domain.config_path, "--json", "-C", count, "--timeout", 90,
                           "--idle-timeout", 15, topic)
    source = tools.umsrc("-c", source_domain.config_path, "--json", "-M", count, "-l", 64, "-P", rate,
                         "--start-on-stdin", topic)
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    return source, receiver


def finish_stream(stream, count: int) -> dict:
    source, receiver = stream
    assert source.result(90)["sent"] == count
    got = receiver.result(90)
    assert (got["received"], got["unique"], got["gaps"], got["duplicates"]) == (count, count, 0, 0), got
    return got


def delivers(tools, source_domain, receiver_domain, topic: str, count: int = 1000) -> dict:
    return finish_stream(start_stream(tools, source_domain, receiver_domain, topic, count, 5000), count)


def reload_ok(router) -> dict:
    reply = routerctl(router, "reload")
    assert reply.get("ok", True), reply
    return reply


def stop_cleanly(router, worker_pids) -> None:
    """SIGTERM: exit 0 within the supervisor's own stop timeout (plus start-up slack), no worker
    left, no shared-memory segment of this run left."""
    router.signal(signal.SIGTERM)
    try:
        router.tool.proc.wait(30)
    except Exception:
        raise AssertionError(f"the router did not exit within 30 s of SIGTERM:\n{router.log()[-3000:]}")
    assert router.tool.proc.returncode == 0, router.log()[-3000:]
    router.wait_for_log("UMR-1001-3")
    left = [pid for pid in worker_pids if pid and alive(pid)]
    assert not left, f"worker processes outlived the router: {left}"
    assert glob.glob(f"/dev/shm/umr.{router.name}.{router.pid}.*") == []


def lan_restarted(router, name: str, old_pid: int) -> bool:
    portal = status(router).get(name)
    return portal is not None and portal["state"] == "up" and portal["pid"] not in (None, old_pid)


# -- reloads that must leave unchanged portals alone ------------------------------------------------

def test_burst_of_sighups_with_an_unchanged_file_disturbs_nothing(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2])).wait_ready()
    pids = pids_of(router)
    count, rate = 16_000, 4000
    stream = start_stream(tools, lan1, lan2, "burst.steady", count, rate)
    wait_for(lambda: router.counters()[1]["transport_topic_fragments_sent"] > rate // 2, 20, message="traffic")
    for _ in range(10):
        router.signal(signal.SIGHUP)
    wait_for(lambda: "UMR-1002-1" in router.log(), 10, message="a reload is logged")
    finish_stream(stream, count)
    assert "changed ['" not in router.log() and "UMR-1002-2" not in router.log()
    portals = status(router)
    assert {name: p["pid"] for name, p in portals.items()} == pids
    assert all((p["restarts"], p["generation"]) == (0, 1) for p in portals.values()), portals
    stop_cleanly(router, pids.values())


def test_burst_of_reloads_while_the_file_keeps_changing_settles_on_the_last_one(routers, tools, make_domain):
    """An operator (or a config-management tool) rewriting LAN2's <max-queue> and signalling over
    and over: LAN2 ends up running the file's last version, LAN1 and LAN3 are never restarted and
    the stream LAN1 → LAN3 never gaps; LAN2's counters survive its restarts."""
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2, lan3])).wait_ready()
    pids = pids_of(router)
    count, rate = 16_000, 2000
    stream = start_stream(tools, lan1, lan3, "churn.steady", count, rate)
    delivers(tools, lan1, lan2, "churn.before", 500)
    sent_before = router.counters()[1]["transport_topic_fragments_sent"]
    for value in (200_000, 400_000, 250_000, 600_000, 350_000, 450_000, 500_000, 700_000, 300_000, 333_333):
        rewrite(router, lans([lan1, lan2, lan3], before={"LAN2": f"      <max-queue>{value}</max-queue>\n"}))
        router.signal(signal.SIGHUP)
        time.sleep(0.05)            # pacing the edits, not a synchronisation: nothing is asserted on it
    wait_for(lambda: "UMR-1002-1" in router.log(), 10, message="reloads logged")
    # Once the last file is applied, reloading it again changes nothing.
    wait_for(lambda: (lambda r: (r["changed"], r["added"], r["removed"]) == ([], [], []))(reload_ok(router)), 10,
             interval=0.3, message="the running configuration is the file's last version")
    wait_for(lambda: lan_restarted(router, "LAN2", pids["LAN2"]), 20, message="LAN2 restarted")
    wait_for(lambda: router.counters()[1]["data_bytes_enqueued_limit"] == 333_333, 10,
             message="LAN2's worker runs with the last <max-queue>")
    portal = status(router)["LAN2"]
    assert portal["restarts"] == 0, portal                      # asked for, not failures
    counters = router.counters()[1]
    assert counters["worker_pid"] == portal["pid"]
    assert counters["transport_topic_fragments_sent"] >= sent_before, "counters survive a restart"
    finish_stream(stream, count)
    now = pids_of(router)
    assert (now["LAN1"], now["LAN3"]) == (pids["LAN1"], pids["LAN3"])
    delivers(tools, lan1, lan2, "churn.after", 500)
    stop_cleanly(router, [*pids.values(), *now.values()])


def test_rejected_reloads_keep_the_old_configuration_and_say_where(routers, tools, make_domain):
    """Malformed XML, a duplicate portal name, two endpoints on one domain, a bad option in an
    lbm-config file: each is refused with file, line and element; traffic never notices; then a
    valid file with one more portal is applied."""
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2])).wait_ready()
    pids = pids_of(router)
    count, rate = 16_000, 2000
    stream = start_stream(tools, lan1, lan2, "rejected.steady", count, rate)
    config = str(router.config)

    def rejected(expect: list[str]) -> None:
        before = router.log().count("UMR-1002-2")
        router.signal(signal.SIGHUP)
        wait_for(lambda: router.log().count("UMR-1002-2") > before, 10, message="the rejection is logged")
        line = [entry for entry in router.log().splitlines() if "UMR-1002-2" in entry][-1]
        for text in expect:
            assert text in line, f"{text!r} not in {line!r}"

    # Malformed XML (a truncated write).
    good = router.config.read_text()
    router.config.write_text(good[: len(good) // 2])
    rejected([config])
    # A second portal called LAN1: line of the second <name>.
    rewrite(router, lans([lan1, lan2, lan3], names=["LAN1", "LAN2", "LAN1"]))
    line = [n for n, text in enumerate(router.config.read_text().splitlines(), 1)
            if text == "      <name>LAN1</name>"][1]
    rejected([f"{config}:{line}", "<name>", "LAN1"])
    # LAN3 on LAN2's topic resolution domain under another domain-id.
    rewrite(router, lans([lan1, lan2, lan2], ids=[1, 2, 3]))
    line = router.config.read_text().splitlines().index("      <domain-id>3</domain-id>") + 1
    rejected([f"{config}:{line}", "<domain-id>"])
    # An unknown option in LAN3's lbm-config file.
    bad = lan3.config_path.with_name("bad.cfg")
    bad.write_text(lan3.config_path.read_text() + "context no_such_option 1\n")
    option_line = len(bad.read_text().splitlines())
    rewrite(router, lans([lan1, lan2]) + endpoint_xml("LAN3", 3, bad))
    rejected([f"{bad}:{option_line}", "no_such_option"])

    assert pids_of(router) == pids
    rewrite(router, lans([lan1, lan2, lan3]))
    reply = reload_ok(router)
    assert (reply["added"], reply["changed"], reply["removed"]) == (["LAN3"], [], []), reply
    finish_stream(stream, count)
    wait_for(lambda: all_up(router, ["LAN1", "LAN2", "LAN3"]), 20, message="LAN3 up")
    assert {k: v for k, v in pids_of(router).items() if k != "LAN3"} == pids
    delivers(tools, lan3, lan1, "rejected.after")
    stop_cleanly(router, pids_of(router).values())


def test_changed_lbm_config_file_and_acl_restart_only_their_portal(routers, tools, make_domain):
    """Same path, new contents (LAN2), a new outbound ACL and topic-resolution timers (LAN3): both restart with the new
    settings in force; LAN1 and the stream LAN1 → LAN4 are untouched."""
    lan1, lan2, lan3, lan4 = make_domain(), make_domain(), make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2, lan3, lan4])).wait_ready()
    pids = pids_of(router)
    count, rate = 20_000, 2500
    stream = start_stream(tools, lan1, lan4, "edited.steady", count, rate)
    lan2.config_path.write_text(lan2.config_path.read_text() + "receiver resolver_query_maximum_initial_interval 150\n")
    acl = ('      <acl>\n        <outbound>\n          <ace match="reject"><pcre-pattern>^secret\\.</pcre-pattern></ace>\n'
           '          <ace match="accept"><pcre-pattern>.</pcre-pattern></ace>\n        </outbound>\n      </acl>\n')
    rewrite(router, lans([lan1, lan2]) + endpoint_xml("LAN3", 3, lan3.config_path, after_config=acl + FAST_PURGE)
            + endpoint_xml("LAN4", 4, lan4.config_path))
    reply = reload_ok(router)
    assert (sorted(reply["changed"]), reply["kept"]) == (["LAN2", "LAN3"], ["LAN1", "LAN4"]), reply
    wait_for(lambda: lan_restarted(router, "LAN2", pids["LAN2"]) and lan_restarted(router, "LAN3", pids["LAN3"]),
             20, message="LAN2 and LAN3 restarted")
    finish_stream(stream, count)
    now = pids_of(router)
    assert (now["LAN1"], now["LAN4"]) == (pids["LAN1"], pids["LAN4"])
    # A planned restart, said as such (information), not as a worker that died and backs off.
    for lan in ("LAN2", "LAN3"):
        router.wait_for_log(f"[information] UMR-1101-7: portal {lan}: worker pid {pids[lan]} stopped after")
    assert "UMR-1101-2" not in router.log() and "UMR-1101-3" not in router.log()
    assert {name: p["restarts"] for name, p in status(router).items()} == dict.fromkeys(pids, 0)
    delivers(tools, lan1, lan2, "edited.after")
    # The ACL is in force: LAN3's receiver of a secret topic never gets a proxy source.
    secret = tools.umrcv("-c", lan3.config_path, "--json", "--timeout", 60, "secret.plans")
    delivers(tools, lan1, lan3, "public.plans")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", 200, "-P", 200, "-W", 0, "secret.plans")
    assert source.result(60)["sent"] == 200
    secret.stop()
    assert "Beginning of Transport Session" not in secret.stderr
    stop_cleanly(router, [*pids.values(), *now.values()])


def test_rename_a_portal_and_remove_one_with_a_receiver(routers, tools, make_domain):
    """LAN2 becomes LANB (same domain), LAN3 goes: LANB serves LAN2's domain, LAN3's proxy source
    is deleted (its receiver hears the end), their segments are unlinked; LAN1 → LAN4 never gaps."""
    lan1, lan2, lan3, lan4 = make_domain(), make_domain(), make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2, lan3, lan4])).wait_ready()
    pids = pids_of(router)
    index = {name: i for i, name in enumerate(["LAN1", "LAN2", "LAN3", "LAN4"])}
    count, rate = 20_000, 2500
    stream = start_stream(tools, lan1, lan4, "rename.steady", count, rate)
    doomed = start_stream(tools, lan1, lan3, "rename.doomed", 1_000_000, 200)
    wait_for(lambda: router.counters()[index["LAN3"]]["proxy_sources"] == 1, 20, message="LAN3 proxies the source")
    rewrite(router, lans([lan1, lan2, lan4], ids=[1, 2, 4], names=["LAN1", "LANB", "LAN4"]))
    reply = reload_ok(router)
    assert (reply["added"], sorted(reply["removed"]), reply["kept"]) == (["LANB"], ["LAN2", "LAN3"], ["LAN1", "LAN4"])
    wait_for(lambda: all_up(router, ["LAN1", "LANB", "LAN4"]), 20, message="LANB up, LAN2 and LAN3 gone")
    # A removed portal's process stops on its own time (the supervisor does not wait for it).
    wait_for(lambda: "UMR-2003-2: portal LAN3: topic rename.doomed" in router.log(), 15,
             message="LAN3's proxy source deleted")
    for name in ("LAN2", "LAN3"):
        wait_for(lambda: not alive(pids[name]), 15, message=f"{name}'s process gone")
        assert not glob.glob(f"/dev/shm/umr.{router.name}.{router.pid}.*{index[name]}"), f"{name}'s segments"
    doomed[0].stop()
    finish_stream(stream, count)
    now = pids_of(router)
    assert (now["LAN1"], now["LAN4"]) == (pids["LAN1"], pids["LAN4"])
    # The routes are recalculated on their own time after the reload (a loaded machine's later).
    wait_for(lambda: routerctl(router, "topology")["domains"] == [1, 2, 4], 30,
             message="the topology without LAN3's domain")
    delivers(tools, lan1, lan2, "rename.after")
    stop_cleanly(router, [*pids.values(), *now.values()])


def test_remove_an_endpoint_then_add_it_back_on_another_domain(routers, tools, make_domain):
    lan1, lan2, lan3, lan5 = make_domain(), make_domain(), make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2, lan3]), FAST_ROUTING).wait_ready()
    pids = pids_of(router)
    stream = start_stream(tools, lan1, lan2, "readd.steady", 16_000, 2000)
    rewrite(router, lans([lan1, lan2]), FAST_ROUTING)
    assert reload_ok(router)["removed"] == ["LAN3"]
    wait_for(lambda: all_up(router, ["LAN1", "LAN2"]), 20, message="LAN3 removed")
    rewrite(router, lans([lan1, lan2]) + endpoint_xml("LAN3", 5, lan5.config_path), FAST_ROUTING)
    assert reload_ok(router)["added"] == ["LAN3"]
    wait_for(lambda: all_up(router, ["LAN1", "LAN2", "LAN3"]), 20, message="LAN3 back")
    assert status(router)["LAN3"]["domain_id"] == 5
    wait_for(lambda: routerctl(router, "topology")["domains"] == [1, 2, 5], 10, message="domain 5 in the map")
    finish_stream(stream, 16_000)
    delivers(tools, lan1, lan5, "readd.after")
    now = pids_of(router)
    assert (now["LAN1"], now["LAN2"]) == (pids["LAN1"], pids["LAN2"])
    stop_cleanly(router, [*pids.values(), *now.values()])


# -- reloads racing with resilience -----------------------------------------------------------------

def test_sighup_during_start_up_applies_the_new_file(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2]))
    router.tool.wait_for_stderr("UMR-1001-1", 30)           # signals are handled from here on
    rewrite(router, lans([lan1, lan2], before={"LAN2": MAX_QUEUE}))
    router.signal(signal.SIGHUP)
    router.wait_ready()
    wait_for(lambda: "changed ['LAN2']" in router.log(), 10, message="the reload applied")
    wait_for(lambda: (lambda p: p["generation"] == 2 and p["state"] == "up")(status(router)["LAN2"]), 20,
             message="LAN2 runs the new configuration")
    delivers(tools, lan1, lan2, "startup.hup")
    stop_cleanly(router, pids_of(router).values())


def test_sigkill_a_worker_then_sighup_at_once(routers, tools, make_domain):
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2])).wait_ready()
    pids = pids_of(router)
    rewrite(router, lans([lan1, lan2, lan3], before={"LAN2": MAX_QUEUE}))
    os.kill(pids["LAN2"], signal.SIGKILL)
    router.signal(signal.SIGHUP)
    wait_for(lambda: all_up(router, ["LAN1", "LAN2", "LAN3"]) and lan_restarted(router, "LAN2", pids["LAN2"]),
             20, message="LAN2 restarted, LAN3 added")
    assert status(router)["LAN1"]["pid"] == pids["LAN1"]
    delivers(tools, lan1, lan2, "kill.hup.a")
    delivers(tools, lan3, lan1, "kill.hup.b")
    stop_cleanly(router, [*pids.values(), *pids_of(router).values()])


def test_hung_worker_changed_by_reload_is_killed_and_restarted(routers, tools, make_domain):
    """LAN2's worker is stopped (SIGSTOP): the reload's TERM cannot end it, the heartbeat check
    escalates to KILL; it comes back with the new configuration while LAN1 → LAN3 flows."""
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2, lan3])).wait_ready()
    pids = pids_of(router)
    count, rate = 30_000, 2000
    stream = start_stream(tools, lan1, lan3, "hung.steady", count, rate)
    os.kill(pids["LAN2"], signal.SIGSTOP)
    try:
        rewrite(router, lans([lan1, lan2, lan3], before={"LAN2": MAX_QUEUE}))
        router.signal(signal.SIGHUP)
        wait_for(lambda: lan_restarted(router, "LAN2", pids["LAN2"]), 30, message="hung LAN2 replaced")
    finally:
        try:                        # the supervisor may be killing it this very moment
            os.kill(pids["LAN2"], signal.SIGCONT)
        except ProcessLookupError:
            pass
    router.wait_for_log("UMR-1101-4")
    finish_stream(stream, count)
    assert {k: v for k, v in pids_of(router).items() if k != "LAN2"} == \
        {k: v for k, v in pids.items() if k != "LAN2"}
    delivers(tools, lan1, lan2, "hung.after")
    stop_cleanly(router, [*pids.values(), *pids_of(router).values()])


def test_sigterm_while_a_reload_removes_a_hung_worker(routers, tools, make_domain):
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2, lan3])).wait_ready()
    pids = pids_of(router)
    os.kill(pids["LAN3"], signal.SIGSTOP)
    try:
        rewrite(router, lans([lan1, lan2]))
        router.signal(signal.SIGHUP)
        wait_for(lambda: "LINK WENT DOWN (portal LAN3)" in router.log(), 10, message="the reload is under way")
        stop_cleanly(router, pids.values())
    finally:
        kill_leftovers(pids.values())


# -- peers ------------------------------------------------------------------------------------------

def test_peer_portal_removed_added_back_and_moved_to_another_port(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    port, new_port = free_port(), free_port()
    a_portals = lambda p: endpoint_xml("LAN1", 1, lan1.config_path) + (peer_xml("TO_B", connect=p) if p else "")
    b_portals = lambda p: peer_xml("TO_A", listen=p) + endpoint_xml("LAN2", 2, lan2.config_path)
    a = routers.start(a_portals(port), FAST_ROUTING, name=f"rpa{os.getpid() % 10000}")
    b = routers.start(b_portals(port), FAST_ROUTING, name=f"rpb{os.getpid() % 10000}")
    a.wait_ready(), b.wait_ready()
    wait_for(lambda: converged([a, b], 2), 20, message="both routers know both")
    lan_pids = (pids_of(a)["LAN1"], pids_of(b)["LAN2"])
    seen = {a: set(pids_of(a).values()), b: set(pids_of(b).values())}
    delivers(tools, lan1, lan2, "peer.before")

    rewrite(a, a_portals(None), FAST_ROUTING)
    assert reload_ok(a)["removed"] == ["TO_B"]
    wait_for(lambda: status(b)["TO_A"]["link"] == "down", 10, message="B sees the link go")
    wait_for(lambda: routerctl(a, "topology")["router_count"] == 1 and routerctl(b, "topology")["router_count"] == 1,
             10, message="each router forgets the other")

    rewrite(a, a_portals(port), FAST_ROUTING)
    assert reload_ok(a)["added"] == ["TO_B"]
    wait_for(lambda: converged([a, b], 2), 20, message="the link is back")
    delivers(tools, lan1, lan2, "peer.readded")

    seen[a] |= set(pids_of(a).values())
    rewrite(b, b_portals(new_port), FAST_ROUTING)
    assert reload_ok(b)["changed"] == ["TO_A"]
    rewrite(a, a_portals(new_port), FAST_ROUTING)
    assert reload_ok(a)["changed"] == ["TO_B"]
    wait_for(lambda: status(a)["TO_B"]["link"] == "up" and converged([a, b], 2), 20,
             message="the link comes up on the new port")
    delivers(tools, lan1, lan2, "peer.moved")
    assert (pids_of(a)["LAN1"], pids_of(b)["LAN2"]) == lan_pids
    for router in (a, b):
        seen[router] |= set(pids_of(router).values())
    stop_cleanly(a, seen[a])
    stop_cleanly(b, seen[b])


# -- bugs -------------------------------------------------------------------------------------------

def test_domain_id_change_by_reload_routes_to_the_new_domain(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2]), FAST_ROUTING).wait_ready()
    rewrite(router, lans([lan1, lan2], ids=[1, 7]), FAST_ROUTING)
    reply = reload_ok(router)
    assert (reply["changed"], reply["cost_only"]) == (["LAN2"], []), reply
    wait_for(lambda: (lambda p: p["generation"] == 2 and p["state"] == "up")(status(router)["LAN2"]), 20,
             message="LAN2 restarted")
    assert status(router)["LAN2"]["domain_id"] == 7
    wait_for(lambda: routerctl(router, "topology")["domains"] == [1, 7], 5, interval=0.2,
             message="the routing map has domain 7 instead of 2")
    delivers(tools, lan1, lan2, "domain.changed")


def test_swap_two_portal_names(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2]), FAST_ROUTING).wait_ready()
    delivers(tools, lan1, lan2, "swap.before")
    rewrite(router, lans([lan2, lan1], ids=[2, 1]), FAST_ROUTING)   # LAN1 now on domain 2, LAN2 on 1
    assert sorted(reload_ok(router)["changed"]) == ["LAN1", "LAN2"]
    wait_for(lambda: all(p["generation"] == 2 and p["state"] == "up" for p in status(router).values()), 20,
             message="both restarted")

    def paths() -> dict:
        return {(p["from"], p["to"]): [h["portal"] for h in p["hops"] if h["kind"] == "router"]
                for p in routerctl(router, "topology")["paths"]}

    # Both up is not yet both in the routing map: each restarted portal tells its domain again.
    wait_for(lambda: paths().get((1, 2)) == ["LAN1"] and paths().get((2, 1)) == ["LAN2"], 10, interval=0.2,
             message="the paths through the swapped portals")
    delivers(tools, lan1, lan2, "swap.after")


def test_worker_restarted_after_a_removal_still_knows_the_interest(routers, tools, make_domain):
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2, lan3])).wait_ready()
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "-C", 1000, "--timeout", 60, "after.removal")
    wait_for(lambda: "portal LAN2: topic after.removal" in router.log(), 20, message="LAN2 registers interest")
    rewrite(router, lans([lan1, lan2]))
    assert reload_ok(router)["removed"] == ["LAN3"]
    old = pids_of(router)["LAN1"]
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: lan_restarted(router, "LAN1", old), 20, message="LAN1 restarted")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", 1000, "-P", 5000, "--start-on-stdin",
                         "after.removal")
    try:
        receiver.wait_for_stderr("Beginning of Transport Session", 15)
    finally:
        assert "callback" not in router.log(), "a worker failed to handle a bus message"
    source.send_line()
    got = receiver.result(60)
    assert (got["received"], got["gaps"], got["duplicates"]) == (1000, 0, 0), got


def test_portal_readded_after_leaving_a_worker_group_runs_once(routers, tools, make_domain):
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    group = worker_group_xml("LAN1", "LAN2")
    router = routers.start(lans([lan1, lan2, lan3]), group).wait_ready()
    seen: set[int] = set(pids_of(router).values())
    try:
        rewrite(router, lans([lan1, lan3], ids=[1, 3], names=["LAN1", "LAN3"]))   # no group: pending
        assert reload_ok(router)["removed"] == ["LAN2"]
        wait_for(lambda: all_up(router, ["LAN1", "LAN3"]), 20, message="LAN2 removed, LAN1 restarted alone")
        rewrite(router, lans([lan1, lan2, lan3]), group)
        assert reload_ok(router)["added"] == ["LAN2"]
        wait_for(lambda: all_up(router, ["LAN1", "LAN2", "LAN3"]), 20, message="LAN2 back")
        portals = status(router)
        seen |= {p["pid"] for p in portals.values()}
        first = portals["LAN2"]["pid"]
        # Wherever LAN2 runs now, status must say the truth about who shares LAN1's process.
        sharing = {name for name, p in portals.items() if p["pid"] == portals["LAN1"]["pid"]}
        assert set(portals["LAN1"]["worker_portals"]) == sharing, portals

        os.kill(portals["LAN1"]["pid"], signal.SIGKILL)
        wait_for(lambda: lan_restarted(router, "LAN1", portals["LAN1"]["pid"]), 20, message="LAN1 restarted")
        seen |= set(pids_of(router).values())
        assert not (alive(first) and status(router)["LAN2"]["pid"] != first), \
            f"LAN2's first worker {first} still runs, orphaned; LAN2 now also in {status(router)['LAN2']['pid']}"
        delivers(tools, lan1, lan2, "group.readd")
        stop_cleanly(router, seen)
    finally:
        kill_leftovers(seen)


def test_crash_coinciding_with_a_reload_is_counted(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2])).wait_ready()
    rewrite(router, lans([lan1, lan2], before={"LAN2": MAX_QUEUE}))
    victim = pids_of(router)["LAN2"]
    # Both signals pending while the supervisor is stopped: Python runs handlers in signal-number
    # order, so SIGHUP (1) is queued before SIGCHLD (17), as on a busy supervisor.
    router.signal(signal.SIGSTOP)
    try:
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: proc_state(victim) == "Z", 10, message="the worker died")
        router.signal(signal.SIGHUP)
    finally:
        router.signal(signal.SIGCONT)
    wait_for(lambda: lan_restarted(router, "LAN2", victim), 20, message="LAN2 restarted")
    # Whichever the supervisor handles first (the reload, usually, or the worker's exit), the
    # crash is counted once: the restart the reload asked for is not counted only when the worker
    # ends by that request's TERM.
    assert status(router)["LAN2"]["restarts"] == 1, status(router)["LAN2"]


def test_a_portal_added_and_removed_by_reload_sixteen_times_always_gets_a_ring_slot(routers, tools, make_domain):
    """A router has 16 ring slots (portal indexes); a removed portal's slot is free again once its
    process has exited, and the lowest free one is taken. Indexes used to grow with every portal
    ever added, so the 15th add/remove cycle of a two-portal router failed. Traffic between the
    portals that stay is undisturbed."""
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2])).wait_ready()
    pids = pids_of(router)
    stream = start_stream(tools, lan1, lan2, "cycle.steady", 10_000, 1000)
    for cycle in range(16):           # the 15th failed when indexes grew
        rewrite(router, lans([lan1, lan2, lan3]))
        reload_ok(router)
        wait_for(lambda: all_up(router, ["LAN1", "LAN2", "LAN3"]), 20, message=f"LAN3 added (cycle {cycle})")
        rewrite(router, lans([lan1, lan2]))
        reload_ok(router)
        wait_for(lambda: sorted(status(router)) == ["LAN1", "LAN2"], 20, message=f"LAN3 removed (cycle {cycle})")
    got = finish_stream(stream, 10_000)
    assert (got["received"], got["gaps"], got["duplicates"]) == (10_000, 0, 0), got
    assert pids_of(router) == pids
    assert "at most 16 portals" not in router.log() and "Traceback" not in router.log()


def test_removing_a_hung_worker_by_reload_does_not_hold_the_supervisor(routers, make_domain):
    """A removed portal whose worker is hung (SIGSTOP) is TERMed and, at the stop timeout, KILLed;
    meanwhile the supervisor answers (it used to wait for that worker, admin socket and all)."""
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2, lan3])).wait_ready()
    hung = pids_of(router)["LAN3"]
    os.kill(hung, signal.SIGSTOP)
    try:
        rewrite(router, lans([lan1, lan2]))
        reload_ok(router)
        answered = status(router)                       # while the hung worker still stands
        assert sorted(answered) == ["LAN1", "LAN2"] and alive(hung)
        wait_for(lambda: not alive(hung), 30, message="the hung worker KILLed at the stop timeout")
    finally:
        if alive(hung):
            os.kill(hung, signal.SIGKILL)
    assert "Traceback" not in router.log()


def test_sighup_after_an_lbm_config_edit_in_another_encoding_keeps_the_router_running(routers, tools, make_domain):
    """An operator's editor saves LAN2's lbm-config in Latin-1 (a comment "réseau"), and later a value that is
    not UTF-8: the first is only a comment and changes nothing; the second is refused with file and line.
    Neither stops the router, and both portals keep their workers."""
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2])).wait_ready()
    pids = pids_of(router)
    options = lan2.config_path.read_bytes()
    lan2.config_path.write_bytes(b"# r\xe9seau de Montr\xe9al\n" + options)
    reply = reload_ok(router)
    assert (reply["changed"], reply["kept"]) == ([], ["LAN1", "LAN2"]), reply

    before = router.log().count("UMR-1002-2")
    lan2.config_path.write_bytes(options + b"context context_name Montr\xe9al\n")
    router.signal(signal.SIGHUP)
    wait_for(lambda: router.log().count("UMR-1002-2") > before or router.tool.proc.poll() is not None, 10,
             message="the rejection is logged")
    assert router.tool.proc.poll() is None, router.log()[-3000:]
    line = [entry for entry in router.log().splitlines() if "UMR-1002-2" in entry][-1]
    assert f"{lan2.config_path}:{len(options.splitlines()) + 1}" in line and "UTF-8" in line, line
    assert pids_of(router) == pids
    lan2.config_path.write_bytes(options)
    delivers(tools, lan1, lan2, "encoding.after")
    stop_cleanly(router, pids.values())
