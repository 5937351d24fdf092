"""diff_configs: which portals a reload must start, stop or restart."""
from __future__ import annotations

from router.config import diff_configs, load_gateway_config
from tests.config.samples import endpoint, peer

LAN1, LAN2 = endpoint("LAN1", 1, "lan1.cfg"), endpoint("LAN2", 2, "lan2.cfg")
NAMED = "<name>R</name>"        # the default router name is the file's stem, which differs here


def test_same_file_is_unchanged(write_gateway):
    path = write_gateway(LAN1 + LAN2)
    diff = diff_configs(load_gateway_config(path), load_gateway_config(path))
    assert (diff.kept, diff.changed, diff.added, diff.removed) == (["LAN1", "LAN2"], [], [], [])
    assert diff.unchanged


def test_layout_and_order_do_not_count(write_gateway):
    old = load_gateway_config(write_gateway(LAN1 + LAN2, NAMED, name="old.xml"))
    new = load_gateway_config(write_gateway("<!-- moved -->\n" + LAN2 + "\n\n" + LAN1, NAMED, name="new.xml"))
    assert old.portal("LAN1").line != new.portal("LAN1").line
    assert diff_configs(old, new).unchanged


def test_added_removed_and_changed_portals(write_gateway):
    old = load_gateway_config(write_gateway(LAN1 + LAN2 + peer("WAN"), NAMED, name="old.xml"))
    new = load_gateway_config(write_gateway(endpoint("LAN1", 1, "lan1.cfg", before="<cost>4</cost>")
                                            + endpoint("LAN3", 3, "lan3.cfg") + peer("WAN"), NAMED, name="new.xml"))
    diff = diff_configs(old, new)
    assert (diff.changed, diff.added, diff.removed, diff.kept) == (["LAN1"], ["LAN3"], ["LAN2"], ["WAN"])
    assert not diff.daemon_changed


def test_an_edited_lbm_config_file_changes_its_portal(write_gateway, tmp_path):
    path = write_gateway(LAN1 + LAN2)
    old = load_gateway_config(path)
    with open(tmp_path / "lan2.cfg", "a") as cfg:
        cfg.write("context transport_tcp_port_high 17500\n")
    diff = diff_configs(old, load_gateway_config(path))
    assert (diff.changed, diff.kept) == (["LAN2"], ["LAN1"])


TOPIC_XML = """<um-configuration version="1.0"><applications><application name="tnwgd"><contexts><context>
  <sources><topic topicname="t.one"><options type="source">
    <option name="transport" default-value="{transport}"/>
  </options></topic></sources>
</context></contexts></application></applications></um-configuration>
"""


def test_an_edit_of_one_topics_xml_options_changes_the_portals_that_use_them(write_gateway, tmp_path):
    path = write_gateway(LAN1 + LAN2, "<xml-config>um.xml</xml-config>", um__xml=TOPIC_XML.format(transport="lbtrm"))
    old = load_gateway_config(path)
    assert old.portal("LAN2").topic_um.for_topic("t.one").get("source", "transport") == "lbtrm"
    (tmp_path / "um.xml").write_text(TOPIC_XML.format(transport="lbtru"))
    new = load_gateway_config(path)
    assert new.portal("LAN2").topic_um.for_topic("t.one").get("source", "transport") == "lbtru"
    diff = diff_configs(old, new)
    assert (diff.changed, diff.kept, diff.daemon_changes) == (["LAN1", "LAN2"], [], [])


def test_a_portal_that_changes_kind_is_changed(write_gateway):
    old = load_gateway_config(write_gateway(LAN1 + peer("X"), name="old.xml"))
    new = load_gateway_config(write_gateway(LAN1 + endpoint("X", 2, "lan2.cfg"), name="new.xml"))
    assert diff_configs(old, new).changed == ["X"]


def test_daemon_changes_are_flagged(write_gateway):
    old = load_gateway_config(write_gateway(LAN1 + LAN2, NAMED, name="old.xml"))
    new = load_gateway_config(write_gateway(LAN1 + LAN2, NAMED + "<web-monitor>*:15304</web-monitor>",
                                            name="new.xml"))
    diff = diff_configs(old, new)
    assert diff.daemon_changed and diff.kept == ["LAN1", "LAN2"]
    assert diff.daemon_changes == ["web-monitor"]


