from __future__ import annotations

from router.admin import tables
from router.admin.commands.base import Argument, Command, portal_names
from router.monitor.views import interest_map

QUERY_TIMEOUT = 2.0


class Topics(Command):
    """Show the topic map and, per portal, its domain's interest, proxy receivers and proxy sources.

    Usage: routerctl topics [PORTAL]

    The portals' workers are asked over the control bus; the reply comes when all have answered
    (a worker that is down or does not answer within 2 s shows as null).

    Reply data:
      {"interest": {"topics": {TOPIC: [PORTAL]}, "pcre_patterns": {...}, "regex_patterns": {...}},
       "portals": {PORTAL: null | {
           "local_interest": {"topics": [..], "pcre_patterns": [..], "regex_patterns": [..]},
           "proxy_receivers": [TOPIC], "proxy_wildcard_receivers": ["pcre:PATTERN" | "regex:PATTERN"],
           "proxy_sources": [{"topic", "source", "cost", "hop_count", "origin_domain_id", "receivers"}],
           "streams": [{"topic", "source", "to"}]}}}
    `interest` is the router-wide map: which portals' domains want each topic or pattern.
    """

    arguments = (Argument("portal", "only this portal"),)

    def start(self, supervisor, props: dict, reply) -> None:
        names = portal_names(supervisor, props.get("portal"))
        # Read the topic map now, on the loop, not when the answers come back.
        interest = interest_map(supervisor)
        supervisor.query_workers("topics", names,
                                 lambda answers: reply.ok({"interest": interest, "portals": answers}),
                                 QUERY_TIMEOUT)

    def render(self, data: dict) -> str:
        blocks = []
        for name, answer in data["portals"].items():
            if answer is None:
                blocks.append(f"portal {name}: no answer (worker down or busy)")
                continue
            local = answer.get("local_interest", {})
            lines = [f"portal {name}",
                     f"  local interest: {_join(local.get('topics'))}",
                     f"  local patterns: {_join([*local.get('pcre_patterns', []), *local.get('regex_patterns', [])])}",
                     f"  proxy receivers: {_join(answer.get('proxy_receivers'))}"]
            if answer.get("proxy_wildcard_receivers"):
                lines.append(f"  proxy wildcard receivers: {_join(answer['proxy_wildcard_receivers'])}")
            sources = answer.get("proxy_sources") or []
            if sources:
                rows = [[s["topic"], s["source"], s["cost"], s["hop_count"], s["origin_domain_id"], s["receivers"]]
                        for s in sources]
                table = tables.table(["TOPIC", "SOURCE", "COST", "HOPS", "FROM-DOMAIN", "RECEIVERS"], rows)
                lines.append("  proxy sources:\n" + "\n".join("    " + line for line in table.splitlines()))
            else:
                lines.append("  proxy sources: -")
            blocks.append("\n".join(lines))
        rows = [[kind, symbol, ", ".join(portals)] for kind, symbols in data["interest"].items()
                for symbol, portals in symbols.items()]
        if rows:
            blocks.append("topic map\n" + tables.table(["KIND", "TOPIC/PATTERN", "WANTED BY"], rows))
        return "\n\n".join(blocks)


def _join(items) -> str:
    return ", ".join(items) if items else "-"
