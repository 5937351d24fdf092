"""The web monitor's pages as data: one function per page, shared by the HTML and /json views.

Pages follow the DRO's web monitor (seed section 6, spec/dro.md §3.4): a main page with the map
sizes and unknown fragments, a portals page, one page per portal with all its statistics in the
DRO's rows and sections (router/monitor/portal_statistics.py) and, for an endpoint, links to the
UM options of its contexts by scope, a topology page, a path-info page (the path between two
domains, hop by hop), the configuration.
Every figure comes from router/monitor/views.py, as `routerctl stats` does.
"""
from __future__ import annotations

from urllib.parse import quote

from router.monitor import views
from router.monitor.portal_statistics import ENQUEUED, SECTIONS, SUMMARY

LINKS = (("Main", "/"), ("Portals", "/portals"), ("Topology Info", "/topology"), ("Path Info", "/path"),
         ("Memory", "/memory"), ("UM Router Configuration", "/config"), ("Prometheus metrics", "/metrics"))


def portal_href(name: str) -> str:
    return f"/portal/{quote(name, safe='')}"


def main_page(supervisor) -> dict:
    stats = views.portal_stats(supervisor)
    status = supervisor.status()
    return {**views.identity(supervisor), "pid": status["pid"], "uptime_s": status["uptime_s"],
            "topic_map": views.map_sizes(supervisor), "unknown_fragments": views.unknown_fragments(supervisor, stats),
            "portal_count": len(status["portals"]),
            "links": [{"title": title, "href": href} for title, href in LINKS]}


def portals_page(supervisor) -> dict:
    portals = [{"name": p["name"], "kind": p["kind"], "domain_id": p["domain_id"], "cost": p["cost"],
                "state": p["state"], "href": portal_href(p["name"])} for p in supervisor.status()["portals"]]
    return {"router": supervisor.name, "portals": portals}


def portal_page(supervisor, name: str, answer: dict | None) -> dict:
    """`answer` is the worker's reply to the "topics" query (None if it did not answer)."""
    config = supervisor.workers[name].config
    counters = views.portal_stats(supervisor, [name])[name]
    page = {"router": supervisor.name, "name": name, "kind": config.kind, "cost": config.cost,
            "domain_id": getattr(config, "domain_id", None),
            "options": [] if config.kind != "endpoint" else [
                {"title": title, "href": f"{portal_href(name)}/options/{page}"}
                for page, (title, _, _) in views.UM_OPTION_PAGES.items()],
            "summary": [{"label": label, "counter": counter, "value": counters[counter]}
                        for label, counter in SUMMARY[config.kind]],
            "enqueued": dict(zip(("current", "max", "limit"), (counters[key] for key in ENQUEUED))),
            "sections": [{"title": section.title, "paired": section.paired, "rows": _rows(section.rows, counters)}
                         for section in SECTIONS[config.kind]],
            "counters": counters, "topics": answer}
    return page


def _rows(definitions, counters: dict) -> list[dict]:
    return [{"label": label, "count_counter": count, "count": counters[count],
             "bytes_counter": size, "bytes": counters[size] if size else None}
            for label, count, size in definitions]


def portal_options_page(supervisor, name: str, which: str) -> dict | None:
    """One scope of an endpoint context's UM options (views.portal_options); None: no such page."""
    found = views.portal_options(supervisor, name, which)
    if found is None:
        return None
    return {"router": supervisor.name, "portal_href": portal_href(name), **found}


def memory_page(supervisor) -> dict:
    return views.memory(supervisor)


def topology_page(supervisor) -> dict:
    return views.topology(supervisor)


def path_page(supervisor, query: dict[str, list[str]]) -> dict:
    """`query` is the parsed query string (`from` and `to` domain ids). Without both, the page
    is the form alone; otherwise it also carries the path, or the error saying why there is none."""
    routing = getattr(supervisor, "routing", None)
    domains = list(routing.routes.domains) if routing is not None else []
    source, destination = (query.get(key, [""])[0].strip() for key in ("from", "to"))
    page = {"router": supervisor.name, "domains": domains, "from": source or None, "to": destination or None,
            "path": None, "error": None}
    if source and destination:
        page.update(views.path_info(supervisor, source, destination))
    elif source or destination:
        page["error"] = "choose both a source (from) and a destination (to) domain"
    return page


def config_page(supervisor) -> dict:
    """The configuration the router runs, as text: the file as it was read at start or at the
    last reload (the loader keeps it), so an edited-but-not-reloaded file is not shown as if it
    were running."""
    config = supervisor.config
    text = config.text if config.text is not None else \
        f"<!-- the text of {config.path} was not kept when it was read -->"
    return {"router": supervisor.name, "path": str(config.path), "xml": text}