def test_daemon_changes_are_named_by_element(write_gateway):
    old = load_gateway_config(write_gateway(LAN1 + LAN2, NAMED, name="old.xml"))
    new = load_gateway_config(write_gateway(
        LAN1 + LAN2, NAMED + '<route-info timeout="5000"/><worker-scheduling>normal</worker-scheduling>',
        name="new.xml"))
    assert diff_configs(old, new).daemon_changes == ["route-info", "worker-scheduling"]


def test_an_edited_worker_group_is_a_daemon_change_and_restarts_no_portal(write_gateway):
    group = "<worker-group><portal-name>LAN1</portal-name><portal-name>LAN2</portal-name></worker-group>"
    old = load_gateway_config(write_gateway(LAN1 + LAN2, NAMED, name="old.xml"))
    new = load_gateway_config(write_gateway(LAN1 + LAN2, NAMED + group, name="new.xml"))
    assert new.daemon.worker_groups[0].portals == ("LAN1", "LAN2")
    diff = diff_configs(old, new)
    assert diff.daemon_changes == ["worker-group"] and diff.kept == ["LAN1", "LAN2"]
    # Where the group was written is not part of it: the same group on other lines is no change.
    moved = load_gateway_config(write_gateway(LAN1 + LAN2, NAMED + "\n\n" + group, name="moved.xml"))
    assert diff_configs(new, moved).unchanged


def test_comments_and_layout_in_a_um_xml_file_restart_no_portal(write_gateway, tmp_path):
    """As in the router's own file: an operator documenting the UM XML file (shared by every
    portal through <xml-config>) must not restart every portal at the next reload."""
    path = write_gateway(LAN1 + LAN2, daemon="<xml-config>um.xml</xml-config>",
                         um__xml=TOPIC_XML.format(transport="lbtrm"))
    old = load_gateway_config(path)
    um_xml = tmp_path / "um.xml"
    um_xml.write_text("<!-- LAN topics: ask the desk before changing -->\n"
                      + um_xml.read_text().replace("<sources>", "\n\n    <!-- sources -->\n    <sources>"))
    assert diff_configs(old, load_gateway_config(path)).unchanged
    um_xml.write_text(TOPIC_XML.format(transport="lbtru"))
    assert diff_configs(old, load_gateway_config(path)).changed == ["LAN1", "LAN2"]


def test_lbm_attributes_written_in_another_order_restart_no_portal(write_gateway):
    """What counts is the options a portal's contexts run with: the same options in another order
    are no change (the portal was restarted, dropping its proxy sources' receivers' data), while a
    value that changes is one."""
    port = '<option scope="context" name="transport_tcp_port_low" value="14400"/>'
    query = '<option scope="receiver" name="resolver_query_sustain_interval" value="500"/>'

    def with_options(*options, name):
        attributes = f"<lbm-attributes>{''.join(options)}</lbm-attributes>"
        return load_gateway_config(write_gateway(endpoint("LAN1", 1, "lan1.cfg", after=attributes) + LAN2,
                                                 NAMED, name=name))
    old = with_options(port, query, name="old.xml")
    assert diff_configs(old, with_options(query, port, name="reordered.xml")).unchanged
    edited = with_options(query, port.replace("14400", "14500"), name="edited.xml")
    assert diff_configs(old, edited).changed == ["LAN1"]


def test_worker_groups_written_in_another_order_are_no_change(write_gateway):
    """A reload of the same grouping, its names in another order, is not reported as a daemon
    setting waiting for a restart."""
    def grouped(*names, name):
        group = "<worker-group>" + "".join(f"<portal-name>{n}</portal-name>" for n in names) + "</worker-group>"
        return load_gateway_config(write_gateway(LAN1 + LAN2, NAMED + group, name=name))
    assert diff_configs(grouped("LAN1", "LAN2", name="a.xml"), grouped("LAN2", "LAN1", name="b.xml")).unchanged
