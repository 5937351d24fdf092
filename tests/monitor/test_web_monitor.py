"""The web monitor in headless Chromium: pages render, links work, figures match `routerctl stats`."""
import json
import socket
import urllib.error
import urllib.request

import lxml.html
import pytest
from prometheus_client.parser import text_string_to_metric_families

from router.monitor.http_loop import MAX_CONNECTIONS
from tests.support.chromium import render
from tests.support.processes import wait_for
from tests.support.routerctl import cross_traffic, routerctl, two_lan_router
from tests.support.routers import free_port

pytestmark = pytest.mark.integration

COUNT, LENGTH = 2000, 80
# The workers' pids and clock readings: status shows them; they are no statistics.
INTERNAL = {"heartbeat_ns", "worker_pid", "worker_started_ns"}
PAGES = {"main": "/", "portals": "/portals", "portal-LAN1": "/portal/LAN1", "portal-LAN2": "/portal/LAN2",
         "topology": "/topology", "config": "/config", "options-LAN1": "/portal/LAN1/options/receive-context",
         "memory": "/memory"}


def fetch(url: str, method: str = "GET") -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def counter_cells(dom: str) -> dict[str, int]:
    tree = lxml.html.fromstring(dom)
    return {element.get("data-counter"): int(element.text_content()) for element in tree.xpath("//*[@data-counter]")}


