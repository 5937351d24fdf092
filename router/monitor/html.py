"""The web monitor's pages as HTML: plain markup, one small stylesheet, no scripts.

Every counter cell carries `data-counter="NAME"` so a test (or a scraper) can read a figure by
its DRO name rather than by its position in a table.
"""
from __future__ import annotations

from html import escape

STYLE = """
body { font-family: DejaVu Sans, Helvetica, Arial, sans-serif; margin: 1.5em; color: #222; }
nav a { margin-right: 1.2em; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.5em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #eef; }
pre { background: #f6f6f6; padding: 1em; border: 1px solid #ddd; overflow-x: auto; }
.muted { color: #777; }
"""


def page(title: str, router: str, body: str) -> bytes:
    nav = " ".join(f'<a href="{href}">{escape(text)}</a>' for text, href in (
        ("Main", "/"), ("Portals", "/portals"), ("Topology Info", "/topology"),
        ("UM Router Configuration", "/config"), ("Metrics", "/metrics")))
    document = (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<title>{escape(title)} - {escape(router)}</title><style>{STYLE}</style></head>"
                f"<body><nav>{nav}</nav><h1>{escape(title)}</h1>\n{body}\n"
                f"<p class=\"muted\">umrouter web monitor (read-only) - router {escape(router)}</p></body></html>\n")
    return document.encode()


def _number(counter: str | None, value) -> str:
    if counter is None or value is None:
        return '<td class="n muted">-</td>'
    return f'<td class="n" data-counter="{escape(counter)}">{int(value)}</td>'


def _pairs(rows: list[tuple[str, str]]) -> str:
    return "<table>" + "".join(f"<tr><th>{escape(k)}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def main(data: dict) -> bytes:
    sizes, unknown = data["topic_map"], data["unknown_fragments"]
    rows = [("Router name", escape(data["router"])), ("Router ID", f"{data['node_id']:#018x} ({data['node_id']})"),
            ("Version", escape(data["version"])), ("Process id", str(data["pid"])),
            ("Uptime (seconds)", f"{data['uptime_s']:.0f}"), ("Portals", str(data["portal_count"])),
            ("Topics in topic map", f'<span data-counter="topic_map_topics">{sizes["topics"]}</span>'),
            ("PCRE patterns in pattern map", f'<span data-counter="pattern_map_pcre">{sizes["pcre_patterns"]}</span>'),
            ("REGEX patterns in pattern map",
             f'<span data-counter="pattern_map_regex">{sizes["regex_patterns"]}</span>'),
            ("Unknown fragments/bytes received",
             f'<span data-counter="unknown_fragments">{unknown["fragments"]}</span> / '
             f'<span data-counter="unknown_fragment_bytes">{unknown["bytes"]}</span>')]
    links = "<ul>" + "".join(f'<li><a href="{link["href"]}">{escape(link["title"])}</a></li>'
                             for link in data["links"]) + "</ul>"
    return page("UM Router", data["router"], _pairs(rows) + links)


def portals(data: dict) -> bytes:
    rows = "".join(f'<tr><td><a href="{p["href"]}">{escape(p["kind"].capitalize())} Portal {escape(p["name"])}</a>'
                   f'</td><td class="n">{"-" if p["domain_id"] is None else p["domain_id"]}</td>'
                   f'<td class="n">{p["cost"]}</td><td>{escape(p["state"])}</td></tr>' for p in data["portals"])
    table = f"<table><tr><th>Portal</th><th>Domain ID</th><th>Cost</th><th>State</th></tr>{rows}</table>"
    return page("Portals", data["router"], table)


def portal(data: dict) -> bytes:
    kind = data["kind"].capitalize()
    head = [("Domain ID", "-" if data["domain_id"] is None else str(data["domain_id"])),
            ("Portal Cost", f'<span data-counter="cost">{data["cost"]}</span>')]
    head += [(row["label"], f'<span data-counter="{row["counter"]}">{row["value"]}</span>') for row in data["summary"]]
    enqueued = data["enqueued"]
    head.append(("Current/maximum data bytes enqueued",
                 f'<span data-counter="data_bytes_enqueued">{enqueued["current"]}</span> / '
                 f'<span data-counter="data_bytes_enqueued_max">{enqueued["max"]}</span> '
                 f'(limit: <span data-counter="data_bytes_enqueued_limit">{enqueued["limit"]}</span>)'))
    body = _pairs(head)
    body += "<h2>Receive Statistics</h2>" + _statistics(data["receive"])
    body += "<h2>Send Statistics</h2>" + _statistics(data["send"])
    body += _proxies(data.get("topics"))
    return page(f"{kind} Portal {data['name']}", data["router"], body)


def _statistics(rows: list[dict]) -> str:
    cells = "".join(f"<tr><th>{escape(r['label'])}</th>{_number(r['count_counter'], r['count'])}"
                    f"{_number(r['bytes_counter'], r['bytes'])}</tr>" for r in rows)
    return f"<table><tr><th></th><th>fragments / messages</th><th>bytes</th></tr>{cells}</table>"


def _proxies(topics: dict | None) -> str:
    if topics is None:
        return '<h2>Proxies</h2><p class="muted">the portal\'s worker did not answer</p>'
    receivers = ", ".join(escape(t) for t in topics.get("proxy_receivers", [])) or "-"
    rows = "".join(f"<tr><td>{escape(s['topic'])}</td><td>{escape(s['source'])}</td><td class=\"n\">{s['cost']}</td>"
                   f"<td class=\"n\">{s['hop_count']}</td><td class=\"n\">{s['receivers']}</td></tr>"
                   for s in topics.get("proxy_sources", []))
    header = "<tr><th>Topic</th><th>Source</th><th>Cost</th><th>Hops</th><th>Receivers</th></tr>"
    sources = f"<table>{header}{rows}</table>" if rows else "<p>-</p>"
    return f"<h2>Proxy receivers</h2><p>{receivers}</p><h2>Proxy sources</h2>{sources}"


def topology(data: dict) -> bytes:
    rows = [("UM Router name", escape(data["router"])), ("UM Router ID", f"{data['node_id']:#018x}"),
            ("Self version", escape(data["version"])), ("UM Router count", str(data["router_count"])),
            ("TRD count", str(data["domain_count"]))]
    portal_rows = "".join(
        f"<tr><td>{escape(p['name'])}</td><td>{escape(p['kind'])}</td>"
        f"<td class=\"n\">{_adjacent(p)}</td>"
        f"<td class=\"n\">{p['cost']}</td></tr>" for p in data["portals"])
    table = ("<table><tr><th>Portal</th><th>Kind</th><th>Adjacent domain / router</th><th>Cost</th></tr>"
             f"{portal_rows}</table>")
    others = "".join(f"<li>{escape(o['router'])} ({o['node_id']:#018x})</li>" for o in data["other_routers"])
    return page("Topology Info", data["router"],
                _pairs(rows) + "<h2>Portals</h2>" + table + "<h2>Other routers</h2>"
                + (f"<ul>{others}</ul>" if others else "<p>-</p>"))


def _adjacent(portal: dict) -> str:
    value = portal.get("adjacent_domain_id", portal.get("adjacent_node_id"))
    return "-" if value is None else str(value)


def config(data: dict) -> bytes:
    return page("UM Router Configuration", data["router"],
                f"<p>{escape(data['path'])}</p><pre>{escape(data['xml'])}</pre>")
