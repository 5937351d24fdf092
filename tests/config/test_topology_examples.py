"""The example routing topologies of conf/topologies/: every file loads, every peer link has both
ends, every domain has one id and one resolver group, and each directory has the shape it is named
after (spec/dro.md §2.5). Pure configuration checks; nothing is started."""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from router.config import EndpointConfig, GatewayConfig, load_gateway_config
from router.um.config import load_file

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
TOPOLOGIES = CONF / "topologies"
README = TOPOLOGIES / "README.md"
NAMED = {"peer-link", "transit-domain", "parallel", "hotlinks", "hotlinks-peer", "loop",
         "star-central-domain", "star-central-router", "mesh"}
PEER_PORTS = range(15400, 15500)

DIRECTORIES = sorted(p for p in TOPOLOGIES.iterdir() if p.is_dir())
TOPOLOGY_FILES = sorted(TOPOLOGIES.rglob("*.xml"))
ALL_EXAMPLES = sorted(CONF.glob("*.xml")) + TOPOLOGY_FILES


def _id(path: Path) -> str:
    return str(path.relative_to(CONF))


@dataclass
class Topology:
    """The routers of one directory, keyed by file stem, and what joins them."""
    routers: dict[str, GatewayConfig]
    links: list[frozenset[str]] = field(default_factory=list)   # one entry per peer link

    @classmethod
    def load(cls, directory: Path) -> "Topology":
        topology = cls({p.stem: load_gateway_config(p) for p in sorted(directory.glob("*.xml"))})
        acceptors = {peer.link.acceptor.listen_port: name for name, config in topology.routers.items()
                     for peer in config.peers if peer.link.acceptor}
        for name, config in topology.routers.items():
            for peer in config.peers:
                if peer.link.initiator and peer.link.initiator.port in acceptors:
                    topology.links.append(frozenset({name, acceptors[peer.link.initiator.port]}))
        return topology

    def endpoints(self, router: str) -> list[EndpointConfig]:
        return self.routers[router].endpoints

    def domains(self) -> dict[int, set[str]]:
        """Domain id -> routers with an endpoint on it."""
        result: dict[int, set[str]] = {}
        for name in self.routers:
            for endpoint in self.endpoints(name):
                result.setdefault(endpoint.domain_id, set()).add(name)
        return result

    def degree(self, router: str) -> int:
        return sum(router in link for link in self.links)

    def connected(self) -> bool:
        """Routers reachable from one another over peer links or shared domains."""
        edges = [set(link) for link in self.links] + list(self.domains().values())
        reached, frontier = set(), [next(iter(self.routers))]
        while frontier:
            node = frontier.pop()
            if node not in reached:
                reached.add(node)
                frontier += [other for edge in edges if node in edge for other in edge]
        return reached == set(self.routers)


def _resolver(endpoint: EndpointConfig) -> tuple:
    """(group, port, interface) of the domain the endpoint's UM configuration file puts it in."""
    um = load_file(endpoint.lbm_config)
    return (um.get("context", "resolver_multicast_address"), um.get("context", "resolver_multicast_port"),
            um.get("context", "resolver_multicast_interface"))


# --------------------------------------------------------------------------- every file

def test_each_named_topology_has_a_directory():
    assert {p.name for p in DIRECTORIES} == NAMED


@pytest.mark.parametrize("path", TOPOLOGY_FILES, ids=_id)
def test_example_loads_without_warnings(path, caplog):
    with caplog.at_level(logging.WARNING, logger="router.config"):
        config = load_gateway_config(path)
    assert caplog.records == []
    assert config.daemon.web_monitor is None                   # several run on one machine
    assert all(e.lbm_config is not None and e.lbm_config.is_file() for e in config.endpoints)


def test_daemon_names_are_unique_across_all_examples():
    names = Counter(load_gateway_config(p).daemon.name for p in ALL_EXAMPLES)
    assert [name for name, count in names.items() if count > 1] == []


def test_peer_ports_are_in_range_and_one_link_each_across_all_examples():
    listen_ports = [peer.link.acceptor.listen_port for p in TOPOLOGY_FILES
                    for peer in load_gateway_config(p).peers if peer.link.acceptor]
    assert all(port in PEER_PORTS for port in listen_ports)
    assert len(listen_ports) == len(set(listen_ports))


def test_one_domain_id_per_resolver_group_across_all_examples():
    ids_by_group: dict[tuple, set[int]] = {}
    for path in ALL_EXAMPLES:
        for endpoint in load_gateway_config(path).endpoints:
            ids_by_group.setdefault(_resolver(endpoint), set()).add(endpoint.domain_id)
    assert {group: ids for group, ids in ids_by_group.items() if len(ids) > 1} == {}


def test_readme_shows_how_to_start_every_router():
    text = README.read_text()
    for path in TOPOLOGY_FILES:
        assert f"tnwgd {path.relative_to(ROOT)}" in text, path


# ---------------------------------------------------------------------- per topology

