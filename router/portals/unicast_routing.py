"""Unicast immediate messages across domains (spec/dro.md §2.5, §2.7): hop by hop to their domain.

An application sends a message for another domain (`TCP:domain:ip:port`, router.um.unicast_immediate)
to the request port of a router's endpoint portal in its own domain: every endpoint portal says in
its domain which domains it reaches and that port (LBMR REMOTE_DOMAIN_ROUTE, `reached_domains`),
when they change and then at `<domain-route>`'s intervals (`DomainRouteAnnouncements`). The message carries DESTINATION: the target's domain, ip
and port, the routers crossed, and where it came from.

Each router sends it on by its next hop toward the target domain — the in-tree toward that domain
is the same on every router (router.routing.paths), so the message crosses no router twice:

- in by an endpoint portal from an application (no hop taken yet): the portal fills in the
  origin domain (a sender may not know its own); from another router on a transit domain, the
  first router did;
- to the portal of this router that is the next hop: a UNICAST ring record (one more hop taken);
- out by a peer portal: the frame crosses the link as it is (topic index 0: not a response);
- out by an endpoint portal on the target domain: to the target's request port, DESTINATION kept,
  so the receiver sees where it came from (a source it can answer to);
- out by an endpoint portal on a transit domain: to the request port of the router there that
  says it reaches the target domain.

As the DRO does, a message that arrives before the first route calculation (Gwd-6361-124), is for
a domain no path reaches (Gwd-6361-123), or has crossed MAX_HOPS routers is dropped: counted
(unicast_data_msgs_dropped_no_route) and logged, rate-limited. Delivery is not guaranteed beyond
that (a connection that fails drops what waited on it, counted by the context that sent it).
"""
from __future__ import annotations

from router.um.unicast_immediate import MAX_HOPS, routed_on
from router.um.wire.errors import WireError
from router.um.wire.lbmc_headers import Destination


class UnicastRouting:
    """One portal's part: route the messages that came in by it."""

    def __init__(self, name: str, view, datapath, counters, rate_limited):
        self.name = name
        self.view = view                   # router.portals.forwarding.ForwardingView
        self.datapath = datapath
        self.counters = counters
        self._rate_limited = rate_limited

    def route(self, frame: bytes, destination: Destination, origin_domain: int | None = None) -> None:
        """A message that came in by this portal: to the portal that is the next hop toward its
        domain. `origin_domain`: the domain it came from, when this portal knows it (an endpoint)."""
        size = len(frame)
        self.counters.add_pair("unicast_data_msgs_rcvd", "unicast_data_msg_bytes_rcvd", 1, size)
        target = f"TCP:{destination.domain_id}:{destination.ipaddr}:{destination.port}"
        if destination.hops_taken >= MAX_HOPS:
            self.no_route(size, "unicast-loop", f"a unicast immediate message for {target} has crossed "
                                                f"{destination.hops_taken} routers (a routing loop?); dropped")
            return
        if self.view.routes is None:
            self.no_route(size, "unicast-before-routes", f"a unicast immediate message for {target} arrived "
                                                         "before the first route calculation; dropped")
            return
        portal = self.view.next_hop(destination.domain_id)
        index = self.view.portal_indexes.get(portal) if portal is not None else None
        if index is None or portal == self.name:
            self.no_route(size, "unicast-no-route", f"a unicast immediate message for {target}: no path to "
                                                    f"domain {destination.domain_id}; dropped")
            return
        try:
            frame = routed_on(frame, origin_domain)
        except WireError as err:
            self.counters.add_pair("unicast_data_msgs_dropped_error", "unicast_data_msg_bytes_dropped_error", 1, size)
            self._rate_limited("malformed-input", f"a unicast immediate message for {target}: {err}; dropped")
            return
        self.datapath.unicast(1 << index, frame)
        self.counters.add_pair("unicast_data_msgs_forwarded", "unicast_data_msg_bytes_forwarded", 1, size)

    def no_route(self, size: int, kind: str, text: str) -> None:
        self.counters.add_pair("unicast_data_msgs_dropped_no_route", "unicast_data_msg_bytes_dropped_no_route",
                               1, size)
        self._rate_limited(kind, f"portal {self.name}: {text}")


def reached_domains(view, own_portal: str, own_domain: int) -> list[int]:
    """The domains an endpoint portal on `own_domain` says it reaches: those whose chosen path
    from `own_domain` leaves that domain by this router (enters it by this portal).

    Exactly one router on a domain says so for each domain it reaches, the same one every router
    computes: a router that merely has *some* path (say, back over a peer link to a router that
    sends into this domain again) must not, or a router sending into this (transit) domain may
    pick it and the message loops until MAX_HOPS."""
    if view.routes is None:
        return []
    return [domain for domain in view.routes.routes.domains
            if domain != own_domain and own_portal in view.entry_portals(domain)]


class DomainRouteAnnouncements:
    """When an endpoint portal says which domains it reaches (the DRO's `<domain-route>`
    min-interval / max-interval, spec/dro.md §1.5): at once when the set changes, then at
    intervals doubling from the minimum up to the maximum, where they stay until it changes again.
    Each announcement names every domain reached, so the domain's contexts keep the whole set.
    When the last domain goes, one announcement naming none withdraws the claim at once (else the
    contexts would keep sending to this router until the claim timed out); then nothing more."""

    def __init__(self, min_interval: float, max_interval: float):
        self.min_interval = max(min_interval, 0.001)
        self.max_interval = max(max_interval, self.min_interval)
        self.domains: tuple[int, ...] = ()
        self.interval = self.min_interval
        self.due_at = 0.0
        self.withdrawing = False        # an announcement of no domain is due

    def update(self, domains, now: float) -> None:
        domains = tuple(sorted(domains))
        if domains != self.domains:
            self.withdrawing = not domains
            self.domains, self.interval, self.due_at = domains, self.min_interval, now

    def next_due(self, now: float) -> float | None:
        """Seconds until the next announcement; None while no domain is reached (and none was
        just given up)."""
        return max(0.0, self.due_at - now) if self.domains or self.withdrawing else None

    def sent(self, now: float) -> None:
        self.withdrawing = False
        self.due_at = now + self.interval
        self.interval = min(self.interval * 2, self.max_interval)
