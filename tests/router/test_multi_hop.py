"""Several routers on loopback: peer links, transit domains, one path per destination, reroutes.

Each router's domains are private loopback resolver groups; peer links are loopback TCP ports.
Routing timers are shortened (FAST_ROUTING) so convergence and failover take a second or two.
"""
import datetime
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import lxml.html
import pytest

from router.um.context import Context
from tests.support.processes import wait_for
from tests.support.certs import issue, make_ca
from tests.support.peer_links import converged, linked_pair, routerctl, send_across, signatures, start
from tests.support.routers import FAST_ROUTING, endpoint_xml, free_port, peer_xml
from tests.support.tshark import LiveCapture, assert_no_expert_info, decode

pytestmark = pytest.mark.integration


def counter(router, portal_index: int, name: str) -> int:
    return router.counters()[portal_index][name]


def test_single_peer_link(routers, tools, make_domain, tmp_path):
    """Source in D1 behind router A, receiver in D2 behind router B, one peer link between them."""
    lan1, lan2 = make_domain(), make_domain()
    port = free_port()
    a = start(routers, endpoint_xml("LAN1", 1, lan1.config_path, cost=1)
              + peer_xml("TO_B", connect=port, cost=2), "pla")
    b = start(routers, peer_xml("TO_A", listen=port, cost=3)
              + endpoint_xml("LAN2", 2, lan2.config_path, cost=4), "plb")
    a.wait_ready(), b.wait_ready()
    wait_for(lambda: converged([a, b], 2), 20, message="both routers know both")

    # A short, captured exchange: the peer link and D2's topic resolution decode cleanly, and the
    # receiver's TIR says two hops and the sum of the egress portals' costs (A's peer 2 + B's LAN2 4).
    link_pcap, lbmr_pcap = tmp_path / "link.pcapng", tmp_path / "lan2.pcapng"
    with LiveCapture(capture_filter=f"tcp port {port}", path=link_pcap), \
            LiveCapture(capture_filter=f"udp port {lan2.port}", path=lbmr_pcap):
        wildcard = tools.umwrcv("-c", lan2.config_path, "--json", "-C", 2000, "--timeout", 60, r"^peer\.small")
        [got] = send_across(tools, lan1, [lan2], "peer.small", 2000, rate=5000, others=[wildcard])
        assert (got["received"], got["gaps"], got["duplicates"]) == (2000, 0, 0), got
        assert wildcard.result(60)["received"] == 2000
    link = [f"tcp.port=={port},lbttcp"]
    assert_no_expert_info(link_pcap, link)
    frames = decode(link_pcap, link, fields=["lbmc.topic_interest.domain_id", "lbmc.pattern_interest.domain_id",
                                             "lbmc.topicname.topic", "lbmc.advertisement.hop_count",
                                             "lbmc.advertisement.cost", "lbmc.otid.otid", "lbmc.route_info.node_id"])
    seen = {key for frame in frames for key, values in frame.items() if values}
    assert {"lbmc.topic_interest.domain_id", "lbmc.pattern_interest.domain_id", "lbmc.advertisement.cost",
            "lbmc.otid.otid", "lbmc.route_info.node_id"} <= seen, seen
    interest = [f for f in frames if f.get("lbmc.topic_interest.domain_id")]
    assert any(f["lbmc.topic_interest.domain_id"] == ["2"] and "peer.small" in f["lbmc.topicname.topic"]
               for f in interest)
    adverts = [f for f in frames if f.get("lbmc.advertisement.cost")]
    assert any(f["lbmc.advertisement.cost"] == ["2"] and f["lbmc.advertisement.hop_count"] == ["1"] for f in adverts)
    lbmr = [f"udp.port=={lan2.port},lbmr"]
    assert_no_expert_info(lbmr_pcap, lbmr)
    tirs = decode(lbmr_pcap, lbmr, fields=["lbmr.tir.name", "lbmr.topt.cost.cost", "lbmr.topt.cost.hop_count"],
                  display_filter='lbmr.tir.name == "peer.small"')
    assert tirs and all(f["lbmr.topt.cost.hop_count"] == ["2"] for f in tirs)
    assert all(f["lbmr.topt.cost.cost"] == ["6"] for f in tirs), tirs[:3]

    # The bulk: 100000 messages over the link with nothing lost.
    [got] = send_across(tools, lan1, [lan2], "peer.bulk", 100_000, rate=25000)
    assert (got["received"], got["gaps"], got["duplicates"]) == (100_000, 0, 0), got
    assert counter(a, 1, "data_fragments_sent") >= 102_000
    assert counter(b, 0, "transport_topic_fragments_forwarded") >= 102_000
    assert counter(a, 1, "rtt_samples") >= 0 and counter(a, 1, "link_connects") == 1

    # What each portal counted is in routerctl stats, hence on its web-monitor page and in /metrics.
    for router, names in ((a, ("LAN1", "TO_B")), (b, ("TO_A", "LAN2"))):
        shown = routerctl(router, "stats")["portals"]
        for index, name in enumerate(names):
            moved = {k for k, v in router.counters()[index].items()
                     if v and k not in ("heartbeat_ns", "worker_pid", "worker_started_ns")}
            assert moved <= set(shown[name]["counters"]), f"{name}: {sorted(moved - set(shown[name]['counters']))}"


