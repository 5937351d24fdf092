"""A domain heard under two domain ids stays reported for as long as a portal keeps hearing it.

An endpoint portal that keeps hearing another router say a different LOCAL_DOMAIN reports it to
the supervisor at most every 5 s (router.portals.endpoint); the map must hold the conflict from
one report to the next, or `routerctl topology` shows it only part of the time."""
from router.config.model import DaemonConfig, RouteInfo, RouteRecalculation
from router.routing.service import RoutingService
from router.routing.topology import TWO_DOMAIN_IDS_FOR_ONE_DOMAIN

PORTAL_REPORT_INTERVAL_MS = 5000        # how often a portal reports a conflict it keeps hearing


def _service(timeout):
    events = []
    daemon = DaemonConfig(route_info=RouteInfo(timeout=timeout), route_recalculation=RouteRecalculation(500, 10000))
    routing = RoutingService(1, "r1", daemon, lambda portal, data: None, lambda table: None,
                             lambda event, text: events.append((event, text)))
    return routing, events


def _listed(routing, now) -> bool:
    return any(f["kind"] == TWO_DOMAIN_IDS_FOR_ONE_DOMAIN for f in routing.describe(now=now)["forbidden"])


def test_a_conflict_reported_every_few_seconds_never_drops_out_of_the_map():
    for timeout in (4000, 2000):        # the default route-info timeout, and a shorter one
        routing, events = _service(timeout)
        report_at = 0
        for now in range(0, 3 * PORTAL_REPORT_INTERVAL_MS, 250):     # the check timer, and the reports
            if now == report_at:
                routing.note_domain_id_conflict("LAN1", 1, 7, "10.0.0.7:12965", now=now)
                report_at += PORTAL_REPORT_INTERVAL_MS
            routing.check(now=now)
            assert _listed(routing, now), f"timeout {timeout}: the conflict dropped out at {now} ms"
        logged = [text for event, text in events if event == "forbidden-topology"]
        assert len(logged) == 1, logged


def test_a_conflict_no_longer_heard_is_forgotten():
    routing, _ = _service(4000)
    routing.note_domain_id_conflict("LAN1", 1, 7, "10.0.0.7:12965", now=0)
    later = 4000 + 2 * PORTAL_REPORT_INTERVAL_MS
    routing.check(now=later)
    assert not _listed(routing, later)


def test_a_conflict_heard_from_two_routers_is_logged_once_not_at_every_report():
    """Two routers on the domain say 7 where we say 1: the portal's reports name whichever it
    heard first in each interval. One forbidden topology, one error line, for as long as it lasts."""
    routing, events = _service(4000)
    for report, now in enumerate(range(0, 12 * PORTAL_REPORT_INTERVAL_MS, PORTAL_REPORT_INTERVAL_MS)):
        sender = "10.0.0.7:12965" if report % 2 == 0 else "10.0.0.8:12965"
        routing.note_domain_id_conflict("LAN1", 1, 7, sender, now=now)
        routing.check(now=now)
        assert _listed(routing, now)
    logged = [text for event, text in events if event == "forbidden-topology"]
    assert len(logged) == 1, logged
    assert "two domain ids, 1 and 7" in logged[0] and "10.0.0.7:12965" in logged[0]


def test_a_conflict_heard_again_after_it_was_forgotten_is_logged_again():
    routing, events = _service(4000)
    routing.note_domain_id_conflict("LAN1", 1, 7, "10.0.0.7:12965", now=0)
    gone = 4000 + 2 * PORTAL_REPORT_INTERVAL_MS
    routing.check(now=gone)
    assert not _listed(routing, gone)
    routing.note_domain_id_conflict("LAN1", 1, 7, "10.0.0.7:12965", now=gone + 1000)
    logged = [text for event, text in events if event == "forbidden-topology"]
    assert len(logged) == 2, "the operator hears of it each time it appears"
