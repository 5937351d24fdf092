"""routerctl against a real router: what it reports matches the traffic sent; errors exit right."""
import json

import pytest

from tests.support.processes import wait_for
from tests.support.routerctl import cross_traffic, routerctl, two_lan_router

pytestmark = pytest.mark.integration

# Byte counters count whole LBMC frames as they cross the wire: payload plus its 12-byte header.
FRAME_HEADER = 12
COUNT, LENGTH = 3000, 100


def test_status_portals_topics_stats_match_the_traffic(runtime_dir, routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = two_lan_router(routers, lan1, lan2, costs=(1, 4))
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "--timeout", 120, "watched.topic")
    wait_for(lambda: router.counters()[0]["proxy_receivers"] == 1, 20, message="proxy receiver in LAN1")
    # A source of watched.topic in LAN1 that stays (it waits for a start line): LAN2 has a proxy
    # source for it while status is asked (cross.topic's goes with its source's final advertisements).
    standing = tools.umsrc("-c", lan1.config_path, "--json", "-M", 1, "--start-on-stdin", "watched.topic")
    wait_for(lambda: router.counters()[1]["proxy_sources"] == 1, 20, message="proxy source in LAN2")
    cross_traffic(tools, lan1, lan2, "cross.topic", COUNT, LENGTH)

    status = routerctl("--json", "status").json()              # no -n: the only router running
    assert (status["router"], status["pid"]) == (router.name, router.pid)
    assert isinstance(status["node_id"], int) and status["node_id"] > 0
    portals = {p["name"]: p for p in status["portals"]}
    assert list(portals) == ["LAN1", "LAN2"]
    assert {p["state"] for p in portals.values()} == {"up"}
    assert set(router.worker_pids().values()) == {p["pid"] for p in portals.values()}
    assert all(p["restarts"] == 0 and 0 <= p["heartbeat_age_s"] < 5 and p["uptime_s"] > 0 for p in portals.values())
    assert portals["LAN1"]["proxy_receivers"] >= 1        # watched.topic (cross.topic's may linger)
    assert portals["LAN2"]["proxy_sources"] >= 1

    listed = routerctl("--json", "portals").json()["portals"]
    assert [(p["name"], p["kind"], p["domain_id"], p["cost"]) for p in listed] == \
        [("LAN1", "endpoint", 1, 1), ("LAN2", "endpoint", 2, 4)]

    topics = routerctl("--json", "topics").json()
    assert topics["interest"]["topics"]["watched.topic"] == ["LAN2"]
    assert "watched.topic" in topics["portals"]["LAN1"]["proxy_receivers"]
    assert "watched.topic" in topics["portals"]["LAN2"]["local_interest"]["topics"]
    only_lan2 = routerctl("--json", "topics", "LAN2").json()["portals"]
    assert list(only_lan2) == ["LAN2"]

    stats = routerctl("--json", "stats").json()["portals"]
    lan1_counters, lan2_counters = stats["LAN1"]["counters"], stats["LAN2"]["counters"]
    assert lan1_counters["transport_topic_fragments_rcvd"] == COUNT
    assert lan1_counters["transport_topic_fragment_bytes_rcvd"] == COUNT * (LENGTH + FRAME_HEADER)
    assert lan1_counters["transport_topic_fragments_forwarded"] == COUNT
    assert lan2_counters["transport_topic_fragments_sent"] == COUNT
    assert lan2_counters["transport_topic_fragment_bytes_sent"] == COUNT * (LENGTH + FRAME_HEADER)
    assert lan2_counters["transport_topic_fragments_dropped_would_block"] == 0
    only = routerctl("--json", "stats", "LAN2").json()["portals"]
    assert list(only) == ["LAN2"] and only["LAN2"]["counters"]["transport_topic_fragments_sent"] == COUNT

    topology = routerctl("--json", "-n", router.name, "topology").json()
    assert topology["node_id"] == status["node_id"]
    assert [(p["name"], p["adjacent_domain_id"], p["cost"]) for p in topology["portals"]] == \
        [("LAN1", 1, 1), ("LAN2", 2, 4)]
    standing.stop()
    receiver.stop()


