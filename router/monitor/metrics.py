"""/metrics: the router's counters in Prometheus text format (prometheus-client).

A custom collector reads the counters when Prometheus scrapes, so there is no second copy of
them to keep in step. Every sample has `router` and `portal` labels (plus `kind`, and
`domain_id` for endpoints); counter names are the DRO's with `umrouter_` in front.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from router.monitor import stats_schema, views

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "umrouter_"

# Levels that go up and down (the statistics schema's list); everything else only grows while
# the router runs.
GAUGES = stats_schema.GAUGES
PORTAL_LABELS = ["router", "portal", "kind", "domain_id"]


class RouterCollector:
    def __init__(self, supervisor):
        self.supervisor = supervisor

    def collect(self):
        supervisor = self.supervisor
        stats = views.portal_stats(supervisor)
        status = {p["name"]: p for p in supervisor.status()["portals"]}
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for portal, counters in stats.items():
            labels = self._labels(portal, status[portal])
            for name, value in counters.items():
                family = families.get(name) or families.setdefault(name, self._family(name))
                family.add_metric(labels, value)
        yield from families.values()
        yield from self._portal_health(status)
        yield from self._router(stats)
        yield from self._memory(status)
        yield from self._statistics()

    def _labels(self, portal: str, state: dict) -> list[str]:
        domain = state.get("domain_id")
        return [self.supervisor.name, portal, state["kind"], "" if domain is None else str(domain)]

    @staticmethod
    def _family(name: str):
        if name in GAUGES:
            return GaugeMetricFamily(PREFIX + name, f"DRO statistic {name}", labels=PORTAL_LABELS)
        return CounterMetricFamily(PREFIX + name, f"DRO statistic {name}", labels=PORTAL_LABELS)

    def _portal_health(self, status: dict):
        up = GaugeMetricFamily(PREFIX + "portal_up", "1 when the portal's worker is running and ready",
                               labels=PORTAL_LABELS)
        restarts = CounterMetricFamily(PREFIX + "portal_restarts", "worker restarts since the router started",
                                       labels=PORTAL_LABELS)
        heartbeat = GaugeMetricFamily(PREFIX + "portal_heartbeat_age_seconds",
                                      "time since the worker's loop last beat", labels=PORTAL_LABELS)
        crash_loop = GaugeMetricFamily(PREFIX + "portal_crash_loop", "1 while the portal's worker keeps dying soon "
                                       "after it starts (UMR-1101-5)", labels=PORTAL_LABELS)
        for name, state in status.items():
            labels = self._labels(name, state)
            up.add_metric(labels, 1 if state["state"] == "up" else 0)
            restarts.add_metric(labels, state["restarts"])
            heartbeat.add_metric(labels, state["heartbeat_age_s"])
            crash_loop.add_metric(labels, 1 if state.get("crash_loop") else 0)
        return up, restarts, heartbeat, crash_loop

    def _router(self, stats: dict):
        supervisor = self.supervisor
        info = GaugeMetricFamily(PREFIX + "router_info", "the router's identity",
                                 labels=["router", "node_id", "version"])
        info.add_metric([supervisor.name, str(supervisor.node_id), views.version()], 1)
        sizes = GaugeMetricFamily(PREFIX + "topic_map_entries", "topics and patterns with interest",
                                  labels=["router", "map"])
        for kind, size in views.map_sizes(supervisor).items():
            sizes.add_metric([supervisor.name, kind], size)
        unknown = views.unknown_fragments(supervisor, stats)
        fragments = CounterMetricFamily(PREFIX + "unknown_fragments",
                                        "fragments from unknown sources, all portals (removed ones included)",
                                        labels=["router"])
        fragments.add_metric([supervisor.name], unknown["fragments"])
        return info, sizes, fragments


    def _memory(self, status: dict):
        """Each process's memory (router/monitor/memory.py), labelled supervisor or worker and the
        portals the worker runs."""
        labels = ["router", "process", "portals"]
        families = {field: GaugeMetricFamily(PREFIX + "process_" + field, f"memory of a router process: {what}",
                                             labels=labels)
                    for field, what in (("resident_bytes", "resident set (RSS)"),
                                        ("proportional_bytes", "proportional set (PSS)"),
                                        ("private_bytes", "private, its own"))}
        for process in views.memory(self.supervisor, {"portals": list(status.values())})["processes"]:
            values = [self.supervisor.name, process["process"], ",".join(process["portals"])]
            families["resident_bytes"].add_metric(values, process["rss_bytes"])
            families["proportional_bytes"].add_metric(values, process["pss_bytes"])
            families["private_bytes"].add_metric(values, process["private_bytes"])
        return families.values()


    def _statistics(self):
        """The Parquet sink's health, when `<monitor>` selects it (router/monitor/parquet_sink.py):
        an alert on statistics that stopped reaching the disk needs no log scraping."""
        sink = views.statistics(self.supervisor)
        if sink is None:
            return ()
        labels, values = ["router", "dir"], [self.supervisor.name, sink["dir"]]
        writing = GaugeMetricFamily(PREFIX + "statistics_writing", "1 while this router writes its statistics "
                                    "directory, 0 while another router of the same name holds it (UMR-5001-3)",
                                    labels=labels)
        writing.add_metric(values, 0 if sink["held_by"] else 1)
        families = [writing]
        for name, what in (("statistics_writes", "statistics files written"),
                           ("statistics_write_errors", "statistics writes that failed (UMR-5001-1), retried"),
                           ("statistics_rows_dropped", "rows given up after the disk kept failing"),
                           ("statistics_rows_not_written", "rows read while another router held the directory")):
            family = CounterMetricFamily(PREFIX + name, what, labels=labels)
            family.add_metric(values, sink[name.removeprefix("statistics_")])
            families.append(family)
        return families


def registry_for(supervisor) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RouterCollector(supervisor))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
