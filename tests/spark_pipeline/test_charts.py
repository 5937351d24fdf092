"""The report's charts: router and portal names are the operator's free text, drawn as they are."""
import datetime as dt

import pytest

from spark_pipeline import charts
from spark_pipeline.job import draw_charts

T0 = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
# Valid DRO names that matplotlib would read as TeX (`$...$`) or leave out of a legend (a leading `_`).
ROUTER, PORTALS = "r$^$1", ("a$_$b", "_standby", "LAN$1")


@pytest.fixture
def drawn(monkeypatch):
    """Every text each chart drew, by file name (titles, legend entries, tick labels)."""
    texts = {}
    save = charts._save

    def recording(figure, path):
        figure.canvas.draw()
        texts[path.name] = [t.get_text() for t in figure.findobj(lambda artist: hasattr(artist, "get_text"))]
        return save(figure, path)
    monkeypatch.setattr(charts, "_save", recording)
    return texts


def test_names_with_dollars_and_underscores_are_drawn_as_written(tmp_path, drawn):
    rates = [{"router": ROUTER, "portal": portal, "bucket_start": T0 + dt.timedelta(seconds=s),
              "msgs_in_per_s": 10.0 * s, "msgs_out_per_s": 5.0 * s, "dropped": s}
             for portal in PORTALS for s in range(3)]
    fleet = [{"router": ROUTER, "bucket_start": row["bucket_start"], "msgs_out_per_s": row["msgs_out_per_s"],
              "dropped": row["dropped"], "interest_topics": 3, "interest_patterns": 1} for row in rates[:3]]
    drops = [{"router": ROUTER, "portal": portal, "reason": "would_block", "msgs_dropped": 7, "fraction": 0.5}
             for portal in PORTALS]
    rtt = [{"router": ROUTER, "portal": portal, "rtt_p50_us": 10.0, "rtt_p90_us": 20.0, "rtt_p99_us": 30.0}
           for portal in PORTALS]

    pictures = [charts.router_rates(rates, ROUTER, tmp_path / "rates.png"),
                charts.fleet_rates(fleet, tmp_path / "fleet.png"),
                charts.drops(drops, tmp_path / "drops.png"),
                charts.rtt(rtt, tmp_path / "rtt.png"),
                charts.interest(fleet, tmp_path / "interest.png")]

    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pictures)
    shown = " | ".join(drawn["rates.png"])
    assert all(name in shown for name in (*PORTALS, f"{ROUTER}: messages sent")), shown
    assert ROUTER in " | ".join(drawn["fleet.png"])
    assert all(f"{ROUTER}/{portal} would_block" in drawn["drops.png"] for portal in PORTALS), drawn["drops.png"]
    assert all(f"{ROUTER}/{portal}" in drawn["rtt.png"] for portal in PORTALS), drawn["rtt.png"]


def test_routers_whose_names_differ_only_in_unsafe_characters_get_a_chart_each(tmp_path):
    routers = ("ny 1", "ny/1", "ny_1")
    rates = [{"router": router, "portal": "LAN1", "bucket_start": T0 + dt.timedelta(seconds=s),
              "msgs_in_per_s": 1.0, "msgs_out_per_s": 1.0 * index, "dropped": 0}
             for index, router in enumerate(routers) for s in range(2)]
    tables = {"router_rates": [], "portal_rates": rates, "drops": [], "rtt": [], "router_map_sizes": [],
              "fleet_summary": [{"router": router, "msgs_out": 10 - index} for index, router in enumerate(routers)]}

    drawn, _ = draw_charts(tables, tmp_path)

    per_router = {caption: path for caption, path in drawn if caption.startswith("Router ")}
    assert list(per_router) == [f"Router {router}: rates by portal" for router in routers]
    assert len(set(per_router.values())) == len(routers), per_router
    assert all(path.parent == tmp_path and path.exists() for path in per_router.values())
