"""What the web monitor shows around a reload: the configuration that runs, router-wide counters
that never go back when a portal is removed."""
import json
import os

import pytest

from tests.monitor.test_web_monitor import fetch
from tests.support.processes import wait_for
from tests.support.routerctl import routerctl, two_lan_router
from tests.support.routers import free_port


@pytest.mark.integration
def test_config_page_shows_the_file_as_loaded_not_as_edited_since(runtime_dir, routers, make_domain):
    port = free_port()
    router = two_lan_router(routers, make_domain(), make_domain(),
                            daemon_extra=f"    <web-monitor>127.0.0.1:{port}</web-monitor>\n")
    loaded = router.config.read_text()
    # The operator edits the file and has not reloaded yet; nobody has looked at /config so far.
    router.config.write_text(loaded.replace("<portals>", "<portals>\n    <!-- edited, not reloaded -->"))
    status, _, body = fetch(f"http://127.0.0.1:{port}/json/config")
    assert status == 200
    assert json.loads(body)["xml"] == loaded        # what runs, not what the file says now

    assert routerctl("reload").code == 0
    wait_for(lambda: "edited, not reloaded" in json.loads(fetch(f"http://127.0.0.1:{port}/json/config")[2])["xml"],
             10, message="the reloaded file is shown")


def prometheus_samples(supervisor) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    from router.monitor import metrics
    text = metrics.render(metrics.registry_for(supervisor)).decode()
    return {(sample.name, sample.labels.get("portal")): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_unknown_fragments_never_go_back_when_a_reload_removes_a_portal(runtime_dir, make_domain, tmp_path):
    """A Prometheus counter that goes down is read as a restart: rate() would add the whole total
    again. The router-wide figure keeps what removed portals counted (the main page agrees)."""
    from router.monitor import pages
    from router.supervisor import Supervisor
    from tests.support.routers import endpoint_xml, write_config
    lans = [make_domain() for _ in range(3)]
    xml = [endpoint_xml(f"LAN{i}", i, lan.config_path) for i, lan in enumerate(lans, 1)]
    config = write_config(tmp_path, f"unk{os.getpid() % 10000}", "".join(xml))
    supervisor = Supervisor(str(config))
    try:
        for portal in supervisor.config.portals:        # their counters and rings; no process needed
            supervisor._add_worker(portal)
        supervisor.workers["LAN1"].counters.add_pair("transport_topic_fragments_rcvd_unknown",
                                                     "transport_topic_fragment_bytes_rcvd_unknown", 2, 200)
        supervisor.workers["LAN3"].counters.add_pair("transport_topic_fragments_rcvd_unknown",
                                                     "transport_topic_fragment_bytes_rcvd_unknown", 7, 700)
        assert prometheus_samples(supervisor)[("umrouter_unknown_fragments_total", None)] == 9

        config.write_text(config.read_text().replace(xml[2], ""))
        assert supervisor.reload()["removed"] == ["LAN3"]
        assert prometheus_samples(supervisor)[("umrouter_unknown_fragments_total", None)] == 9
        assert pages.main_page(supervisor)["unknown_fragments"] == {"fragments": 9, "bytes": 900}
        supervisor.workers["LAN1"].counters.add("transport_topic_fragments_rcvd_unknown")
        assert prometheus_samples(supervisor)[("umrouter_unknown_fragments_total", None)] == 10
    finally:
        supervisor._shutdown()
