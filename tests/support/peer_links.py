"""Routers joined by peer links on loopback, as the multi-router tests set them up.

Routing timers are shortened (FAST_ROUTING) so convergence and failover take a second or two;
`converged` is what "the routers agree on the topology" means in every such test.
"""
from __future__ import annotations

import json
import subprocess
import sys

from tests.support.processes import wait_for
from tests.support.routers import (BURST_ROUTING, FAST_ROUTING, PATIENT_KEEPALIVE, endpoint_xml, free_port,
                                   peer_xml)


def start(routers, portals: str, name: str, daemon_extra: str = "", env: dict | None = None):
    """A router with the shortened routing timers."""
    return routers.start(portals, FAST_ROUTING + daemon_extra, name=name, env=env)


def routerctl(router, *args) -> dict:
    out = subprocess.run([sys.executable, "-m", "router.cli.routerctl", "-n", router.name, "--json", *args],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def signatures(*routers) -> set[str]:
    return {routerctl(r, "topology")["signature"] for r in routers}


def converged(routers_, count: int) -> bool:
    """Every router knows `count` routers, all compute the same topology signature, and every
    router has recalculated its routes since (nothing pending)."""
    replies = [routerctl(r, "topology") for r in routers_]
    return (all(reply["router_count"] == count and not reply["pending_changes"] for reply in replies)
            and len({r["signature"] for r in replies}) == 1)


def linked_pair(routers, lan1, lan2, prefix: str, *, port: int | None = None, a_link: dict | None = None,
                b_link: dict | None = None, daemon_extra: tuple[str, str] = ("", ""), env_b: dict | None = None,
                timeout: float = 20):
    """LAN1 - router A - peer link - router B - LAN2, converged: (A, B). A's endpoint is portal 0
    and its peer portal TO_B portal 1; B's peer portal TO_A is portal 0 and its endpoint portal 1.
    `a_link`/`b_link` are peer_xml's keywords for each end (extra, cost, link_extra, keepalive);
    A connects to `port` (a free one unless given), B listens on it."""
    port = port or free_port()
    a = start(routers, endpoint_xml("LAN1", 1, lan1.config_path) + peer_xml("TO_B", connect=port, **(a_link or {})),
              f"{prefix}a", daemon_extra[0])
    b = start(routers, peer_xml("TO_A", listen=port, **(b_link or {})) + endpoint_xml("LAN2", 2, lan2.config_path),
              f"{prefix}b", daemon_extra[1], env_b)
    a.wait_ready(), b.wait_ready()
    wait_for(lambda: converged([a, b], 2), timeout, message="both routers know both")
    return a, b


def router_chain(routers, lan1, lan_far, hops: int, name: str, *, far_extra: str = "", link_extra=("", ""),
                 transit_lans=(), keepalive: str = PATIENT_KEEPALIVE, routing: str = BURST_ROUTING):
    """LAN1 - A - link - [B - link -] Z - far LAN, routes converged: (routers first to last, link ports).
    Made for bursts (late joins move thousands of answers at once): the links are patient and a
    router is declared gone after 4 s, unless a test freezes a router to end a link
    (`keepalive` FAST_KEEPALIVE). `link_extra`: extra <peer> content for the connecting and the
    listening side of every link; `transit_lans`: a LAN of its own for each transit router
    (domain ids 10, 11...)."""
    ports = [free_port() for _ in range(hops)]
    connecting, listening = link_extra
    xml = [endpoint_xml("LAN1", 1, lan1.config_path)
           + peer_xml("NEXT", connect=ports[0], extra=connecting, keepalive=keepalive)]
    for n in range(1, hops):
        own = endpoint_xml(f"MID{n}", 9 + n, transit_lans[n - 1].config_path) if transit_lans else ""
        xml.append(peer_xml("PREV", listen=ports[n - 1], extra=listening, keepalive=keepalive)
                   + peer_xml("NEXT", connect=ports[n], extra=connecting, keepalive=keepalive) + own)
    xml.append(peer_xml("PREV", listen=ports[-1], extra=listening, keepalive=keepalive)
               + endpoint_xml("FAR", 2, lan_far.config_path, before_config=far_extra))
    chain = [routers.start(portals, routing, name=f"{name}{n}") for n, portals in enumerate(xml)]
    for router in chain:
        router.wait_ready()
    wait_for(lambda: converged(chain, len(chain)), 30, message="every router knows every other")
    return chain, ports


def send_across(tools, source_domain, receiver_domains, topic, count, rate=20000, length=64, others=()):
    """A umrcv in each receiver domain; the source starts once they, and the receivers already
    started in `others`, have joined it (a TCP receiver that joins late misses what came before).
    The receivers' summaries."""
    receivers = [tools.umrcv("-c", d.config_path, "--json", "-C", count, "--timeout", 120, topic)
                 for d in receiver_domains]
    source = tools.umsrc("-c", source_domain.config_path, "--json", "-M", count, "-l", length, "-P", rate,
                         "--start-on-stdin", topic)
    for receiver in [*receivers, *others]:
        receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    assert source.result(120)["sent"] == count
    return [receiver.result(120) for receiver in receivers]
