"""Route-info this router cannot read is counted, and said in the log without flooding it.

A router of another route-info version (a network being upgraded) floods its announcement every
propagation interval, and so does every router behind it: each one is dropped and counted here,
but a warning line for each would be one or more lines a second for as long as the upgrade lasts."""
import logging
from dataclasses import replace

from router.config.model import DaemonConfig, RouteInfo, RouteRecalculation
from router.routing.route_info import build_route_info
from router.routing.service import RoutingService
from router.routing.topology import Adjacency, RouterAnnouncement
from router.um.wire.lbmc import LbmcMessage, encode_lbmc


def _newer_version_route_info(node_id: int, sqn: int) -> bytes:
    message = build_route_info(RouterAnnouncement(node_id, f"r{node_id}", 1, sqn, (Adjacency.domain(3, 1),), 100))
    head = replace(message.headers[0], gateway_version=2)
    return encode_lbmc(LbmcMessage(message.msg_type, [head, *message.headers[1:]]))


def test_unreadable_route_info_is_counted_every_time_and_logged_now_and_then(caplog):
    daemon = DaemonConfig(route_info=RouteInfo(), route_recalculation=RouteRecalculation(500, 10000))
    routing = RoutingService(1, "r1", daemon, lambda portal, data: None, lambda table: None,
                             lambda event, text: logging.getLogger("router.test").warning("%s %s", event, text))
    seconds = 600
    with caplog.at_level(logging.WARNING):
        for second in range(seconds):
            for origin in (7, 8):           # two newer routers beyond portal P1
                routing.on_route_info("P1", _newer_version_route_info(origin, second + 1), now=second * 1000.0)
        routing.on_route_info("P2", _newer_version_route_info(9, 1), now=seconds * 1000.0)
    assert routing.counters["route_info_malformed"] == 2 * seconds + 1
    lines = [r.getMessage() for r in caplog.records if "route-info" in r.getMessage()]
    assert "route-info version 2 (this router speaks 1)" in lines[0] and "P1" in lines[0]
    assert len([line for line in lines if "P1" in line]) <= seconds // 10, len(lines)
    assert any("P2" in line for line in lines), "another portal's first one is said at once"
