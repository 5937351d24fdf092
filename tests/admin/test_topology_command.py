"""routerctl topology and routerctl path over a real routing map (two routers, three domains)."""
import json

import pytest

from router.admin.commands import commands
from router.admin.dispatch import dispatch
from router.admin.protocol import Errno, decode_reply, encode_request
from router.routing.topology import TWO_PEER_LINKS
from tests.admin.fake_supervisor import OTHER_ID, FakeSupervisor

NEW_KEYS = {"signature", "map_version", "forbidden", "recalculations", "last_recalculation_age_s", "last_changes",
            "pending_changes", "paths", "routing_counters"}


def call(supervisor, command, props=None) -> dict:
    replies: list[dict] = []
    dispatch(supervisor, encode_request(1, command, props), lambda raw: replies.append(decode_reply(raw)))
    assert len(replies) == 1, replies
    return replies[0]


def test_the_reply_keeps_its_keys_and_adds_the_routing_map():
    reply = call(FakeSupervisor(), "topology")
    assert reply["status"] == "ok", reply
    data = reply["data"]
    assert {"router", "node_id", "version", "portals", "domains", "other_routers", "router_count",
            "domain_count"} | NEW_KEYS <= set(data)
    assert (data["router"], data["node_id"], data["router_count"], data["domain_count"]) == ("fake", 0x1234, 2, 3)
    assert data["domains"] == [1, 2, 3]
    portals = {p["name"]: p for p in data["portals"]}
    assert (portals["LAN1"]["adjacent_domain_id"], portals["LAN2"]["adjacent_domain_id"]) == (1, 2)
    assert portals["PEER1"]["adjacent_node_id"] == OTHER_ID and "adjacent_domain_id" not in portals["PEER1"]
    [other] = data["other_routers"]
    assert (other["router"], other["node_id"]) == ("other", OTHER_ID)
    assert {"version", "portals", "last_heard_age_ms", "signature"} <= set(other)
    assert sorted((p["kind"], p.get("adjacent_domain_id", p.get("adjacent_node_id")), p["cost"])
                  for p in other["portals"]) == [("endpoint", 3, 5), ("peer", 0x1234, 4)]
    assert data["signature"].startswith("0x") and data["map_version"] >= 1 and data["recalculations"] >= 1
    assert isinstance(data["last_recalculation_ms"], float) and data["last_recalculation_ms"] >= 0
    assert data["forbidden"] == [] and data["converged"] is True
    assert data["routing_counters"]["route_info_rcvd"] == 1
    [path] = [p for p in data["paths"] if (p["from"], p["to"]) == (1, 3)]
    assert path["cost"] == 2 + 5                               # fake's PEER1, then other's domain-3 portal
    assert [h["name"] for h in path["hops"] if h["kind"] == "router"] == ["fake", "other"]
    assert [(h["kind"], h["node"]) for h in path["hops"]][::3] == [("domain", 1), ("domain", 3)]
    json.dumps(data)                                           # what --json prints


def test_a_peer_portal_whose_link_is_down_names_no_router():
    supervisor = FakeSupervisor()
    supervisor.routing.set_adjacency("PEER1", None)
    portals = {p["name"]: p for p in call(supervisor, "topology")["data"]["portals"]}
    assert portals["PEER1"]["adjacent_node_id"] is None


def test_render_prints_routers_paths_and_convergence():
    command = commands()["topology"]
    text = command.render(call(FakeSupervisor(), "topology")["data"])
    assert "topology signature 0x" in text and "node id 0x0000000000001234" in text
    for header in ("NAME", "NODE ID", "VERSION", "SIGNATURE", "HEARD", "ADJACENCIES", "ROUTE"):
        assert header in text, text
    assert "D1[1] D2[3] R:other[2]" in text and "D3[5] R:fake[4]" in text
    assert "router other (0xb0b)" in text                     # PEER1's adjacency
    assert "domain 1 -> fake [2 via PEER1] -> other [5] -> domain 3 (cost 7, 2 routers)" in text
    assert "converged: yes" in text and "FORBIDDEN" not in text


def test_a_forbidden_topology_is_reported_first_and_breaks_convergence():
    supervisor = FakeSupervisor()
    supervisor.add_second_peer_link()
    data = call(supervisor, "topology")["data"]
    [forbidden] = data["forbidden"]
    assert forbidden["kind"] == TWO_PEER_LINKS and sorted(forbidden["routers"]) == [OTHER_ID, 0x1234]
    text = commands()["topology"].render(data)
    assert text.startswith("FORBIDDEN TOPOLOGY: routers fake"), text
    assert "PEER1, PEER2" in text.splitlines()[0]
    assert "converged: no" in text                              # our map changed, other's did not


def test_path_lists_the_hops_and_their_costs():
    command = commands()["path"]
    reply = call(FakeSupervisor(), "path", {"from": "1", "to": "3"})
    assert reply["status"] == "ok", reply
    data = reply["data"]
    assert (data["from"], data["to"], data["cost"]) == (1, 3, 7)
    text = command.render(data)
    assert "path from domain 1 to domain 3: total cost 7, 2 router(s)" in text
    lines = text.splitlines()
    fake_line = next(line for line in lines if "router fake" in line)
    other_line = next(line for line in lines if "router other" in line)
    assert fake_line.split()[-2:] == ["2", "PEER1"] and other_line.split()[-2:] == ["5", "-"]


@pytest.mark.parametrize("source, destination, words", [
    ("1", "4", "domain 4 is unreachable from domain 1"),
    ("1", "9", "domain 9 is not in the topology map (known domains: 1, 2, 3, 4)"),
    ("one", "3", "'one' is not a domain id"),
])
def test_path_errors_say_why_there_is_none(source, destination, words):
    supervisor = FakeSupervisor()
    supervisor.hear_island()
    reply = call(supervisor, "path", {"from": source, "to": destination})
    assert (reply["status"], reply["errno"]) == ("error", Errno.INVALID_PROPERTY), reply
    assert words in reply["reason"], reply["reason"]


def test_path_needs_both_domains():
    reply = call(FakeSupervisor(), "path", {"from": "1"})
    assert reply["errno"] == Errno.INVALID_PROPERTY and "'to'" in reply["reason"]


def test_without_a_routing_map_the_reply_keeps_its_shape():
    supervisor = FakeSupervisor()
    del supervisor.routing
    data = call(supervisor, "topology")["data"]
    assert NEW_KEYS <= set(data) and data["paths"] == [] and data["signature"] is None
    assert [p.get("adjacent_domain_id", p.get("adjacent_node_id")) for p in data["portals"]] == [1, 2, None]
    assert "converged: yes" in commands()["topology"].render(data)
    assert "keeps no routing map" in call(supervisor, "path", {"from": "1", "to": "2"})["reason"]
