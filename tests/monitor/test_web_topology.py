"""The topology and path-info pages, served on a real loop over a real routing map (no router processes).

The supervisor stand-in is the admin tests' (two routers, three domains); pages are fetched from
another thread while the test's thread runs the loop, as the supervisor's loop serves them.
"""
import json
import threading
import urllib.error
import urllib.request

import lxml.html
import pytest

from router.admin.commands import commands
from router.monitor.web import WebMonitor
from router.um.loop import EventLoop
from tests.admin.fake_supervisor import FakeSupervisor


@pytest.fixture
def served():
    supervisor = FakeSupervisor()
    supervisor.loop = EventLoop("web-test")
    monitor = WebMonitor(supervisor, "127.0.0.1", 0)
    yield supervisor, f"http://127.0.0.1:{monitor.address[1]}"
    monitor.close()
    supervisor.loop.close()


def fetch(supervisor, url: str) -> tuple[int, str, str]:
    """GET `url` from a thread while this thread runs the supervisor's loop."""
    result: list = []

    def get() -> None:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                result.append((response.status, response.headers["Content-Type"], response.read().decode()))
        except urllib.error.HTTPError as err:
            result.append((err.code, err.headers["Content-Type"], err.read().decode()))
        except Exception as err:                  # noqa: BLE001 - reported by the assertion below
            result.append((None, None, repr(err)))
    thread = threading.Thread(target=get)
    thread.start()
    assert supervisor.loop.run_until(lambda: bool(result), 15), f"no answer from {url}"
    thread.join()
    return result[0]


def text_of(page: str) -> str:
    return lxml.html.fromstring(page).text_content()


def test_the_topology_page_shows_what_routerctl_topology_shows(served):
    supervisor, base = served
    status, content_type, page = fetch(supervisor, base + "/topology")
    assert (status, content_type) == (200, "text/html; charset=utf-8")
    reply = commands()["topology"].execute(supervisor, {})
    text = text_of(page)
    assert reply["signature"] in text and reply["announced_signature"] in text
    assert "D1[1] D2[3] R:other[2]" in text and "D3[5] R:fake[4]" in text
    assert "router other (0xb0b)" in text
    for path in reply["paths"]:
        assert path["text"] in text
    tree = lxml.html.fromstring(page)
    assert tree.xpath("//*[@data-converged]/@data-converged") == ["true"]
    assert "/path?from=1&to=3" in tree.xpath("//a/@href")
    assert not tree.xpath("//*[@class='forbidden']")
    data = json.loads(fetch(supervisor, base + "/json/topology")[2])
    assert data["router_count"] == 2 and data["domains"] == [1, 2, 3] and data["forbidden"] == []


def test_a_forbidden_topology_is_on_the_topology_page(served):
    supervisor, base = served
    supervisor.add_second_peer_link()
    tree = lxml.html.fromstring(fetch(supervisor, base + "/topology")[2])
    [warning] = tree.xpath("//*[@class='forbidden']")
    assert warning.text_content().startswith("FORBIDDEN TOPOLOGY: routers fake")
    assert "PEER1, PEER2" in warning.text_content()
    assert tree.xpath("//*[@data-converged]/@data-converged") == ["false"]


def test_the_path_page_lists_the_hops_and_their_costs(served):
    supervisor, base = served
    status, _, page = fetch(supervisor, base + "/path?from=1&to=3")
    assert status == 200
    tree = lxml.html.fromstring(page)
    assert {c.get("data-hop-cost"): int(c.text_content()) for c in tree.xpath("//*[@data-hop-cost]")} == \
        {"fake": 2, "other": 5}
    assert tree.xpath("//*[@data-path-cost='total']")[0].text_content() == "7"
    assert "PEER1" in text_of(page)
    # The form offers the map's domains, the asked-for pair selected.
    assert tree.xpath("//select[@name='from']/option/@value") == ["1", "2", "3"]
    assert tree.xpath("//select[@name='from']/option[@selected]/@value") == ["1"]
    assert tree.xpath("//select[@name='to']/option[@selected]/@value") == ["3"]
    data = json.loads(fetch(supervisor, base + "/json/path?from=1&to=3")[2])
    assert (data["error"], data["path"]["cost"]) == (None, 7)
    assert [h["name"] for h in data["path"]["hops"] if h["kind"] == "router"] == ["fake", "other"]


def test_the_path_page_says_why_there_is_no_path(served):
    supervisor, base = served
    supervisor.hear_island()
    tree = lxml.html.fromstring(fetch(supervisor, base + "/path?from=1&to=4")[2])
    assert "domain 4 is unreachable from domain 1" in tree.xpath("//*[@class='error']")[0].text_content()
    assert not tree.xpath("//*[@data-hop-cost]")
    escaped = fetch(supervisor, base + "/path?from=1&to=%3Cb%3E")[2]
    assert "<b>" not in escaped and "&lt;b&gt;" in escaped
    form_only = lxml.html.fromstring(fetch(supervisor, base + "/path")[2])
    assert not form_only.xpath("//*[@class='error']") and form_only.xpath("//form[@action='/path']")
    assert json.loads(fetch(supervisor, base + "/json/path?from=9&to=1")[2])["error"].startswith("domain 9")


def test_every_page_links_to_path_info(served):
    supervisor, base = served
    for path in ("/", "/portals", "/topology", "/path"):
        status, _, page = fetch(supervisor, base + path)
        assert status == 200, path
        assert "/path" in lxml.html.fromstring(page).xpath("//nav/a/@href"), path