def test_a_tls_and_lz4_peer_link_delivers_everything_and_hides_it(routers, tools, make_domain, tmp_path):
    """<tls> and <compression>LZ4 on both ends of the link: the receiver gets every message and
    the link's bytes are TLS records with nothing of the topic or the data readable."""
    ca = make_ca(tmp_path / "certs")
    credentials = [issue(tmp_path / "certs", name, ca, password="pw" if name == "router-a" else None)
                   for name in ("router-a", "router-b")]
    lan1, lan2 = make_domain(), make_domain()
    port = free_port()
    secure = lambda c: f"<compression>LZ4</compression>{c.tls_xml('AES256-GCM-SHA384,AES128-GCM-SHA256')}"
    a = start(routers, endpoint_xml("LAN1", 1, lan1.config_path)
              + peer_xml("TO_B", connect=port, link_extra=secure(credentials[0])), "tla")
    b = start(routers, peer_xml("TO_A", listen=port, link_extra=secure(credentials[1]))
              + endpoint_xml("LAN2", 2, lan2.config_path), "tlb")
    a.wait_ready(), b.wait_ready()
    wait_for(lambda: converged([a, b], 2), 20, message="both routers know both over TLS")
    pcap = tmp_path / "tls-link.pcapng"
    with LiveCapture(capture_filter=f"tcp port {port}", path=pcap):
        [got] = send_across(tools, lan1, [lan2], "secret.topic", 20_000, rate=20000)
    assert (got["received"], got["gaps"], got["duplicates"]) == (20_000, 0, 0), got
    frames = decode(pcap, [f"tcp.port=={port},tls"], fields=["tls.app_data"])
    assert sum(len(f.get("tls.app_data", [])) for f in frames) > 10
    assert b"secret.topic" not in pcap.read_bytes()
    a.wait_for_log("UMR-1201-1")
    a.wait_for_log("TO_B has just established a connection")


