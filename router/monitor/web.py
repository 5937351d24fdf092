"""The web monitor: the DRO's read-only status pages, their JSON twins, and Prometheus /metrics.

    /                 main page: identity, topic and pattern map sizes, unknown fragments, links
    /portals          every portal, linked to its page
    /portal/NAME      a portal's interest, proxies and statistics (router/monitor/portal_statistics.py)
    /portal/NAME/options/SCOPE
                      an endpoint context's UM options of one scope, with where each was set
                      (source-context, receive-context, source, receiver, wildcard-receiver)
    /topology         the routing graph: routers, adjacencies, signatures, forbidden topologies, paths
    /path?from=D&to=D the path between two domains, hop by hop (a form picks the two)
    /memory           the memory of the supervisor and each worker process (RSS, PSS, private)
    /config           the configuration file the router runs
    /json/main, /json/portals, /json/portal/NAME[/options/SCOPE], /json/topology, /json/memory,
    /json/path?from=D&to=D, /json/config
    /metrics          Prometheus text format

Enabled by `<web-monitor>interface:port</web-monitor>` (the validator's host: an address, or
0.0.0.0 for the DRO's `*`); no element, no server. Served from the supervisor's loop
(http_loop.py says why); no page can change anything.
"""
from __future__ import annotations

import json
import logging
from urllib.parse import parse_qs

from router.eventlog import event
from router.monitor import html, metrics, pages
from router.monitor.http_loop import HttpRequest, HttpServer, Respond
from router.um.netif import resolve_interface

log = logging.getLogger(__name__)

QUERY_TIMEOUT = 1.0            # a portal page waits this long for its worker's proxy lists
HTML = "text/html; charset=utf-8"
JSON = "application/json"


class WebMonitor:
    def __init__(self, supervisor, host: str, port: int):
        self.supervisor = supervisor
        self.registry = metrics.registry_for(supervisor)
        self.server = HttpServer(supervisor.loop, host, port, self.handle)
        self.address = self.server.address
        self.pages = {
            "/": (lambda: pages.main_page(self.supervisor), html.main),
            "/portals": (lambda: pages.portals_page(self.supervisor), html.portals),
            "/topology": (lambda: pages.topology_page(self.supervisor), html.topology),
            "/memory": (lambda: pages.memory_page(self.supervisor), html.memory),
            "/config": (lambda: pages.config_page(self.supervisor), html.config),
        }
        log.info("web monitor at http://%s:%d/", *self.address[:2])

    def handle(self, request: HttpRequest, respond: Respond) -> None:
        path = request.path.rstrip("/") or "/"
        as_json = path == "/json" or path.startswith("/json/")
        if as_json:
            path = path[len("/json"):] or "/"
            path = "/" if path == "/main" else path
        if path == "/metrics" and not as_json:
            respond(200, metrics.CONTENT_TYPE, metrics.render(self.registry))
        elif path == "/path":
            self._send(respond, pages.path_page(self.supervisor, parse_qs(request.query)), html.path, as_json)
        elif path in self.pages:
            build, render = self.pages[path]
            self._send(respond, build(), render, as_json)
        elif path.startswith("/portal/"):
            name = path[len("/portal/"):]
            portal, _, which = name.rpartition("/options/")
            if name not in self.supervisor.workers and portal:
                found = pages.portal_options_page(self.supervisor, portal, which)
                if found is None:
                    respond(404, "text/plain; charset=utf-8", f"no page {request.path}\n".encode())
                else:
                    self._send(respond, found, html.portal_options, as_json)
            else:
                self._portal(name, respond, as_json)
        else:
            respond(404, "text/plain; charset=utf-8", f"no page {request.path}; try /\n".encode())

    def _portal(self, name: str, respond: Respond, as_json: bool) -> None:
        if name not in self.supervisor.workers:
            respond(404, "text/plain; charset=utf-8", f"no portal named {name}\n".encode())
            return

        def answered(answers: dict) -> None:
            # Called from the supervisor's bus handler: an exception here must not escape into it.
            try:
                if name not in self.supervisor.workers:          # removed by a reload meanwhile
                    respond(404, "text/plain; charset=utf-8", f"portal {name} was removed\n".encode())
                    return
                page = pages.portal_page(self.supervisor, name, answers.get(name))
                self._send(respond, page, html.portal, as_json)
            except Exception:
                log.exception("web monitor: portal page %s failed", name)
                respond(500, "text/plain; charset=utf-8", b"internal error (see the router's log)\n")
        self.supervisor.query_workers("topics", [name], answered, QUERY_TIMEOUT)

    @staticmethod
    def _send(respond: Respond, data: dict, render, as_json: bool) -> None:
        if as_json:
            respond(200, JSON, json.dumps(data, indent=1).encode())
        else:
            respond(200, HTML, render(data))

    def close(self) -> None:
        self.server.close()


def start(supervisor) -> WebMonitor | None:
    """The extension factory (router/extensions.py): nothing unless <web-monitor> is configured.
    A port that cannot be bound is logged; the router routes on without its monitor."""
    settings = supervisor.config.daemon.web_monitor
    if settings is None:
        return None
    try:
        return WebMonitor(supervisor, _address_of(settings.host), settings.port)
    except ValueError as err:                   # no such interface or network on this host now
        event("web-monitor-unavailable", f"web monitor: cannot listen on {settings.host}:{settings.port}: {err}")
    except OSError as err:
        event("web-monitor-unavailable", f"web monitor: cannot listen on {settings.host}:{settings.port}: "
                                         f"{err.strerror}")
    return None


def _address_of(host: str) -> str:
    """<web-monitor>'s interface as UM reads interfaces (an address, a network, an interface name),
    and a host name as any server does."""
    if ":" in host or "/" in host:              # IPv6, or a network: this host's address in it
        return resolve_interface(host) if "/" in host else host
    try:
        return resolve_interface(host)
    except ValueError:
        return host                             # a host name: bind resolves it
