"""A supervisor stand-in for command and dispatch tests: the attributes commands read, no processes.

Its routing map is real (router.routing.service.RoutingService): this router "fake" has endpoint
portals LAN1 (domain 1) and LAN2 (domain 2) and a peer portal PEER1 linked to router "other",
which has domain 3 behind it. Both maps agree, so the two routers announce the same signature.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from router.config.model import DaemonConfig
from router.ipc import bus_messages as bm
from router.monitor.counters import PortalCounters
from router.routing.route_info import encode_route_info
from router.routing.service import RoutingService
from router.routing.topology import Adjacency, Topology

OTHER_ID = 0xB0B
ISLAND_ID = 0xD00D


@dataclass
class FakeWorker:
    config: object
    counters: PortalCounters = field(default_factory=PortalCounters)


def endpoint(name: str, domain_id: int, cost: int = 1):
    return SimpleNamespace(name=name, kind="endpoint", domain_id=domain_id, cost=cost, max_queue=1_000_000,
                           lbm_config=Path(f"/etc/umrouter/{name}.cfg"), acl=None)


def peer(name: str, cost: int = 1):
    return SimpleNamespace(name=name, kind="peer", domain_id=None, cost=cost, max_queue=1_000_000,
                           lbm_config=None, acl=None)


def other_router(fake_id: int) -> Topology:
    """Router "other": a peer link back to the fake router (cost 4) and domain 3 (cost 5)."""
    other = Topology(OTHER_ID, "other")
    other.set_local_adjacencies([Adjacency.router(fake_id, 4, "PB"), Adjacency.domain(3, 5, "LAN3")])
    return other


class FakeSupervisor:
    def __init__(self):
        self.name, self.node_id, self.pid = "fake", 0x1234, 4242
        self.workers = {"LAN1": FakeWorker(endpoint("LAN1", 1)), "LAN2": FakeWorker(endpoint("LAN2", 2, cost=3)),
                        "PEER1": FakeWorker(peer("PEER1", cost=2))}
        self.workers["LAN1"].counters.add_pair("transport_topic_fragments_rcvd",
                                               "transport_topic_fragment_bytes_rcvd", 10, 640)
        self.hub = SimpleNamespace(interest={("LAN2", bm.INTEREST_TOPIC, "a.topic"): None,
                                             ("LAN1", bm.INTEREST_PCRE, "^b.*"): None},
                                   counters={"messages": 0, "malformed": 0, "resyncs": 0})
        self.extensions: list = []
        self.config = SimpleNamespace(path=Path("/etc/umrouter/fake.xml"))
        self.reload_result = {"ok": True, "added": [], "removed": [], "changed": ["LAN2"], "kept": ["LAN1"],
                              "cost_only": ["LAN2"]}
        self.stopped = False
        self.queries: list = []            # (what, portals, on_done): the test answers them
        self.route_info_sent: list = []    # (portal, bytes) the routing service put on the wire
        self.tables: list = []             # route tables published to the workers
        self.routing = RoutingService(self.node_id, self.name, DaemonConfig(),
                                      send=lambda portal, data: self.route_info_sent.append((portal, data)),
                                      publish=self.tables.append, log_event=lambda name, text: None)
        self.routing.set_adjacency("LAN1", Adjacency.domain(1, 1, "LAN1"))
        self.routing.set_adjacency("LAN2", Adjacency.domain(2, 3, "LAN2"))
        self.routing.set_adjacency("PEER1", Adjacency.router(OTHER_ID, 2, "PEER1"))
        self.other = other_router(self.node_id)
        # The other router has heard us too, so its announced signature is of the same map as ours.
        self.other.apply(self.routing.topology.next_announcement(), 0.0)
        self.hear_other()
        self.routing.force()

    def hear_other(self) -> None:
        """Router "other" announces itself over PEER1 (call again after changing `other`)."""
        self.routing.on_route_info("PEER1", encode_route_info(self.other.next_announcement()))

    def add_second_peer_link(self) -> None:
        """PEER2, a second link to router "other": two peer links between two routers is forbidden."""
        self.workers["PEER2"] = FakeWorker(peer("PEER2", cost=5))
        self.routing.set_adjacency("PEER2", Adjacency.router(OTHER_ID, 5, "PEER2"))
        self.routing.force()

    def hear_island(self) -> None:
        """Router "island" with domain 4, heard (flooded) but claiming a link to us we do not have:
        domain 4 is in the map and unreachable."""
        island = Topology(ISLAND_ID, "island")
        island.set_local_adjacencies([Adjacency.domain(4, 1), Adjacency.router(self.node_id, 1)])
        self.routing.on_route_info("PEER1", encode_route_info(island.next_announcement()))
        self.routing.force()

    def status(self) -> dict:
        portals = [{"name": n, "kind": w.config.kind, "domain_id": w.config.domain_id, "cost": w.config.cost,
                    "pid": 100 + i, "uptime_s": 1.0, "restarts": 0, "generation": 1, "heartbeat_age_s": 0.01,
                    "proxy_receivers": 0, "proxy_sources": 0, "state": "up", "scheduling": "normal"}
                   for i, (n, w) in enumerate(self.workers.items())]
        return {"router": self.name, "node_id": self.node_id, "pid": self.pid, "uptime_s": 2.0,
                "config": str(self.config.path), "portals": portals}

    def portal_counters(self) -> dict:
        return {name: worker.counters.snapshot() for name, worker in self.workers.items()}

    def reload(self) -> dict:
        return self.reload_result

    def stop(self) -> None:
        self.stopped = True

    def query_workers(self, what, portals, on_done, timeout=2.0) -> None:
        self.queries.append((what, list(portals), on_done))