def test_transit_domain(routers, tools, make_domain, tmp_path):
    """A bridges D1-D2, B bridges D2-D3: a receiver in D3 gets a D1 source (seed 001 §2.3.5)."""
    lan1, lan2, lan3, lan4 = make_domain(), make_domain(), make_domain(), make_domain()
    a = start(routers, endpoint_xml("E1", 1, lan1.config_path) + endpoint_xml("E2", 2, lan2.config_path), "tda")
    b = start(routers, endpoint_xml("E2", 2, lan2.config_path) + endpoint_xml("E3", 3, lan3.config_path)
              + endpoint_xml("E4", 4, lan4.config_path), "tdb")
    a.wait_ready(), b.wait_ready()
    wait_for(lambda: converged([a, b], 2), 20, message="route-info crossed the transit domain")
    # Route-info between the two routers on D2 travels over TCP to the port each endpoint
    # announces in its CTXINFO: capture those connections too.
    route_ports = [int(routerctl(r, "topics")["portals"]["E2"]["route_info_address"].rsplit(":", 1)[1])
                   for r in (a, b)]
    pcap = tmp_path / "lan2.pcapng"
    capture = f"udp port {lan2.port} or tcp port {route_ports[0]} or tcp port {route_ports[1]}"
    with LiveCapture(capture_filter=capture, path=pcap):
        [got] = send_across(tools, lan1, [lan3], "AAA", 10000)
    assert (got["received"], got["gaps"], got["duplicates"]) == (10000, 0, 0), got
    # B-E2 pulled AAA and told D2 (TNWG interest for domain 3); A-E1 pulled it from D1.
    assert counter(b, 0, "proxy_receivers") == 1 and counter(a, 0, "proxy_receivers") == 1
    # Proxy sources only where a receiver is: A's in D2 (for B), B's in D3; none in D1 or D4,
    # and B sends nothing back into D2.
    assert counter(a, 1, "proxy_sources_created") == 1 and counter(b, 1, "proxy_sources_created") == 1
    assert counter(a, 0, "proxy_sources_created") == 0 and counter(b, 0, "proxy_sources_created") == 0
    assert counter(b, 2, "proxy_sources_created") == 0
    lbmr = [f"udp.port=={lan2.port},lbmr"] + [f"tcp.port=={port},lbttcp" for port in route_ports]
    assert_no_expert_info(pcap, lbmr)
    route_info = decode(pcap, lbmr, fields=["lbmc.route_info.node_id"], display_filter="lbmc.route_info")
    heard = {int(node, 16) for f in route_info for node in f["lbmc.route_info.node_id"]}
    assert heard >= {routerctl(r, "status")["node_id"] for r in (a, b)}, "both routers' route-info crossed D2"
    tirs = decode(pcap, lbmr, fields=["lbmr.tir.name", "lbmr.topt.cost.hop_count", "lbmr.topt.domain_id.domain_id"],
                  display_filter='lbmr.tir.name == "AAA"')
    assert tirs and all(f["lbmr.topt.cost.hop_count"] == ["1"] for f in tirs)
    interest = decode(pcap, lbmr, fields=["lbmr.tnwg.interest_rec.domain_id", "lbmr.tnwg.interest_rec.symbol"],
                      display_filter="lbmr.tnwg.interest_rec")
    assert any("3" in f.get("lbmr.tnwg.interest_rec.domain_id", []) for f in interest), \
        "B's endpoint sent gateway interest for domain 3 into the transit domain"


def remote_interest(router, portal: str) -> set[str]:
    return set(routerctl(router, "topics")["portals"][portal]["remote_interest"])


def test_interest_of_a_router_gone_silent_is_removed_a_few_topics_a_pass(routers, make_domain):
    """<remote-topic>: a router that wanted topics on a shared domain dies without cancelling; the
    other router drops that interest once `timeout` passes without a refresh, checking at most
    `max-topics` topics a pass (passes spread over check-interval, never closer than 50 ms)."""
    lan1, lan2, lan3 = make_domain(), make_domain(), make_domain()
    checks = '      <remote-topic check-interval="300" max-topics="2" timeout="1500"/>\n'
    a = start(routers, endpoint_xml("E1", 1, lan1.config_path)
              + endpoint_xml("E2", 2, lan2.config_path, after_config=checks), "rta")
    b = start(routers, endpoint_xml("E2", 2, lan2.config_path) + endpoint_xml("E3", 3, lan3.config_path), "rtb")
    a.wait_ready(), b.wait_ready()
    wait_for(lambda: converged([a, b], 2), 20, message="route-info crossed the shared domain")
    topics = [f"RT{n}" for n in range(5)]
    wanted = {f"topic {topic} for domain 3" for topic in topics}
    with Context(**lan3.overrides()) as receiving:
        for topic in topics:
            receiving.receiver(topic, on_message=lambda message: None)
        wait_for(lambda: wanted <= remote_interest(a, "E2"), 30, message="A heard B's interest in D3's topics")
        kill_router(b)
    wait_for(lambda: not wanted & remote_interest(a, "E2"), 30, message="A dropped the interest B stopped refreshing")
    removed = [line for line in a.log().splitlines()
               if "UMR-2001-2" in line and "not refreshed by another router" in line and "for domain 3" in line]
    assert len(removed) == len(topics), removed
    # Removals of one pass are logged together; passes are at least 50 ms apart (each is timed
    # from the end of the one before), so lines within 10 ms of each other are one pass's.
    stamps = sorted(datetime.datetime.strptime(line[1:27], "%Y-%m-%d %H:%M:%S.%f") for line in removed)
    passes = [[stamps[0]]]
    for stamp in stamps[1:]:
        if (stamp - passes[-1][-1]).total_seconds() < 0.010:
            passes[-1].append(stamp)
        else:
            passes.append([stamp])
    assert max(len(one) for one in passes) <= 2, removed
    # A's route-info connection to B failed too: said once, nothing raised.
    a.wait_for_log("UMR-3005-4")


