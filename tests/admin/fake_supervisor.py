"""A supervisor stand-in for command and dispatch tests: the attributes commands read, no processes."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from router.ipc import bus_messages as bm
from router.monitor.counters import PortalCounters


@dataclass
class FakeWorker:
    config: object
    counters: PortalCounters = field(default_factory=PortalCounters)


def endpoint(name: str, domain_id: int, cost: int = 1):
    return SimpleNamespace(name=name, kind="endpoint", domain_id=domain_id, cost=cost, max_queue=1_000_000,
                           lbm_config=Path(f"/etc/umrouter/{name}.cfg"), acl=None)


class FakeSupervisor:
    def __init__(self):
        self.name, self.node_id, self.pid = "fake", 0x1234, 4242
        self.workers = {"LAN1": FakeWorker(endpoint("LAN1", 1)), "LAN2": FakeWorker(endpoint("LAN2", 2, cost=3))}
        self.workers["LAN1"].counters.add_pair("transport_topic_fragments_rcvd",
                                               "transport_topic_fragment_bytes_rcvd", 10, 640)
        self.hub = SimpleNamespace(interest={("LAN2", bm.INTEREST_TOPIC, "a.topic"): None,
                                             ("LAN1", bm.INTEREST_PCRE, "^b.*"): None})
        self.extensions: list = []
        self.config = SimpleNamespace(path=Path("/etc/umrouter/fake.xml"))
        self.reload_result = {"ok": True, "added": [], "removed": [], "changed": ["LAN2"], "kept": ["LAN1"],
                              "cost_only": ["LAN2"]}
        self.stopped = False
        self.queries: list = []            # (what, portals, on_done): the test answers them

    def status(self) -> dict:
        portals = [{"name": n, "kind": w.config.kind, "domain_id": w.config.domain_id, "cost": w.config.cost,
                    "pid": 100 + i, "uptime_s": 1.0, "restarts": 0, "generation": 1, "heartbeat_age_s": 0.01,
                    "proxy_receivers": 0, "proxy_sources": 0, "state": "up"}
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
