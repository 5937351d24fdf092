"""What a loaded configuration says stays what it says when the files it was read from are edited.

A running portal creates proxy sources long after its configuration was loaded; the per-topic
options it gives them must be those it was started with. An edit on disk reaches it through a
reload (which refuses a broken file and keeps the running configuration), never behind its back.
"""
from __future__ import annotations

from router.config import load_gateway_config
from router.config.diff import diff_configs
from tests.config.samples import endpoint

TOPIC_XML = """<um-configuration version="1.0"><applications><application name="tnwgd"><contexts><context>
  <sources><topic topicname="t.one"><options type="source">
    <option name="transport" default-value="{transport}"/>
  </options></topic></sources>
</context></contexts></application></applications></um-configuration>
"""
TWO_LANS = endpoint("LAN1", 1, "lan1.cfg") + endpoint("LAN2", 2, "lan2.cfg")


def test_an_edited_um_xml_file_does_not_change_a_loaded_portals_topic_options(write_gateway, tmp_path):
    path = write_gateway(TWO_LANS, "<xml-config>um.xml</xml-config>", um__xml=TOPIC_XML.format(transport="lbtrm"))
    running = load_gateway_config(path)
    (tmp_path / "um.xml").write_text(TOPIC_XML.format(transport="lbtru"))
    assert running.portal("LAN2").topic_um.for_topic("t.one").get("source", "transport") == "lbtrm"
    reloaded = load_gateway_config(path)
    assert reloaded.portal("LAN2").topic_um.for_topic("t.one").get("source", "transport") == "lbtru"
    assert diff_configs(running, reloaded).changed == ["LAN1", "LAN2"]


def test_a_broken_um_xml_file_does_not_break_a_loaded_portals_new_proxy_sources(write_gateway, tmp_path):
    path = write_gateway(TWO_LANS, "<xml-config>um.xml</xml-config>", um__xml=TOPIC_XML.format(transport="lbtrm"))
    running = load_gateway_config(path)
    (tmp_path / "um.xml").write_text(TOPIC_XML.format(transport="lbtrm").replace("</sources>", "</source>"))
    topic_um = running.portal("LAN1").topic_um
    assert topic_um.for_topic("t.one").get("source", "transport") == "lbtrm"
    assert topic_um.for_topic("t.two").get("source", "transport") == "tcp"


def test_a_portals_own_um_xml_lbm_config_is_kept_as_loaded_too(write_gateway, tmp_path):
    portals = endpoint("LAN1", 1, "lan1.cfg") + endpoint("LAN2", 2, "um.xml")
    path = write_gateway(portals, um__xml=TOPIC_XML.format(transport="lbtru"))
    running = load_gateway_config(path)
    (tmp_path / "um.xml").unlink()
    assert running.portal("LAN2").topic_um.for_topic("t.one").get("source", "transport") == "lbtru"