def test_pages_render_links_work_and_figures_match_the_counters(runtime_dir, routers, tools, make_domain, tmp_path):
    lan1, lan2 = make_domain(), make_domain()
    port = free_port()
    router = two_lan_router(routers, lan1, lan2, costs=(2, 5),
                            daemon_extra=f"    <web-monitor>127.0.0.1:{port}</web-monitor>\n")
    base = f"http://127.0.0.1:{port}"
    # A source that stays (one message, then open for minutes) keeps a proxy source to look at.
    watcher = tools.umrcv("-c", lan2.config_path, "--json", "--timeout", 120, "watched.topic")
    tools.umsrc("-c", lan1.config_path, "-M", 1, "-l", LENGTH, "-W", 1, "-L", 300, "watched.topic")
    wait_for(lambda: router.counters()[1]["transport_topic_fragments_sent"] == 1, 30, message="watched.topic flows")
    cross_traffic(tools, lan1, lan2, "web.topic", COUNT, LENGTH)
    # The finished receiver's leave takes web.topic out of the topic map: let it settle first.
    wait_for(lambda: list(routerctl("--json", "topics").json()["interest"]["topics"]) == ["watched.topic"], 30,
             interval=0.3, message="topic map settled on watched.topic")

    stats_before = routerctl("--json", "stats").json()["portals"]
    rendered = {name: render(base + path, tmp_path / "screens" / f"{name}.png", tmp_path / "chromium")
                for name, path in PAGES.items()}
    stats = routerctl("--json", "stats").json()["portals"]
    topics = routerctl("--json", "topics").json()
    portals = {p["name"]: p for p in routerctl("--json", "portals").json()["portals"]}

    for name, page in rendered.items():
        where = f"page {page.url}, screenshot {page.screenshot}"
        assert page.screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", where
        assert page.screenshot.stat().st_size > 5000, f"blank screenshot? {where}"
        assert router.name in page.dom and "<h1>" in page.dom and "<nav>" in page.dom, where

    main = counter_cells(rendered["main"].dom)
    assert main["topic_map_topics"] == len(topics["interest"]["topics"]) >= 1, rendered["main"].screenshot
    assert main["unknown_fragments"] == sum(p["counters"]["transport_topic_fragments_rcvd_unknown"]
                                            for p in stats.values())
    index_of = {"LAN1": 0, "LAN2": 1}
    for portal in ("LAN1", "LAN2"):
        page = rendered[f"portal-{portal}"]
        cells = counter_cells(page.dom)
        assert cells.pop("cost") == portals[portal]["cost"], page.screenshot
        stable = {k for k, v in stats[portal]["counters"].items() if stats_before[portal]["counters"][k] == v}
        checked = {k: v for k, v in cells.items() if k in stable}
        expected = {k: stats[portal]["counters"][k] for k in checked}
        assert checked == expected, f"{page.url} differs from routerctl stats; screenshot {page.screenshot}"
        assert len(checked) >= 20, f"{sorted(cells)} ({page.screenshot})"
        # Every counter the portal moved is on its page (none kept where only Parquet sees it).
        moved = {k for k, v in router.counters()[index_of[portal]].items() if v and k not in INTERNAL}
        assert moved <= set(cells) | {"cost"}, f"not on {page.url}: {sorted(moved - set(cells))}"
    assert counter_cells(rendered["portal-LAN1"].dom)["transport_topic_fragments_rcvd"] == COUNT + 1
    # Whole frames: payload and LBMC header.
    assert counter_cells(rendered["portal-LAN2"].dom)["transport_topic_fragment_bytes_sent"] == (COUNT + 1) * (LENGTH + 12)
    assert "watched.topic" in rendered["portal-LAN2"].dom      # the proxy source list
    assert "&lt;tnw-gateway" in rendered["config"].dom and f"127.0.0.1:{port}" in rendered["config"].dom
    # The receive context's options: the domain's resolver port, from the line of lan1's file that sets it.
    options = {row.get("data-option"): [cell.text_content() for cell in row.xpath("td")]
               for row in lxml.html.fromstring(rendered["options-LAN1"].dom).xpath("//tr[@data-option]")}
    line = lan1.config_path.read_text().splitlines().index(f"context resolver_multicast_port {lan1.port}") + 1
    assert options["resolver_multicast_port"] == [
        "resolver_multicast_port", str(lan1.port), "12965", f"{lan1.config_path}:{line}"], options
    assert options["resolver_datagram_max_size"][1:] == [options["resolver_datagram_max_size"][2]] * 2 + ["default"]

    # Memory: the supervisor and both workers, by pid, as routerctl status has them.
    memory_rows = {int(row.get("data-pid")): {cell.get("data-field"): float(cell.text_content())
                                              for cell in row.xpath("td[@data-field]")}
                   for row in lxml.html.fromstring(rendered["memory"].dom).xpath("//tr[@data-pid]")}
    status = routerctl("--json", "status").json()
    assert set(memory_rows) == {router.pid, *(p["pid"] for p in status["portals"])}
    for pid, row in memory_rows.items():
        assert row["rss_bytes"] >= row["private_bytes"] > 1 and row["rss_peak_bytes"] >= row["rss_bytes"] - 1, row
    assert status["rss_bytes"] > 10 * 2**20 and all(p["private_bytes"] > 2**20 for p in status["portals"]), status

    links = set()
    for page in rendered.values():
        links |= set(lxml.html.fromstring(page.dom).xpath("//a/@href"))
    assert {"/", "/portals", "/portal/LAN1", "/portal/LAN2", "/topology", "/memory", "/config", "/metrics"} <= links
    for href in sorted(links):
        status, _, _ = fetch(base + href)
        assert status == 200, href

    assert {"/portal/LAN1/options/source-context", "/portal/LAN1/options/wildcard-receiver"} <= links
    for path in ("/json/main", "/json/portals", "/json/portal/LAN1", "/json/topology", "/json/config", "/json/memory",
                 "/json/portal/LAN2/options/source"):
        status, content_type, body = fetch(base + path)
        assert (status, content_type) == (200, "application/json"), path
        json.loads(body)
    portal_json = json.loads(fetch(base + "/json/portal/LAN2")[2])
    assert portal_json["counters"]["transport_topic_fragments_sent"] == stats["LAN2"]["counters"][
        "transport_topic_fragments_sent"] == COUNT + 1

    status, content_type, body = fetch(base + "/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    samples = {(s.name, s.labels.get("portal")): s.value
               for family in text_string_to_metric_families(body.decode()) for s in family.samples}
    for portal in ("LAN1", "LAN2"):
        for counter in ("transport_topic_fragments_rcvd", "transport_topic_fragment_bytes_sent"):
            assert samples[(f"umrouter_{counter}_total", portal)] == stats[portal]["counters"][counter]
        assert samples[("umrouter_portal_up", portal)] == 1 and samples[("umrouter_portal_crash_loop", portal)] == 0
    assert samples[("umrouter_proxy_sources", "LAN2")] >= 1
    resident = {labels["process"] + ":" + labels["portals"]: s.value
                for family in text_string_to_metric_families(body.decode()) for s in family.samples
                if s.name == "umrouter_process_resident_bytes" for labels in [s.labels]}
    assert set(resident) == {"supervisor:", "worker:LAN1", "worker:LAN2"} and min(resident.values()) > 2**20, resident

    assert fetch(base + "/portal/LAN9")[0] == 404
    assert fetch(base + "/portal/LAN1/options/nothing")[0] == fetch(base + "/portal/LAN9/options/source")[0] == 404
    assert fetch(base + "/", method="POST")[0] == 405            # read-only
    watcher.stop()


