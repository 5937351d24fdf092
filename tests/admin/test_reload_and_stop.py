"""`routerctl reload` changes only what the file changed; `routerctl stop` leaves nothing behind."""
import os
import shutil

import pytest

from tests.support.processes import wait_for
from tests.support.routerctl import routerctl, two_lan_router
from tests.support.tshark import LiveCapture, assert_no_expert_info, decode

pytestmark = pytest.mark.integration

TOPIC = "costly.topic"


def set_portal_text(router, portal: str, old: str, new: str) -> None:
    """Edit one portal's block of the router's configuration file."""
    text = router.config.read_text()
    start = text.index(f"<name>{portal}</name>")
    end = text.index("</endpoint>", start)
    block = text[start:end]
    assert old in block, block
    router.config.write_text(text[:start] + block.replace(old, new) + text[end:])


def worker_pids() -> dict[str, int]:
    return {p["name"]: p["pid"] for p in routerctl("--json", "status").json()["portals"]}


def proxy_costs(portal: str) -> set[int]:
    answer = routerctl("--json", "topics", portal).json()["portals"][portal] or {}
    return {s["cost"] for s in answer.get("proxy_sources", []) if s["topic"] == TOPIC}


def test_cost_reload_readvertises_without_restarts_then_stop_cleans_up(runtime_dir, routers, tools, make_domain,
                                                                       tmp_path):
    lan1, lan2 = make_domain(), make_domain()
    router = two_lan_router(routers, lan1, lan2)
    first = tools.umrcv("-c", lan2.config_path, "--json", "--timeout", 120, TOPIC)
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", 1_000_000, "-P", 20, "-W", 1, TOPIC)
    first.wait_for_stderr("Beginning of Transport Session", 30)
    pids = worker_pids()
    assert proxy_costs("LAN2") == {1}

    pcap = tmp_path / "lan2.pcapng"
    with LiveCapture(capture_filter=f"udp port {lan2.port}", path=pcap):
        # A second receiver's query is answered with the proxy's TIR at the old cost.
        second = tools.umrcv("-c", lan2.config_path, "--json", "--timeout", 120, TOPIC)
        second.wait_for_stderr("Beginning of Transport Session", 30)
        set_portal_text(router, "LAN2", "<cost>1</cost>", "<cost>9</cost>")
        reply = routerctl("--json", "reload").json()
        assert (reply["changed"], reply["cost_only"], reply["kept"], reply["added"], reply["removed"]) == \
            (["LAN2"], ["LAN2"], ["LAN1"], [], [])
        # The worker re-advertises before it answers this query (the bus keeps the order).
        wait_for(lambda: proxy_costs("LAN2") == {9}, 10, interval=0.2, message="proxy source at cost 9")
    assert worker_pids() == pids, "a cost change restarts no worker"

    decode_as = [f"udp.port=={lan2.port},lbmr"]
    assert_no_expert_info(pcap, decode_as)
    frames = decode(pcap, decode_as, fields=["lbmr.tir.name", "lbmr.topt.cost.cost"])
    costs = [cost for f in frames if TOPIC in f.get("lbmr.tir.name", []) for cost in f.get("lbmr.topt.cost.cost", [])]
    assert "1" in costs and "9" in costs, f"advertised costs {costs} (capture {pcap})"
    assert "1" not in costs[costs.index("9"):], f"old cost advertised after the reload: {costs} (capture {pcap})"

    # Another change to LAN2 (its lbm-config file) restarts LAN2 only.
    moved = tmp_path / "lan2-moved.cfg"
    shutil.copy(lan2.config_path, moved)
    set_portal_text(router, "LAN2", str(lan2.config_path), str(moved))
    reply = routerctl("--json", "reload").json()
    assert (reply["changed"], reply["cost_only"], reply["kept"]) == (["LAN2"], [], ["LAN1"])
    wait_for(lambda: (lambda p: p["LAN2"] not in (None, pids["LAN2"]))(worker_pids()), 20, interval=0.2,
             message="LAN2 restarted")
    assert worker_pids()["LAN1"] == pids["LAN1"]

    # A <daemon> edit is the router's own setting, set up at start: reported as pending, applied
    # at the next start, no portal restarted (and said again by the next reload, still pending).
    pids = worker_pids()
    router.config.write_text(router.config.read_text().replace(
        "  </daemon>", "    <worker-scheduling>normal</worker-scheduling>\n  </daemon>"))
    reply = routerctl("--json", "reload").json()
    assert (reply["daemon_pending"], reply["changed"], reply["kept"]) == (["worker-scheduling"], [], ["LAN1", "LAN2"])
    text = routerctl("reload")
    assert text.code == 0 and "<daemon> changes take effect when the router restarts: worker-scheduling" in \
        text.stdout, text.explain()
    assert worker_pids() == pids
    router.wait_for_log("take effect when the router restarts: worker-scheduling")

    source.stop()
    assert routerctl("--json", "stop").json() == {"stopping": True, "pid": router.pid}
    router.tool.proc.wait(30)
    assert router.tool.proc.returncode == 0, router.log()
    assert router.segments() == []
    assert os.listdir(runtime_dir) == [], "admin socket and bus sockets are removed"
    assert routerctl("status").code == 1