def test_human_output_and_error_exits(runtime_dir, routers, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = two_lan_router(routers, lan1, lan2)
    for command in ("status", "portals", "topics", "stats", "topology"):
        result = routerctl("-n", router.name, command)
        assert result.code == 0 and "LAN1" in result.stdout and "LAN2" in result.stdout, result.explain()
    assert "RESTARTS" in routerctl().stdout                  # no command: status
    assert list(routerctl("stats", "LAN1", "--json").json()["portals"]) == ["LAN1"]   # options after the command

    unknown = routerctl("--json", "stats", "LAN9")
    assert unknown.code == 3, unknown.explain()
    assert "no portal named 'LAN9'" in unknown.stderr and json.loads(unknown.stdout)["error"] == "UNKNOWN_PORTAL"
    for usage in (["frobnicate"], ["-n", "a", "-s", "ipc:///x", "status"], ["--timeout", "-1", "status"],
                  ["-s", "garbage", "status"], ["-s", "tcp://127.0.0.1", "status"], ["-s", "tcp://:5600", "status"]):
        assert routerctl(*usage).code == 2, usage
    assert "not an admin endpoint: 'garbage' (ipc://PATH or tcp://HOST:PORT)" in routerctl("-s", "garbage").stderr


def test_options_show_what_each_portal_context_runs_with_and_where_it_was_set(runtime_dir, routers, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    two_lan_router(routers, lan1, lan2)
    lines = lan1.config_path.read_text().splitlines()
    port_line = lines.index(f"context resolver_multicast_port {lan1.port}") + 1

    set_only = routerctl("--json", "options", "LAN1").json()
    assert [s["page"] for s in set_only["scopes"]] == ["source-context", "receive-context", "source", "receiver",
                                                       "wildcard-receiver"]
    receive = {o["option"]: o for o in set_only["scopes"][1]["options"]}
    assert receive["resolver_multicast_port"] == {"option": "resolver_multicast_port", "value": str(lan1.port),
                                                  "default": "12965", "set": True,
                                                  "origin": f"{lan1.config_path}:{port_line}"}
    assert all(o["set"] for s in set_only["scopes"] for o in s["options"])       # only what was set
    whole = routerctl("--json", "options", "LAN2", "receiver").json()["scopes"]
    assert len(whole) == 1 and len(whole[0]["options"]) > 20 and not all(o["set"] for o in whole[0]["options"])
    text = routerctl("options", "LAN1")
    assert text.code == 0 and f"{lan1.config_path}:{port_line}" in text.stdout, text.explain()
    bad = routerctl("--json", "options", "LAN1", "everything")
    assert bad.code == 3 and json.loads(bad.stdout)["error"] == "INVALID_PROPERTY", bad.explain()


def test_recalculate_forces_a_route_recalculation_at_once(runtime_dir, routers, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = two_lan_router(routers, lan1, lan2)
    wait_for(lambda: not routerctl("--json", "topology").json()["pending_changes"], 30, interval=0.5,
             message="the start-up changes recalculated")
    before = routerctl("--json", "topology").json()
    done = routerctl("--json", "recalculate").json()
    assert done["recalculations"] == before["recalculations"] + 1 and done["map_version"] > before["map_version"]
    assert done["last_changes"] == ["FORCED RECALC (routerctl)"] and done["signature"] == before["signature"]
    router.wait_for_log("route recalculation triggered: FORCED RECALC (routerctl)")
    text = routerctl("recalculate")
    assert text.code == 0 and "routes recalculated" in text.stdout, text.explain()


def test_an_invalid_file_is_rejected_with_the_validators_message(runtime_dir, routers, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = two_lan_router(routers, lan1, lan2)
    pids = router.worker_pids()
    good = router.config.read_text()
    router.config.write_text(good.replace("<cost>1</cost>", "<cost>cheap</cost>", 1))
    result = routerctl("reload")
    assert result.code == 3, result.explain()
    assert "CONFIG_INVALID" in result.stderr and "cheap" in result.stderr and router.config.name in result.stderr
    assert router.worker_pids() == pids
    assert [p["cost"] for p in routerctl("--json", "portals").json()["portals"]] == [1, 1]
    router.config.write_text(good)
    assert routerctl("--json", "reload").json()["kept"] == ["LAN1", "LAN2"]


def test_nothing_running_exits_1_with_a_hint_within_the_timeout(runtime_dir, tmp_path):
    alone = routerctl("status")
    assert alone.code == 1 and runtime_dir in alone.stderr and "-n NAME" in alone.stderr, alone.explain()
    named = routerctl("-n", "ghost", "status")
    assert named.code == 1 and "ghost" in named.stderr, named.explain()
    # A socket file left by a crashed router: nobody answers, routerctl gives up at its timeout.
    stale = tmp_path / "stale.admin"
    import socket
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(stale))                   # bound, never listening: connections are refused
        result = routerctl("-s", f"ipc://{stale}", "--timeout", "1.5", "status")
    assert result.code == 1 and f"ipc://{stale}" in result.stderr, result.explain()
    assert result.seconds < 1.5 + 5, result.explain()
    tcp = routerctl("-s", "tcp://127.0.0.1:9", "--timeout", "1", "status")
    assert tcp.code == 1 and "tcp://127.0.0.1:9" in tcp.stderr and tcp.seconds < 6, tcp.explain()
