"""A running router against files edited under it: what it runs is what it loaded until a reload
accepts the new files, and a file a reload refuses never stops it or what it forwards."""
from __future__ import annotations

import signal

import pytest

from tests.support.peer_links import routerctl
from tests.router.test_reload_adversarial import delivers, lans, rewrite, stop_cleanly
from tests.support.processes import wait_for
from tests.support.routers import endpoint_xml

pytestmark = pytest.mark.integration

UM_XML = """<um-configuration version="1.0"><applications><application name="tnwgd"><contexts><context>
  <sources><topic topicname="edited.first"><options type="source">
    <option name="transport" default-value="tcp"/>
  </options></topic></sources>
</context></contexts></application></applications></um-configuration>
"""


def rejected_reload(router) -> str:
    """SIGHUP; the rejection's log line once the router has written it."""
    before = router.log().count("UMR-1002-2")
    router.signal(signal.SIGHUP)
    wait_for(lambda: router.log().count("UMR-1002-2") > before, 15, message="the rejection is logged")
    return [entry for entry in router.log().splitlines() if "UMR-1002-2" in entry][-1]


def test_a_broken_um_xml_file_stops_no_topic_before_or_after_its_reload_is_refused(routers, tools, make_domain):
    """The operator breaks the <xml-config> file while editing it: topics that start meanwhile
    still get their proxy sources, the reload is refused at the file's line, traffic goes on."""
    lan1, lan2 = make_domain(), make_domain()
    um_xml = routers.directory / "um.xml"
    um_xml.write_text(UM_XML)
    router = routers.start(lans([lan1, lan2]), f"    <xml-config>{um_xml}</xml-config>\n").wait_ready()
    pids = {p["name"]: p["pid"] for p in routerctl(router, "status")["portals"]}
    delivers(tools, lan1, lan2, "edited.first", count=200)
    um_xml.write_text(UM_XML.replace("</sources>", "</source>"))
    delivers(tools, lan1, lan2, "edited.second", count=200)
    line = rejected_reload(router)
    assert f"{um_xml}:4" in line and "malformed XML" in line, line
    delivers(tools, lan2, lan1, "edited.third", count=200)
    assert {p["name"]: p["pid"] for p in routerctl(router, "status")["portals"]} == pids
    assert "proxy-source-failed" not in router.log()
    stop_cleanly(router, pids.values())


def test_a_number_of_thousands_of_digits_is_a_refused_reload_not_a_stopped_router(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(lans([lan1, lan2])).wait_ready()
    pids = {p["name"]: p["pid"] for p in routerctl(router, "status")["portals"]}
    rewrite(router, lans([lan1]) + endpoint_xml("LAN2", 2, lan2.config_path, cost="9" * 5000))
    line = rejected_reload(router)
    assert f"{router.config}:" in line and "<cost>" in line and "a 5000-digit number" in line, line
    assert router.tool.proc.poll() is None
    delivers(tools, lan1, lan2, "digits.after", count=200)
    assert {p["name"]: p["pid"] for p in routerctl(router, "status")["portals"]} == pids
    stop_cleanly(router, pids.values())