def kill_router(router) -> None:
    """A router dies without saying goodbye: supervisor and workers killed outright."""
    pids = list(router.worker_pids().values())
    router.signal(signal.SIGKILL)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    router.tool.proc.wait(10)


def sent_by(router, portal_index: int) -> int:
    return counter(router, portal_index, "transport_topic_fragments_sent")


def parallel_pair(routers, lan1, lan2, name):
    """Routers X and Y both bridge D1 and D2; X's way costs 2, Y's 5."""
    x = start(routers, endpoint_xml("D1", 1, lan1.config_path) + endpoint_xml("D2", 2, lan2.config_path, cost=2),
              f"{name}x")
    y = start(routers, endpoint_xml("D1", 1, lan1.config_path) + endpoint_xml("D2", 2, lan2.config_path, cost=5),
              f"{name}y")
    x.wait_ready(), y.wait_ready()
    wait_for(lambda: converged([x, y], 2), 20, message="both routers know both")
    return x, y


def paced_stream(tools, lan1, lan2, topic, count, rate):
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "-C", count, "--timeout", 120, "--idle-timeout", 15,
                           topic)
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-l", 64, "-P", rate, "--start-on-stdin",
                         topic)
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    return source, receiver


def test_parallel_paths_fail_over_to_the_costlier_one(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    x, y = parallel_pair(routers, lan1, lan2, "pf")
    source, receiver = paced_stream(tools, lan1, lan2, "parallel.topic", 30000, 2000)
    wait_for(lambda: sent_by(x, 1) > 2000, 20, message="traffic on the cheaper path")
    assert sent_by(y, 1) == 0 and counter(y, 0, "proxy_receivers") == 0, "the costlier router stays idle"
    kill_router(x)
    killed_at = time.monotonic()
    # Route-info timeout 2 s (X's silence, as a peer's keepalive timeout would be) + backoff 0.3 s + 2 s.
    wait_for(lambda: sent_by(y, 1) > 0, 2.0 + 0.3 + 2.0, message="traffic moved to the other path")
    moved_after = time.monotonic() - killed_at
    assert source.result(120)["sent"] == 30000
    got = receiver.result(120)
    # The messages lost while X was dead are reported as gaps, and nothing arrives twice.
    assert got["duplicates"] == 0
    assert got["gaps"] > 0 and got["unique"] + got["gaps"] == 30000, got
    print(f"failover: traffic moved {moved_after:.2f} s after the router died; {got['gaps']} messages lost")


def test_a_router_back_after_a_crash_takes_its_cheaper_path_back_without_duplicates(routers, tools, make_domain):
    """X dies, traffic moves to Y; X starts again. Y forwards until it recalculates, backoff-interval
    after it hears the new X: the new X must not forward from its start meanwhile (it did, as a
    router that thought itself alone: every message twice until Y let go)."""
    lan1, lan2 = make_domain(), make_domain()
    x, y = parallel_pair(routers, lan1, lan2, "rb")
    source, receiver = paced_stream(tools, lan1, lan2, "back.topic", 40000, 2000)
    wait_for(lambda: sent_by(x, 1) > 2000, 20, message="traffic on the cheaper path")
    kill_router(x)
    wait_for(lambda: sent_by(y, 1) > 1000, 20, message="traffic moved to the other path")
    back = start(routers, endpoint_xml("D1", 1, lan1.config_path) + endpoint_xml("D2", 2, lan2.config_path, cost=2),
                 "rbz")
    back.wait_ready()
    wait_for(lambda: sent_by(back, 1) > 1000, 20, message="traffic back on the cheaper path")
    wait_for(lambda: counter(y, 0, "proxy_receivers") == 0, 20, message="Y no longer pulls the topic")
    left_by_y, before = sent_by(y, 1), sent_by(back, 1)
    wait_for(lambda: sent_by(back, 1) > before + 1000, 20, message="traffic goes on by the router that is back")
    assert sent_by(y, 1) == left_by_y, "one path only"
    assert source.result(120)["sent"] == 40000
    got = receiver.result(120)
    assert got["duplicates"] == 0 and got["unique"] + got["gaps"] == 40000, got
    wait_for(lambda: routerctl(y, "topology")["router_count"] == 2, 10, message="the dead router forgotten")


def test_parallel_paths_follow_a_reloaded_cost(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    x, y = parallel_pair(routers, lan1, lan2, "pc")
    source, receiver = paced_stream(tools, lan1, lan2, "reload.topic", 30000, 2000)
    wait_for(lambda: sent_by(x, 1) > 2000, 20, message="traffic on the cheaper path")
    x_pid = x.pid
    text = x.config.read_text()
    x.config.write_text(text.replace("<cost>2</cost>", "<cost>9</cost>"))
    reply = routerctl(x, "reload")
    assert reply["cost_only"] == ["D2"], reply
    wait_for(lambda: sent_by(y, 1) > 1000, 20, message="traffic moved to the now cheaper path")
    wait_for(lambda: counter(x, 0, "proxy_receivers") == 0, 20, message="X no longer pulls the topic")
    assert x.pid == x_pid and x.tool.proc.poll() is None, "no router restart"
    assert source.result(120)["sent"] == 30000
    got = receiver.result(120)
    assert got["duplicates"] == 0 and got["unique"] + got["gaps"] == 30000, got
    path = routerctl(y, "path", "1", "2")
    assert path["cost"] == 5 and [h["name"] for h in path["hops"] if h["kind"] == "router"] == [y.name], path


def peered_routers(routers, make_domain, names: str, links: list[tuple[str, str]], prefix: str):
    """One router per letter, each with its own domain (domain id = position + 1), and a peer
    link for each pair in `links` (the first of the pair connects, the second listens)."""
    domains = {name: make_domain() for name in names}
    portals = {name: endpoint_xml(f"D{i + 1}", i + 1, domains[name].config_path) for i, name in enumerate(names)}
    for left, right in links:
        port = free_port()
        portals[left] += peer_xml(f"TO_{right.upper()}", connect=port)
        portals[right] += peer_xml(f"TO_{left.upper()}", listen=port)
    started = {name: start(routers, portals[name], f"{prefix}{name}") for name in names}
    for router in started.values():
        router.wait_ready()
    wait_for(lambda: converged(list(started.values()), len(names)), 30, message="every router knows every other")
    return started, domains


def lbmr_sent(routers_) -> int:
    return sum(c["lbmr_packets_sent"] for r in routers_ for c in r.counters().values())


def every_receiver_exactly_once(tools, routers_, domains, names, topic):
    before, started = lbmr_sent(routers_), time.monotonic()
    got = send_across(tools, domains[names[0]], [domains[n] for n in names[1:]], topic, 10000, rate=5000)
    for result in got:
        assert (result["received"], result["gaps"], result["duplicates"]) == (10000, 0, 0), result
    per_second = (lbmr_sent(routers_) - before) / (time.monotonic() - started)
    # Bounded: route-info discovery, a few proxies' advertisements and queries, not a storm
    # (each endpoint announces itself 5 times a second at these fast timers).
    endpoints = len(names)
    print(f"{topic}: LBMR packets sent by all routers: {per_second:.1f}/s ({per_second / endpoints:.1f}/s per endpoint)")
    assert per_second < 40 * endpoints


def test_loop_of_three_routers(routers, tools, make_domain):
    started, domains = peered_routers(routers, make_domain, "abc", [("a", "b"), ("b", "c"), ("c", "a")], "lp")
    routers_ = list(started.values())
    every_receiver_exactly_once(tools, routers_, domains, "abc", "loop.topic")
    assert len(signatures(*routers_)) == 1


def test_mesh_of_four_routers(routers, tools, make_domain):
    links = [("a", "b"), ("a", "c"), ("a", "d"), ("b", "c"), ("b", "d"), ("c", "d")]
    started, domains = peered_routers(routers, make_domain, "abcd", links, "ms")
    routers_ = list(started.values())
    every_receiver_exactly_once(tools, routers_, domains, "abcd", "mesh.topic")
    assert len(signatures(*routers_)) == 1
    topology = routerctl(started["a"], "topology")
    assert topology["router_count"] == 4 and not topology["forbidden"]

    # Immediate messages flood the mesh, loops and all: every domain gets each once, and no portal
    # floods any message twice (a flood going round the loops would pass 300 within milliseconds).
    count = 300
    listeners = [tools.umrcv("-c", domains[n].config_path, "--json", "-C", count, "--timeout", 60, "--topicless")
                 for n in "bcd"]
    for listener in listeners:
        listener.wait_for_stderr("umrcv: subscribed", 30)
    sender = tools.umsrc("-c", domains["a"].config_path, "--json", "-M", count, "-P", 1000, "--topicless")
    assert sender.result(60)["sent"] == count
    for listener in listeners:
        got = listener.result(60)
        assert (got["received"], got["unique"], got["duplicates"]) == (count, count, 0), got
    flooded = [c["immediate_topicless_fragments_forwarded"] for r in routers_ for c in r.counters().values()]
    assert max(flooded) <= count and sum(flooded) >= count, flooded


def routerctl_text(router, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "router.cli.routerctl", "-n", router.name, *args],
                          capture_output=True, text=True, timeout=30)


def web(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_forbidden_two_peer_links_and_what_operators_see(routers, make_domain):
    """Two peer links between the same two routers: reported on both, by routerctl and the web
    monitor, whose topology and path-info pages show the real network."""
    lan1, lan2 = make_domain(), make_domain()
    first, second, web_port = free_port(), free_port(), free_port()
    a = routers.start(endpoint_xml("D1", 1, lan1.config_path) + peer_xml("ONE", connect=first, cost=2)
                      + peer_xml("TWO", connect=second, cost=5),
                      f"    <web-monitor>127.0.0.1:{web_port}</web-monitor>\n" + FAST_ROUTING, name="fba")
    b = start(routers, endpoint_xml("D2", 2, lan2.config_path, cost=3) + peer_xml("ONE", listen=first)
              + peer_xml("TWO", listen=second), "fbb")
    a.wait_ready(), b.wait_ready()
    wait_for(lambda: any("2 peer links" in f["message"] for f in routerctl(a, "topology")["forbidden"]), 20,
             message="the duplicate link reported")
    forbidden = routerctl(b, "topology")["forbidden"]
    assert [f["kind"] for f in forbidden] == ["two-peer-links"], forbidden
    assert "fba" in forbidden[0]["message"] and "fbb" in forbidden[0]["message"]
    wait_for(lambda: "forbidden topology" in a.log(), 10, message="the forbidden topology logged")
    wait_for(lambda: not routerctl(a, "topology")["pending_changes"], 10, message="routes recalculated")
    text = routerctl_text(a, "topology").stdout
    assert text.startswith("FORBIDDEN TOPOLOGY") and "fbb" in text and "ONE, TWO" in text, text

    # routerctl path: the cheaper of the two links, then B's D2 portal; an unknown domain is an error.
    path = routerctl(a, "path", "1", "2")
    assert path["cost"] == 2 + 3 and [h["portal"] for h in path["hops"] if h["kind"] == "router"][0] == "ONE"
    shown = routerctl_text(a, "path", "1", "2")
    assert shown.returncode == 0 and "total cost 5" in shown.stdout and "ONE" in shown.stdout
    missing = routerctl_text(a, "path", "1", "9")
    assert missing.returncode == 3 and "domain 9 is not in the topology map" in missing.stderr, missing.stderr

    # The web monitor shows the same network.
    status, page = web(web_port, "/topology")
    tree = lxml.html.fromstring(page)
    assert status == 200
    assert tree.xpath("//*[@class='forbidden']")[0].text_content().startswith("FORBIDDEN TOPOLOGY")
    assert "fbb" in tree.text_content() and routerctl(a, "topology")["signature"] in tree.text_content()
    status, page = web(web_port, "/path?from=1&to=2")
    tree = lxml.html.fromstring(page)
    assert {c.get("data-hop-cost"): int(c.text_content()) for c in tree.xpath("//*[@data-hop-cost]")} == \
        {"fba": 2, "fbb": 3}
    assert tree.xpath("//*[@data-path-cost='total']")[0].text_content() == "5"
    assert tree.xpath("//select[@name='from']/option[@selected]/@value") == ["1"]
    data = json.loads(web(web_port, "/json/path?from=1&to=2")[1])
    assert (data["error"], data["path"]["cost"]) == (None, 5)
    escaped = web(web_port, "/path?from=1&to=%3Cb%3E")[1]
    assert "<b>" not in escaped and "&lt;b&gt;" in escaped
    for page_path in ("/", "/portals", "/topology", "/path", "/portal/ONE", "/memory"):
        status, page = web(web_port, page_path)
        assert status == 200 and "/path" in lxml.html.fromstring(page).xpath("//nav/a/@href"), page_path
    # A peer portal's page: its link, UDP and routing sections, every counter a cell.
    tree = lxml.html.fromstring(web(web_port, "/portal/ONE")[1])
    assert {"Peer link", "UDP data path", "Routing", "Worker"} <= set(tree.xpath("//h2/text()"))
    assert int(tree.xpath("//*[@data-counter='link_connects']")[0].text_content()) >= 1
    assert not tree.xpath("//a[contains(@href, '/options/')]")          # no UM contexts to show


def test_forbidden_two_endpoints_of_one_router_on_one_domain(routers, make_domain):
    lan1 = make_domain()
    router = start(routers, endpoint_xml("ONE", 1, lan1.config_path) + endpoint_xml("TWO", 2, lan1.config_path),
                   "fbe")
    assert router.tool.proc.wait(30) == 2, "a configuration error"
    assert "only one endpoint" in router.log() or "one domain" in router.log(), router.log()


def test_forbidden_two_domain_ids_for_one_domain(routers, make_domain):
    shared, lan2, lan3 = make_domain(), make_domain(), make_domain()
    a = start(routers, endpoint_xml("S", 1, shared.config_path) + endpoint_xml("D2", 2, lan2.config_path), "fda")
    b = start(routers, endpoint_xml("S", 7, shared.config_path) + endpoint_xml("D3", 3, lan3.config_path), "fdb")
    a.wait_ready(), b.wait_ready()
    wait_for(lambda: any(f["kind"] == "two-domain-ids-for-one-domain" for f in routerctl(a, "topology")["forbidden"]),
             20, message="two domain ids reported")
    message = next(f["message"] for f in routerctl(a, "topology")["forbidden"]
                   if f["kind"] == "two-domain-ids-for-one-domain")
    assert "1" in message and "7" in message, message
    wait_for(lambda: "two domain ids" in b.log(), 10, message="logged on the other router too")


def test_peer_link_cut_by_a_stopped_router_recovers(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    a, b = linked_pair(routers, lan1, lan2, "st")
    source, receiver = paced_stream(tools, lan1, lan2, "stopped.topic", 24000, 2000)
    wait_for(lambda: counter(a, 1, "data_fragments_sent") > 1000, 20, message="traffic over the link")
    pids = [b.pid, *b.worker_pids().values()]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        # Keepalive timeout 800 ms: A drops the link and counts what it could not send.
        wait_for(lambda: counter(a, 1, "link_disconnects") >= 1, 10, message="keepalive noticed the silence")
        wait_for(lambda: counter(a, 1, "data_fragments_dropped_not_operational") > 0, 10,
                 message="data for the down link counted")
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    wait_for(lambda: counter(a, 1, "link_connects") >= 2, 20, message="the link re-established")
    delivered = counter(b, 1, "transport_topic_fragments_sent")
    wait_for(lambda: counter(b, 1, "transport_topic_fragments_sent") > delivered + 1000, 20,
             message="traffic resumed")
    assert source.result(120)["sent"] == 24000
    got = receiver.result(120)
    assert got["duplicates"] == 0 and got["unique"] + got["gaps"] == 24000 and got["gaps"] > 0, got
    assert a.tool.proc.poll() is None and b.tool.proc.poll() is None, "nothing crashed"
    assert "Traceback" not in a.log() + b.log()


def test_a_peer_link_says_when_its_queue_fills_and_drains(routers, tools, make_domain):
    """Router B's peer worker stops reading: once the sockets' buffers are full, A's peer portal
    queues (up to <max-queue>, dropping beyond) and says it began enqueueing; when B reads again
    the queue drains and A says so."""
    lan1, lan2 = make_domain(), make_domain()
    port = free_port()
    patient = '<gateway-keepalive interval="1000" timeout="30000"/>'    # the link stays up while B is stopped
    a = start(routers, endpoint_xml("LAN1", 1, lan1.config_path)
              + peer_xml("TO_B", connect=port, keepalive=patient), "qea")
    b = start(routers, peer_xml("TO_A", listen=port, keepalive=patient)
              + endpoint_xml("LAN2", 2, lan2.config_path), "qeb")
    a.wait_ready(), b.wait_ready()
    wait_for(lambda: converged([a, b], 2), 20, message="both routers know both")
    count = 16_000              # 4 s at 4 MB/s: well past what the loopback sockets' buffers hold
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "--timeout", 120, "--idle-timeout", 2, "queued.topic")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-l", 1000, "-P", 4000, "--start-on-stdin",
                         "queued.topic")
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    wait_for(lambda: counter(a, 1, "data_fragments_sent") > 1000, 20, message="traffic over the link")
    peer_worker = b.worker_pids()["0"]
    os.kill(peer_worker, signal.SIGSTOP)
    try:
        wait_for(lambda: "UMR-3001-7: portal TO_B: began enqueueing" in a.log(), 30,
                 message="A's peer portal queues for the stopped companion")
    finally:
        os.kill(peer_worker, signal.SIGCONT)
    wait_for(lambda: "UMR-3001-8: portal TO_B: queue flushed after" in a.log(), 30,
             message="the queue drains once B reads again")
    assert source.result(120)["sent"] == count
    assert counter(a, 1, "link_disconnects") == 0, "the link stayed up"


def dual_peer_xml(name: str, listen: int, companion: int) -> str:
    return (f"    <peer>\n      <name>{name}</name>\n      <tcp><listen-port>{listen}</listen-port><nodelay/>"
            f'<companion reconnect-interval="200"><address>127.0.0.1</address><port>{companion}</port></companion>'
            f'</tcp>\n      <gateway-keepalive interval="200" timeout="800"/>\n    </peer>\n')


def test_dual_tcp_peer_link_from_the_seed(routers, tools, make_domain):
    """The eliminated <tcp>/<companion> form still links two routers: one connection each way."""
    lan1, lan2 = make_domain(), make_domain()
    port_a, port_b = free_port(), free_port()
    a = start(routers, endpoint_xml("LAN1", 1, lan1.config_path) + dual_peer_xml("TO_B", port_a, port_b), "dua")
    b = start(routers, dual_peer_xml("TO_A", port_b, port_a) + endpoint_xml("LAN2", 2, lan2.config_path), "dub")
    a.wait_ready(), b.wait_ready()
    a.wait_for_log("eliminated")
    wait_for(lambda: converged([a, b], 2), 20, message="both routers know both")
    [got] = send_across(tools, lan1, [lan2], "dual.topic", 5000, rate=10000)
    assert (got["received"], got["gaps"], got["duplicates"]) == (5000, 0, 0), got