@pytest.mark.parametrize("directory", DIRECTORIES, ids=lambda p: p.name)
def test_each_initiator_has_exactly_one_acceptor_and_vice_versa(directory):
    topology = Topology.load(directory)
    initiators, acceptors = Counter(), Counter()
    for name, config in topology.routers.items():
        for peer in config.peers:
            if peer.link.initiator:
                assert peer.link.initiator.address == "127.0.0.1"
                initiators[(name, peer.link.initiator.port)] += 1
            else:
                acceptors[(name, peer.link.acceptor.listen_port)] += 1
    for name, port in initiators:
        assert [n for n, p in acceptors if p == port and n != name] != [], f"{name}: nobody listens on {port}"
        assert len([n for n, p in acceptors if p == port]) == 1, f"{port} has several acceptors"
    for name, port in acceptors:
        assert len([n for n, p in initiators if p == port and n != name]) == 1, \
            f"{name}: {port} needs exactly one initiator in another router"
    # Two peer links between the same two routers are unsupported.
    assert len(topology.links) == len(set(topology.links)) == len(acceptors)


@pytest.mark.parametrize("directory", DIRECTORIES, ids=lambda p: p.name)
def test_each_domain_has_one_resolver_group_and_groups_are_not_shared(directory):
    groups: dict[int, set[tuple]] = {}
    for config in Topology.load(directory).routers.values():
        for endpoint in config.endpoints:
            groups.setdefault(endpoint.domain_id, set()).add(_resolver(endpoint))
    assert {d: g for d, g in groups.items() if len(g) != 1} == {}
    resolvers = [next(iter(g)) for g in groups.values()]
    assert len({(group, port) for group, port, _ in resolvers}) == len(resolvers)
    assert {interface for _, _, interface in resolvers} == {"127.0.0.1"}


def _one_endpoint_each_on_its_own_domain(topology: Topology) -> None:
    assert all(len(topology.endpoints(r)) == 1 for r in topology.routers)
    assert all(len(routers) == 1 for routers in topology.domains().values())


def check_peer_link(t: Topology) -> None:
    assert len(t.routers) == 2 and len(t.links) == 1
    _one_endpoint_each_on_its_own_domain(t)


def check_transit_domain(t: Topology) -> None:
    assert len(t.routers) == 2 and t.links == []
    assert all(len(t.endpoints(r)) == 2 for r in t.routers)
    assert sorted(len(routers) for routers in t.domains().values()) == [1, 1, 2]


def check_parallel(t: Topology) -> None:
    assert len(t.routers) == 2 and t.links == []
    assert [len(routers) for routers in t.domains().values()] == [2, 2]
    # One router is the cheaper path, so traffic prefers it; the other is the standby.
    costs = sorted({e.cost for e in t.endpoints(r)} for r in t.routers)
    assert costs == [{2}, {5}]


def check_hotlinks(t: Topology) -> None:
    """Parallel routers whose datacenter endpoints (LAN1) share a hotlink index, the other ones none."""
    assert len(t.routers) == 2 and t.links == []
    assert [len(routers) for routers in t.domains().values()] == [2, 2]
    for router in t.routers:
        assert {(e.domain_id, e.hotlink_index) for e in t.endpoints(router)} == {(1, 1), (2, 0)}


def check_hotlinks_peer(t: Topology) -> None:
    """Two redundant paths LAN1 --[A]==[C]-- LAN2 and LAN1 --[B]==[D]-- LAN2, every endpoint with
    hotlink index 1: each datacenter's endpoints face it, so both ends carry their copy."""
    assert len(t.routers) == 4 and len(t.links) == 2
    assert all(t.degree(r) == 1 and len(t.endpoints(r)) == 1 for r in t.routers)
    assert {d: len(routers) for d, routers in t.domains().items()} == {1: 2, 2: 2}
    assert all(t.endpoints(r)[0].hotlink_index == 1 for r in t.routers)
    for link in t.links:
        assert {t.endpoints(r)[0].domain_id for r in link} == {1, 2}, f"{sorted(link)} is not a path LAN1 to LAN2"


def check_loop(t: Topology) -> None:
    assert len(t.routers) == 3 and len(t.links) == 3
    assert all(t.degree(r) == 2 for r in t.routers) and t.connected()
    _one_endpoint_each_on_its_own_domain(t)


def check_star_central_domain(t: Topology) -> None:
    assert len(t.routers) == 3 and t.links == []
    assert all(len(t.endpoints(r)) == 2 for r in t.routers)
    assert sorted(len(routers) for routers in t.domains().values()) == [1, 1, 1, 3]


def check_star_central_router(t: Topology) -> None:
    assert len(t.routers) == 4 and len(t.links) == 3
    hubs = [r for r in t.routers if t.degree(r) == 3]
    assert len(hubs) == 1 and t.endpoints(hubs[0]) == []
    spokes = [r for r in t.routers if r != hubs[0]]
    assert all(t.degree(r) == 1 and len(t.endpoints(r)) == 1 for r in spokes)
    assert all(len(routers) == 1 for routers in t.domains().values()) and len(t.domains()) == 3


def check_mesh(t: Topology) -> None:
    assert len(t.routers) == 4 and len(set(t.links)) == 6
    assert all(t.degree(r) == 3 for r in t.routers)
    _one_endpoint_each_on_its_own_domain(t)


SHAPES = {"peer-link": check_peer_link, "transit-domain": check_transit_domain, "parallel": check_parallel,
          "hotlinks": check_hotlinks, "hotlinks-peer": check_hotlinks_peer,
          "loop": check_loop, "star-central-domain": check_star_central_domain,
          "star-central-router": check_star_central_router, "mesh": check_mesh}


@pytest.mark.parametrize("directory", DIRECTORIES, ids=lambda p: p.name)
def test_topology_has_the_shape_it_is_named_after(directory):
    topology = Topology.load(directory)
    assert topology.connected()
    SHAPES[directory.name](topology)
