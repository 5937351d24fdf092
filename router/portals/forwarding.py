"""What one portal needs to know of the whole router to forward: interest, routes, portal indexes.

Every worker keeps one :class:`ForwardingView`, fed by the bus (interest updates, the route table
after each recalculation, portals coming and going). It answers the three questions a portal asks
(spec/dro.md §2.2, §2.5), all through the one lowest-cost path between two domains:

- ``mask_for(topic, origin)``: which portals a stream from domain ``origin`` that came in by this
  portal goes to — portal Q gets it when some domain D wants the topic through Q and the path
  origin -> D enters this router by this portal and leaves it by Q. So a stream takes exactly one
  path to each interested domain: no duplicates in loops and meshes, and nothing where no
  receiver is. (A source can be heard by two portals of one router — copies of it in two domains
  that each have their own receivers — and only the copy on the path goes on.)
- ``pulled()``: which topics and patterns this portal must pull in (proxy receivers, interest
  sent on to the next router): those some other portal wants for a domain D whose chosen paths
  enter this router through this portal.
- ``emitted()``: the same as (kind, symbol, destination domain) triples, for the interest
  messages this portal sends to other routers.

DRO Hotlinks: an endpoint with a non-zero ``<hotlink-index>`` faces a datacenter that redundant
routers serve together. A stream from that domain leaves this router toward each interested
domain by this router's own lowest-cost way there that does not go back through the datacenter
(``hotlink_next_hop``), whether or not the one chosen path crosses this router, and
the portal pulls in what those domains want: each redundant router carries every message, and
receivers with ``use_hotlink`` keep the first copy (router.um.hotlinks). The other way round, what
reaches this router by its own lowest-cost way from a stream's origin that avoids a hotlink
endpoint's domain goes into that endpoint (``into_hotlink_endpoint``), and its receivers' interest
is pulled in along those ways (``hotlink_entries``), so redundant routers at the far end of peer
links deliver their copies too. The route table tells every portal which of its router's endpoints
have a hotlink index; other routers need not know.

Until the first route table arrives nothing is forwarded (the DRO drops traffic that arrives
before its first route calculation).
"""
from __future__ import annotations

from router.ipc import bus_messages as bm
from router.portals.interest import InterestTable
from router.routing.paths import Routes
from router.routing.service import snapshot_from_plain
from router.routing.topology import DOMAIN

MAX_HOP_COUNT = 255          # a stream that has crossed this many routers is dropped (a routing loop)