def test_slow_clients_do_not_block_and_the_server_listens_where_configured(runtime_dir, routers, make_domain):
    port = free_port()
    two_lan_router(routers, make_domain(), make_domain(),
                   daemon_extra=f"    <web-monitor>127.0.0.1:{port}</web-monitor>\n")
    silent = socket.create_connection(("127.0.0.1", port))
    silent.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")           # never finishes its request
    try:
        status, _, body = fetch(f"http://127.0.0.1:{port}/json/main")
        assert status == 200 and json.loads(body)["topic_map"] == {"topics": 0, "pcre_patterns": 0,
                                                                   "regex_patterns": 0}
        assert routerctl("status").code == 0                    # the supervisor's loop is not held up
        with socket.create_connection(("127.0.0.1", port)) as big:
            big.sendall(b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n")
            assert big.recv(100).startswith(b"HTTP/1.1 431")
    finally:
        silent.close()
    with pytest.raises(OSError):                                # bound to 127.0.0.1 only
        socket.create_connection(("127.0.0.2", port), timeout=2).close()


def test_connections_that_never_finish_a_request_do_not_lock_other_clients_out(runtime_dir, routers, make_domain):
    """A client that opens connections and sends nothing more (a leaking scraper, a slowloris)
    holds every connection slot for the idle timeout, over and over: /metrics must still answer."""
    port = free_port()
    two_lan_router(routers, make_domain(), make_domain(),
                   daemon_extra=f"    <web-monitor>127.0.0.1:{port}</web-monitor>\n")
    silent = []
    try:
        for _ in range(MAX_CONNECTIONS + 8):
            connection = socket.create_connection(("127.0.0.1", port))
            connection.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")     # never finishes its request
            silent.append(connection)
        for _ in range(3):
            status, content_type, body = fetch(f"http://127.0.0.1:{port}/metrics")
            assert status == 200 and b"umrouter_portal_up" in body, (status, body[:200])
    finally:
        for connection in silent:
            connection.close()


def test_star_means_every_interface(runtime_dir, routers, make_domain):
    port = free_port()
    two_lan_router(routers, make_domain(), make_domain(), daemon_extra=f"    <web-monitor>*:{port}</web-monitor>\n")
    assert fetch(f"http://127.0.0.2:{port}/")[0] == 200


def test_an_interface_name_or_network_listens_on_that_interfaces_address(runtime_dir, routers, make_domain):
    """<web-monitor> names its interface as UM options do: 'lo:PORT' and '127.0.0.0/8:PORT' are
    this host's loopback address (they were handed to bind as host names, and the monitor never
    started)."""
    by_name, by_network = free_port(), free_port()
    two_lan_router(routers, make_domain(), make_domain(), daemon_extra=f"    <web-monitor>lo:{by_name}</web-monitor>\n")
    two_lan_router(routers, make_domain(), make_domain(),
                   daemon_extra=f"    <web-monitor>127.0.0.0/8:{by_network}</web-monitor>\n")
    assert fetch(f"http://127.0.0.1:{by_name}/")[0] == 200
    assert fetch(f"http://127.0.0.1:{by_network}/")[0] == 200
