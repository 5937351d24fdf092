"""The web monitor's pages as HTML: plain markup, one small stylesheet, no scripts.

Every counter cell carries `data-counter="NAME"` so a test (or a scraper) can read a figure by
its DRO name rather than by its position in a table.
"""
from __future__ import annotations

from html import escape
from urllib.parse import urlencode

from router.monitor.pages import LINKS
from router.monitor.views import adjacency_summary, adjacent_text, forbidden_line

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
.forbidden { background: #fdd; border: 2px solid #c00; color: #900; padding: 0.5em 1em; font-weight: bold; }
.error { color: #900; font-weight: bold; }
tr.set td { font-weight: bold; }
"""


def page(title: str, router: str, body: str) -> bytes:
    nav = " ".join(f'<a href="{escape(href)}">{escape(text)}</a>' for text, href in LINKS)
    document = (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<title>{escape(title)} - {escape(router)}</title><style>{STYLE}</style></head>"
                f"<body><nav>{nav}</nav><h1>{escape(title)}</h1>\n{body}\n"
                f"<p class=\"muted\">umrouter web monitor (read-only) - router {escape(router)}</p></body></html>\n")
    return document.encode("utf-8", "backslashreplace")    # a topic of any bytes shows escaped


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
    links = "".join(f'<li><a href="{escape(link["href"])}">{escape(link["title"])}</a></li>'
                    for link in data["options"])
    head = [("Domain ID", "-" if data["domain_id"] is None else str(data["domain_id"])),
            ("Portal Cost", f'<span data-counter="cost">{data["cost"]}</span>')]
    head += [(row["label"], f'<span data-counter="{row["counter"]}">{row["value"]}</span>') for row in data["summary"]]
    enqueued = data["enqueued"]
    head.append(("Current/maximum data bytes enqueued",
                 f'<span data-counter="data_bytes_enqueued">{enqueued["current"]}</span> / '
                 f'<span data-counter="data_bytes_enqueued_max">{enqueued["max"]}</span> '
                 f'(limit: <span data-counter="data_bytes_enqueued_limit">{enqueued["limit"]}</span>)'))
    body = (f"<ul>{links}</ul>" if links else "") + _pairs(head)
    for section in data["sections"]:
        body += f"<h2>{escape(section['title'])}</h2>" + _statistics(section["rows"], section["paired"])
    body += _proxies(data.get("topics"))
    return page(f"{kind} Portal {data['name']}", data["router"], body)


def _statistics(rows: list[dict], paired: bool) -> str:
    if not paired:
        cells = "".join(f"<tr><th>{escape(r['label'])}</th>{_number(r['count_counter'], r['count'])}</tr>"
                        for r in rows)
        return f"<table>{cells}</table>"
    cells = "".join(f"<tr><th>{escape(r['label'])}</th>{_number(r['count_counter'], r['count'])}"
                    f"{_number(r['bytes_counter'], r['bytes'])}</tr>" for r in rows)
    return f"<table><tr><th></th><th>fragments / messages</th><th>bytes</th></tr>{cells}</table>"


def portal_options(data: dict) -> bytes:
    """One scope of a portal context's UM options: value, default, and the file and line that set it."""
    rows = "".join(_option_row(option) for option in data["options"])
    back = f'<p><a href="{escape(data["portal_href"])}">Endpoint Portal {escape(data["portal"])}</a></p>'
    table = f"<table><tr><th>Option</th><th>Value</th><th>Default</th><th>Set by</th></tr>{rows}</table>"
    return page(f"{data['title']} - {data['portal']}", data["router"], back + table)


def _option_row(option: dict) -> str:
    origin = option["origin"] or ("set by the router" if option["set"] else "default")
    emphasis = ' class="set"' if option["set"] else ""
    return (f'<tr{emphasis} data-option="{escape(option["option"])}"><td>{escape(option["option"])}</td>'
            f'<td>{escape(option["value"])}</td><td class="muted">{escape(option["default"])}</td>'
            f'<td>{escape(origin)}</td></tr>')


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
    names = {data["node_id"]: data["router"], **{o["node_id"]: o["router"] for o in data["other_routers"]}}
    # Forbidden topologies first, as routerctl topology prints them: they need an operator.
    forbidden = "".join(f'<p class="forbidden" data-kind="{escape(item["kind"])}">'
                        f'{escape(forbidden_line(item["message"]))}</p>' for item in data["forbidden"])
    age = data["last_recalculation_age_s"]
    rows = [("UM Router name", escape(data["router"])), ("UM Router ID", f"{data['node_id']:#018x}"),
            ("Software version", escape(data["version"])), ("Self version", _text(data["self_version"])),
            ("Topology signature", _text(data["signature"])),
            ("Announced signature", _text(data["announced_signature"])),
            ("Converged", f'<span data-converged="{str(data["converged"]).lower()}">'
                          f'{"yes" if data["converged"] else "no"}</span>'),
            ("UM Router count", str(data["router_count"])), ("TRD count", str(data["domain_count"])),
            ("Route table version", _text(data["map_version"])),
            ("Recalculations", str(data["recalculations"])),
            ("Last recalculation (seconds ago)", "-" if age is None else f"{age:.1f}"),
            ("Last recalculation duration (ms)", _text(data["last_recalculation_ms"])),
            ("Last recalculation triggered by", escape(", ".join(data["last_changes"])) or "-"),
            ("Changes pending", escape(", ".join(data["pending_changes"])) or "-")]
    portal_rows = "".join(
        f"<tr><td>{escape(p['name'])}</td><td>{escape(p['kind'])}</td>"
        f"<td>{escape(adjacent_text(p, names))}</td>"
        f"<td class=\"n\">{p['cost']}</td></tr>" for p in data["portals"])
    portals_table = ("<table><tr><th>Portal</th><th>Kind</th><th>Adjacent domain / router</th><th>Cost</th></tr>"
                     f"{portal_rows}</table>")
    routers = [(f"{data['router']} (this router)", data["node_id"], data["self_version"],
                data["announced_signature"], None, data["portals"])]
    routers += [(o["router"], o["node_id"], o["version"], o["signature"], o["last_heard_age_ms"], o["portals"])
                for o in data["other_routers"]]
    router_rows = "".join(
        f"<tr><td>{escape(name)}</td><td>{node_id:#x}</td><td class=\"n\">{_text(version)}</td>"
        f"<td>{_text(signature)}</td><td class=\"n\">{'-' if heard is None else f'{heard / 1000:.1f}'}</td>"
        f"<td>{escape(adjacency_summary(portals, names))}</td></tr>"
        for name, node_id, version, signature, heard, portals in routers)
    routers_table = ("<table><tr><th>Name</th><th>Node ID</th><th>Version</th><th>Signature</th>"
                     f"<th>Last heard (seconds ago)</th><th>Adjacencies</th></tr>{router_rows}</table>")
    path_rows = "".join(
        f"<tr><td class=\"n\">{p['from']}</td><td class=\"n\">{p['to']}</td><td class=\"n\">{p['cost']}</td>"
        f"<td><a href=\"{escape(_path_href(p['from'], p['to']))}\">{escape(p['text'])}</a></td></tr>"
        for p in data["paths"])
    paths_table = (f"<table><tr><th>From</th><th>To</th><th>Cost</th><th>Route</th></tr>{path_rows}</table>"
                   if path_rows else "<p>-</p>")
    counters = _pairs([(name, str(value)) for name, value in data["routing_counters"].items()])
    return page("Topology Info", data["router"],
                forbidden + _pairs(rows) + "<h2>Portals</h2>" + portals_table + "<h2>Routers</h2>" + routers_table
                + "<h2>Paths</h2>" + paths_table
                + ("<h2>Route information</h2>" + counters if data["routing_counters"] else ""))


def _text(value) -> str:
    return "-" if value is None else escape(str(value))


def _path_href(source, destination) -> str:
    return "/path?" + urlencode({"from": source, "to": destination})


def path(data: dict) -> bytes:
    body = _path_form(data)
    if data["error"] is not None:
        body += f'<p class="error">{escape(data["error"])}</p>'
    found = data["path"]
    if found is not None:
        rows = []
        for number, hop in enumerate(found["hops"]):
            if hop["kind"] == "domain":
                rows.append(f'<tr><td class="n">{number}</td><td>domain {hop["node"]}</td><td>-</td>'
                            f'<td class="n muted">-</td><td>-</td></tr>')
            else:
                rows.append(f'<tr data-hop="{number}"><td class="n">{number}</td>'
                            f'<td>router {escape(hop["name"] or "?")}</td><td>{hop["node"]:#x}</td>'
                            f'<td class="n" data-hop-cost="{escape(hop["name"])}">{hop["cost"]}</td>'
                            f'<td>{escape(hop["portal"] or "-")}</td></tr>')
        body += (f'<h2>From domain {found["from"]} to domain {found["to"]}</h2>'
                 f'<p>Total cost <span data-path-cost="total">{found["cost"]}</span>, '
                 f'{found["routers"]} router(s)</p>'
                 "<table><tr><th>Hop</th><th>Node</th><th>Node ID</th><th>Cost (leaving)</th>"
                 f"<th>Leaves by</th></tr>{''.join(rows)}</table><p>{escape(found['text'])}</p>")
    return page("Path Info", data["router"], body)


def _path_form(data: dict) -> str:
    """GET /path?from=D&to=D: two select lists of the domains in the map."""
    if not data["domains"]:
        return '<p class="muted">no domains in the topology map</p>'
    selects = []
    for field, label in (("from", "From domain"), ("to", "To domain")):
        chosen = "" if data[field] is None else str(data[field])
        options = "".join(f'<option value="{escape(str(domain))}"{" selected" if str(domain) == chosen else ""}>'
                          f'{escape(str(domain))}</option>' for domain in data["domains"])
        selects.append(f'<label>{label} <select name="{field}">{options}</select></label>')
    return f'<form method="get" action="/path">{" ".join(selects)} <button type="submit">Show path</button></form>'


def memory(data: dict) -> bytes:
    rows = "".join(
        f'<tr data-pid="{p["pid"]}"><td>{escape(p["process"])}</td><td>{escape(", ".join(p["portals"])) or "-"}</td>'
        f'<td class="n">{p["pid"]}</td>'
        + "".join(f'<td class="n" data-field="{field}">{_mib(p[field])}</td>'
                  for field in ("rss_bytes", "rss_peak_bytes", "pss_bytes", "private_bytes", "shared_bytes"))
        + f'<td class="n">{p["threads"]}</td></tr>' for p in data["processes"])
    table = ("<table><tr><th>Process</th><th>Portals</th><th>PID</th><th>RSS (MiB)</th><th>Peak RSS (MiB)</th>"
             "<th>PSS (MiB)</th><th>Private (MiB)</th><th>Shared (MiB)</th><th>Threads</th></tr>"
             f"{rows}</table>")
    totals = _pairs([("Total PSS (MiB)", _mib(data["total_pss_bytes"])),
                     ("Total private (MiB)", _mib(data["total_private_bytes"]))])
    note = ('<p class="muted">RSS counts the shared-memory rings and counters in every process that maps '
            "them; PSS shares them out, so it adds up; private memory is a process's own.</p>")
    return page("Memory", data["router"], totals + table + note)


def _mib(size: int) -> str:
    return f"{size / 1048576:.1f}"


def config(data: dict) -> bytes:
    return page("UM Router Configuration", data["router"],
                f"<p>{escape(data['path'])}</p><pre>{escape(data['xml'])}</pre>")