class ForwardingView:
    def __init__(self, name: str, portal_indexes: dict[str, int]):
        self.name = name
        self.portal_indexes = portal_indexes          # portal name -> ring/mask bit (shared with the datapath)
        self.table = InterestTable()
        self.routes = None                            # router.routing.paths.RouterRoutes
        self.table_version = -1
        # (origin, destination) -> (the portal its path enters this router by, leaves it by)
        self._crossings: dict[tuple[int, int], tuple[str | None, str | None]] = {}
        self._entry: dict[int, frozenset[str]] = {}
        self._next_hop: dict[int, str | None] = {}
        self._avoiding: dict[tuple[int, int], str | None] = {}      # (avoided, destination) -> portal
        self._hotlink_entries: dict[int, frozenset[str]] = {}
        # This router's endpoints with a <hotlink-index>, by portal: their domains (the route table says)
        self.hotlink_endpoints: dict[str, int] = {}
        self._domains: frozenset[int] = frozenset()     # the domains in the route table

    # -- updates -------------------------------------------------------------------------------
    def load_routes(self, message: bm.RouteTable) -> bool:
        """A route table from the supervisor; True if it is newer than ours."""
        if message.version <= self.table_version:
            return False
        self.table_version = message.version
        snapshot = snapshot_from_plain(message.local_id, [list(r) for r in message.records])
        self.routes = Routes(snapshot).for_router(message.local_id)
        self._domains = frozenset(self.routes.routes.domains)
        self._crossings.clear()
        self._entry.clear()
        self._next_hop.clear()
        self._avoiding.clear()
        self._hotlink_entries.clear()
        local = next((record for record in snapshot.records if record.is_local), None)
        self.hotlink_endpoints = {a.portal: a.neighbor for a in (local.adjacencies if local else ())
                                  if a.kind == DOMAIN and a.hotlink}
        return True

    def apply(self, message, datapath) -> str | None:
        """Fold in a bus message every portal kind handles the same way; says what changed:
        "snapshot", "interest", "routes", "portal-up" (a portal's worker started), or None."""
        if isinstance(message, bm.Snapshot):
            for portal, index, _ in message.portals:
                self._portal_known(portal, index, datapath)
            self.table.load(message)
            return "snapshot"
        if isinstance(message, bm.Interest):
            return "interest" if self.table.apply(message) else None
        if isinstance(message, bm.RouteTable):
            return "routes" if self.load_routes(message) else None
        if isinstance(message, bm.PortalUp) and message.portal != self.name:
            self._portal_known(message.portal, message.index, datapath)
            return "portal-up"
        return None

    def _portal_known(self, portal: str, index: int, datapath) -> None:
        """Another portal's worker is up: address it by its index and read its ring."""
        if portal != self.name:
            self.portal_indexes[portal] = index
            datapath.attach(index)

    def forget_portal(self, portal: str) -> None:
        self.portal_indexes.pop(portal, None)
        self.table.drop_portal(portal)

    # -- questions -----------------------------------------------------------------------------
    def crossing(self, origin: int, destination: int) -> tuple[str | None, str | None]:
        """The portals by which the path origin -> destination enters and leaves this router
        ((None, None): not through it)."""
        if origin == destination or origin not in self._domains or destination not in self._domains:
            # A stream's origin domain is its advertisement's to write: one no path reaches is not
            # remembered, or every distinct one would stay until the next route change.
            return (None, None)
        key = (origin, destination)
        crossing = self._crossings.get(key)
        if crossing is None:
            crossing = self._crossings[key] = (self.routes.ingress_portal(origin, destination),
                                               self.routes.egress_portal(origin, destination))
        return crossing

    def next_hop(self, destination: int) -> str | None:
        """The portal by which this router sends toward domain `destination` (None: no path, or
        no route table yet). Unicast messages go this way, whatever domain they came from."""
        if destination not in self._domains:
            # The domain is the sender's to write: one no path reaches is not remembered (nor a
            # path tree computed for it), or every distinct one would stay until the next route change.
            return None
        if destination not in self._next_hop:
            self._next_hop[destination] = self.routes.next_hop_portal(destination)
        return self._next_hop[destination]

    def entry_portals(self, destination: int) -> frozenset[str]:
        """Portals through which chosen paths toward ``destination`` enter this router."""
        if destination not in self._domains:
            return frozenset()      # remote interest names any domain: not remembered (see next_hop)
        if destination not in self._entry:
            self._entry[destination] = frozenset(self.routes.interest_portals(destination))
        return self._entry[destination]

    def mask_for(self, topic: str, origin: int) -> int:
        mask = 0
        for portal, destination in self.table.portals_for(topic):
            if portal != self.name and portal in self.portal_indexes and (
                    self.crossing(origin, destination) == (self.name, portal)
                    or self.hotlinked(origin, destination, portal)
                    or self.into_hotlink_endpoint(origin, destination, portal)):
                mask |= 1 << self.portal_indexes[portal]
        return mask

    @property
    def hotlink_domain(self) -> int | None:
        """This portal's domain if it is an endpoint with a hotlink index (the route table says)."""
        return self.hotlink_endpoints.get(self.name)

    def hotlinked(self, origin: int | None, destination: int, portal: str) -> bool:
        """Does a stream from domain ``origin`` go to ``portal`` toward ``destination`` because
        this is a hotlink endpoint on ``origin`` (this router's own next hop, chosen path or not)?"""
        return (self.hotlink_domain is not None and origin == self.hotlink_domain
                and destination != origin and self.hotlink_next_hop(destination) == portal)

    def hotlink_next_hop(self, destination: int) -> str | None:
        """The portal by which this router sends what comes from its hotlink domain toward
        `destination`: its own lowest-cost way that does not go back through that domain."""
        return self._next_hop_avoiding(self.hotlink_domain, destination)

    def into_hotlink_endpoint(self, origin: int | None, destination: int, portal: str) -> bool:
        """Does a stream from ``origin`` go to ``portal``, this router's hotlink endpoint on
        ``destination``, because it came in by this router's own lowest-cost way from ``origin``
        that avoids ``destination`` (chosen path or not)? So each redundant router facing a
        datacenter delivers its own copy into it, whichever of them the one chosen path crosses."""
        return (self.hotlink_endpoints.get(portal) == destination and origin is not None and origin != destination
                and self._next_hop_avoiding(destination, origin) == self.name)

    def hotlink_entries(self, destination: int) -> frozenset[str]:
        """The portals by which this router's own ways avoiding ``destination`` lead to the other
        domains: where it pulls in the interest of its hotlink endpoint on ``destination``."""
        if destination not in self._domains:
            return frozenset()
        if destination not in self._hotlink_entries:
            ways = {self._next_hop_avoiding(destination, origin) for origin in self._domains if origin != destination}
            self._hotlink_entries[destination] = frozenset(ways - {None})
        return self._hotlink_entries[destination]

    def _next_hop_avoiding(self, avoided: int | None, destination: int) -> str | None:
        if avoided is None or destination not in self._domains:
            return None         # the domain is the interest's or the stream's to name (see next_hop)
        key = (avoided, destination)
        if key not in self._avoiding:
            self._avoiding[key] = self.routes.next_hop_avoiding(avoided, destination)
        return self._avoiding[key]

    def emitted(self) -> set[tuple[int, str, int]]:
        """(kind, symbol, destination domain) this portal pulls in on behalf of other portals."""
        found = set()
        for kind, symbol, portal, destination in self.table.items():
            if portal != self.name and (self.name in self.entry_portals(destination)
                                        or self.hotlinked(self.hotlink_domain, destination, portal)
                                        or (self.hotlink_endpoints.get(portal) == destination
                                            and self.name in self.hotlink_entries(destination))):
                found.add((kind, symbol, destination))
        return found

    def pulled(self, emitted: set | None = None) -> tuple[set[str], set[tuple[int, str]]]:
        """Topics and (kind, pattern)s this portal needs proxy receivers for (from `emitted()`,
        passed in when the caller has it already)."""
        topics, patterns = set(), set()
        for kind, symbol, _ in (self.emitted() if emitted is None else emitted):
            if kind == bm.INTEREST_TOPIC:
                topics.add(symbol)
            else:
                patterns.add((kind, symbol))
        return topics, patterns

    def remote_counts(self) -> dict[int, int]:
        """Per interest kind, how many symbols other portals want (for the portal's counters)."""
        counts = {bm.INTEREST_TOPIC: 0, bm.INTEREST_PCRE: 0, bm.INTEREST_REGEX: 0}
        seen = set()
        for kind, symbol, portal, _ in self.table.items():
            if portal != self.name and (kind, symbol) not in seen:
                seen.add((kind, symbol))
                counts[kind] = counts.get(kind, 0) + 1
        return counts
