"""The router's routing state, owned by the supervisor: topology map, recalculation, route-info flood.

Workers report what only they see (a peer link came up to router X, a route-info message arrived
on portal P); the service keeps the topology map (topology.py), floods route-info on to every
other route-carrying portal, times out silent routers, recalculates paths once the map settles
(recalculation.py) and hands the result to the workers as a route table: the map's records, from
which every worker builds the same :class:`router.routing.paths.Routes` and asks it its questions.

The first calculation waits until the other routers have had the time to be heard: the
route-info ``timeout`` from the first adjacency. A router that started next to routers already
forwarding between its domains would otherwise forward from the start while they, not knowing it
yet, go on forwarding until their own recalculation (``backoff-interval`` after they hear it):
every message twice, for seconds. A router still alone then routes at once. One that hears others
takes over from them only once they have let go: they recalculate ``backoff-interval`` after they
hear it, which it learns when they announce its own topology signature (their map has it), so its
first calculation waits ``backoff-interval`` and one ``check-interval`` from then. It usually
hears them before they hear it (they answer its CTXINFO before it answers theirs): recalculating
``backoff-interval`` after that, it would forward alongside them until they recalculate. Routers
whose map does not come to match its own within the route-info ``timeout`` (out of reach of its
announcements) are not waited for.
Forbidden topologies are logged once when they appear and listed by ``routerctl topology``. Two
routers with one node id are one (topology.py): each route-info that shows it is also counted.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from router.eventlog import event
from router.log_rate import LogRate, unsaid
from router.routing.paths import Routes
from router.routing.recalculation import RecalcTrigger, RecalculationScheduler
from router.routing.route_info import RouteInfoError, encode_route_info, parse_route_info, with_ttl
from router.routing.topology import DOMAIN, Adjacency, RouterRecord, Topology, TopologySnapshot, UpdateOutcome
from router.um.wire.lbmc import WireError, decode_lbmc, encode_lbmc

log = logging.getLogger(__name__)

MALFORMED_LOG_INTERVAL_MS = 10_000


def now_ms() -> float:
    return time.monotonic() * 1000


def records_to_plain(snapshot: TopologySnapshot) -> list:
    """A snapshot as msgpack-able lists (for the bus); portal names and hotlink indexes of our own
    adjacencies included."""
    return [[r.node_id, r.name, r.version,
             [[a.kind == DOMAIN, a.neighbor, a.cost, a.identity, a.portal, a.hotlink] for a in r.adjacencies]]
            for r in snapshot.records]


def snapshot_from_plain(local_id: int, records: list) -> TopologySnapshot:
    built = []
    for node_id, name, version, adjacencies in records:
        built.append(RouterRecord(node_id, name, version, tuple(
            Adjacency("domain" if is_domain else "router", neighbor, cost, identity, portal, hotlink=hotlink)
            for is_domain, neighbor, cost, identity, portal, hotlink in adjacencies), is_local=node_id == local_id))
    return TopologySnapshot(local_id, tuple(sorted(built, key=lambda r: r.node_id)))


class RoutingService:
    """``send(portal, data)`` puts route-info bytes on a route-carrying portal; ``publish(table)``
    gives workers a new route table (see :meth:`table`)."""

    def __init__(self, node_id: int, name: str, daemon_config, send: Callable[[str, bytes], None],
                 publish: Callable[[list], None], log_event: Callable[[str, str], None] | None = None):
        info = daemon_config.route_info
        recalc = daemon_config.route_recalculation
        self.node_id, self.name = node_id, name
        self.propagation_interval_ms = info.propagation_interval
        self.check_interval_ms = info.check_interval
        self.topology = Topology(node_id, name, info.timeout, info.max_hop_count)
        self._log_event = log_event or (lambda name_, text: event(name_, text))
        self.scheduler = RecalculationScheduler(self._recalculate, recalc.backoff_interval, recalc.warning_interval,
                                                info.propagation_interval, self._log_event)
        self._send, self._publish = send, publish
        self.adjacencies: dict[str, Adjacency] = {}       # portal -> adjacency while it has one
        self.route_portals: set[str] = set()              # portals that carry route-info
        self.routes = Routes(self.topology.snapshot())
        self.table_version = 0
        self._first_adjacency_ms: float | None = None     # start of the start-up listening
        self._others_heard_ms: float | None = None        # start-up: when we first had company
        self._known_to_others_ms: float | None = None     # start-up: when they all announced our map
        self.forbidden_reported: set[tuple] = set()      # ForbiddenTopology.identity of those logged
        # A router of another version floods its route-info, as do all behind it, for as long as it
        # runs: one line per portal every MALFORMED_LOG_INTERVAL_MS (the counter has them all).
        self._malformed_said = LogRate(MALFORMED_LOG_INTERVAL_MS, clock=now_ms)
        self.counters = {"route_info_sent": 0, "route_info_rcvd": 0, "route_info_forwarded": 0,
                         "route_info_malformed": 0, "route_info_duplicates": 0, "route_info_node_id_conflicts": 0}

    # -- what the workers report ---------------------------------------------------------------
    def set_adjacency(self, portal: str, adjacency: Adjacency | None, now: float | None = None) -> None:
        """A portal's adjacency appeared, changed or went (None)."""
        now = now_ms() if now is None else now
        old = self.adjacencies.get(portal)
        if adjacency is None:
            self.adjacencies.pop(portal, None)
        else:
            self.adjacencies[portal] = adjacency
        if old == adjacency and (old is None or (old.portal, old.hotlink) == (adjacency.portal, adjacency.hotlink)):
            return
        if not self.topology.set_local_adjacencies(self.adjacencies.values()):
            if old is not None and adjacency is not None and self.table_version:
                # Only what stays local changed (a portal's name, an endpoint's hotlink index): no
                # route moves and the other routers' maps are the same, but the workers decide by it.
                self._publish_table()
            return
        if old is None:
            trigger = RecalcTrigger.LINK_CAME_UP
        elif adjacency is None:
            trigger = RecalcTrigger.LINK_WENT_DOWN
        elif old.neighbor == adjacency.neighbor and old.kind == adjacency.kind:
            trigger = RecalcTrigger.COST_CHANGED
        else:
            trigger = RecalcTrigger.LINK_CAME_UP
        self.scheduler.note(trigger, f"portal {portal}", now)
        if self._first_adjacency_ms is None:
            self._first_adjacency_ms = now
        self._announce()             # tell the others now rather than at the next interval

    def set_route_portal(self, portal: str, carries_route_info: bool) -> None:
        if carries_route_info:
            self.route_portals.add(portal)
        else:
            self.route_portals.discard(portal)
            self._malformed_said.forget(portal)

    def note_domain_id_conflict(self, portal: str, our_domain_id: int, heard_domain_id: int, heard_from: str,
                                now: float | None = None) -> None:
        self.topology.note_domain_id_conflict(
            our_domain_id, heard_domain_id,
            f"portal {portal} of {self.name} heard router {heard_from} say LOCAL_DOMAIN {heard_domain_id}",
            now_ms() if now is None else now)
        self._report_forbidden()

    def on_route_info(self, portal: str, data: bytes, now: float | None = None) -> None:
        """A route-info message arrived on ``portal``: apply it and flood it on."""
        now = now_ms() if now is None else now
        try:
            message, _ = decode_lbmc(data)
            announcement = parse_route_info(message)
        except (WireError, RouteInfoError) as err:
            self.counters["route_info_malformed"] += 1
            self._say_malformed(portal, err, now)
            return
        self.counters["route_info_rcvd"] += 1
        result = self.topology.apply(announcement, now)
        if result.outcome is UpdateOutcome.NODE_ID_CONFLICT:
            self.counters["route_info_node_id_conflicts"] += 1
            self.topology.note_node_id_conflict(
                announcement.node_id, (result.record.name, announcement.name),
                f"portal {portal} of {self.name} heard route-info from {announcement.name}", now)
            self._report_forbidden()
        elif result.outcome in (UpdateOutcome.DUPLICATE, UpdateOutcome.STALE, UpdateOutcome.OWN):
            self.counters["route_info_duplicates"] += 1
            # Not applied again; flooded on only if it may go further than the copy that was.
        elif result.changes_topology:
            trigger = (RecalcTrigger.NEW_DRO_DISCOVERED if result.outcome is UpdateOutcome.NEW_ROUTER
                       else RecalcTrigger.NODE_UPDATED)
            self.scheduler.note(trigger, result.record.label(), now)
            self._report_forbidden()
        if result.forward_ttl is None:       # its last allowed hop, or no further than a copy before it
            return
        forwarded = encode_lbmc(with_ttl(message, result.forward_ttl))
        for other in sorted(self.route_portals - {portal}):
            self._send(other, forwarded)
            self.counters["route_info_forwarded"] += 1

    def _say_malformed(self, portal: str, err: Exception, now: float) -> None:
        count = self._malformed_said.due(portal, now)
        if count is not None:
            log.warning("route-info from portal %s dropped: %s%s", portal, err, unsaid(count))

    # -- timers ----------------------------------------------------------------------------------
    def propagate(self) -> None:
        """Every propagation-interval: our own route-info to every route-carrying portal."""
        self._announce()

    def _announce(self) -> None:
        if not self.route_portals:
            return
        data = encode_route_info(self.topology.next_announcement())
        for portal in sorted(self.route_portals):
            self._send(portal, data)
            self.counters["route_info_sent"] += 1

    def check(self, now: float | None = None) -> None:
        """Every check-interval: time out silent routers, recalculate once changes settle."""
        now = now_ms() if now is None else now
        for record in self.topology.expire(now):
            self.scheduler.note(RecalcTrigger.DRO_TIMED_OUT, record.label(), now)
        # A conflict no longer heard has just expired: forget that it was logged, so that it is
        # logged again if it comes back (a link between the two routers was down for a while).
        self._report_forbidden()
        if not self.scheduler.has_calculated:
            if len(self.topology.routers()) > 1:
                if self._others_still_forwarding(now):
                    return
            elif self._first_adjacency_ms is not None:
                if now - self._first_adjacency_ms < self.topology.timeout_ms:
                    return          # alone so far: still listening for routers already there
                self.scheduler.force(now, "start-up")
        self.scheduler.poll(now)

    def _others_still_forwarding(self, now: float) -> bool:
        """Before our first calculation: may the routers we hear still forward what our routes
        will take over? (See the module docstring.)"""
        if self._others_heard_ms is None:
            self._others_heard_ms = now
        if self._known_to_others_ms is None:
            ours = self.topology.signature32()
            if all(r.topology_signature == ours for r in self.topology.routers() if not r.is_local):
                self._known_to_others_ms = now
            else:
                return now - self._others_heard_ms < self.topology.timeout_ms
        return now - self._known_to_others_ms < self.scheduler.backoff_interval_ms + self.check_interval_ms

    def force(self, detail: str = "operator request") -> None:
        self.scheduler.force(now_ms(), detail)
        self.scheduler.poll(now_ms())

    def _recalculate(self, changes) -> None:
        self._publish_table()
        self._report_forbidden()

    def _publish_table(self) -> None:
        self.routes = Routes(self.topology.snapshot())
        self.table_version += 1
        self._publish(self.table())

    def _report_forbidden(self) -> None:
        found = self.topology.forbidden()
        for item in found:
            if item.identity not in self.forbidden_reported:
                self._log_event("forbidden-topology", item.message)
        self.forbidden_reported = {item.identity for item in found}

    # -- what workers and operators read ----------------------------------------------------------
    def table(self) -> list:
        """[version, local node id, records] — what a worker needs to build the same Routes."""
        return [self.table_version, self.node_id, records_to_plain(self.routes.snapshot)]

    @property
    def signature(self) -> int:
        return self.topology.signature()

    def path(self, source: int, destination: int) -> dict | None:
        path = self.routes.path(source, destination)
        return _path_dict(path) if path is not None else None

    def describe(self, now: float | None = None) -> dict:
        now = now_ms() if now is None else now
        names = {r.node_id: r.name for r in self.topology.routers()}
        routers = []
        for record in self.topology.routers():
            routers.append({
                "node_id": record.node_id, "name": record.name, "version": record.version,
                "local": record.is_local,
                "last_heard_age_ms": None if record.is_local else round(now - record.last_heard_ms, 1),
                "signature": f"{(self.topology.signature32() if record.is_local else record.topology_signature):#010x}",
                "adjacencies": [{"kind": a.kind, "neighbor": a.neighbor,
                                 "neighbor_name": names.get(a.neighbor) if a.kind != DOMAIN else None,
                                 "cost": a.cost, "portal": a.portal} for a in record.adjacencies],
            })
        scheduler = self.scheduler
        return {
            "node_id": self.node_id, "name": self.name, "version": self.topology.local.version,
            "signature": f"{self.signature:#018x}", "table_version": self.table_version,
            "routers": routers, "domains": list(self.routes.domains),
            "forbidden": [{"kind": f.kind, "message": f.message, "routers": list(f.routers)}
                          for f in self.topology.forbidden()],
            "recalculations": scheduler.recalculations,
            "last_recalculation_age_s": (None if scheduler.last_recalculation_ms is None
                                         else round((now - scheduler.last_recalculation_ms) / 1000, 3)),
            "last_recalculation_ms": (None if scheduler.last_recalculation_ms is None
                                      else round(scheduler.last_duration_ms, 3)),
            "last_changes": [c.describe() for c in scheduler.last_changes],
            "pending_changes": [c.describe() for c in scheduler.pending],
            "paths": [_path_dict(p) for p in self.routes.all_paths()],
            "counters": dict(self.counters),
        }


def _path_dict(path) -> dict:
    return {"from": path.source_domain, "to": path.destination_domain, "cost": path.cost,
            "routers": len(path.routers), "text": path.describe(),
            "hops": [{"kind": h.kind, "node": h.node, "name": h.name, "cost": h.cost, "portal": h.portal}
                     for h in path.hops]}
