"""Reading, validating and diffing the configuration at its edges: comments inside values, the
monitor transport's scope|option pairs, TLS files and XIncluded UM XML parts changed in place."""
from __future__ import annotations

import os
import shutil

import pytest

from router.config import ConfigError, diff_configs, load_gateway_config
from tests.config.samples import TWO_LANS, VALID, endpoint


# -- an XML comment inside a text element is not part of its value (XML 1.0 §2.5)

def test_a_comment_before_a_number_does_not_hide_it(write_gateway):
    path = write_gateway(endpoint("LAN1", 1, "lan1.cfg")
                         + endpoint("LAN2", 2, "lan2.cfg", before="<cost><!-- the WAN side -->5</cost>"))
    assert load_gateway_config(path).portal("LAN2").cost == 5


def test_a_comment_inside_a_name_does_not_cut_it(write_gateway):
    path = write_gateway(endpoint("LAN1", 1, "lan1.cfg")
                         + "<endpoint><name>LAN<!-- building B -->2</name><domain-id>2</domain-id>"
                           "<lbm-config>lan2.cfg</lbm-config></endpoint>")
    assert [p.name for p in load_gateway_config(path).portals] == ["LAN1", "LAN2"]


def test_a_comment_inside_a_file_name_does_not_cut_it(write_gateway):
    path = write_gateway(endpoint("LAN1", 1, "lan1.cfg")
                         + "<endpoint><name>LAN2</name><domain-id>2</domain-id>"
                           "<lbm-config>lan<!-- second LAN -->2.cfg</lbm-config></endpoint>")
    assert load_gateway_config(path).portal("LAN2").lbm_config.name == "lan2.cfg"


# -- <transport-module options="scope|option=value"> is checked when the file is loaded

def _monitor(options: str) -> str:
    return f'<monitor interval="5"><transport-module module="lbm" options="{options}"/></monitor>'


def test_monitor_scope_option_pairs_are_accepted(write_gateway):
    path = write_gateway(TWO_LANS, daemon=_monitor("config=lan1.cfg;context|request_tcp_interface=127.0.0.1"))
    options = load_gateway_config(path).daemon.monitor.transport_options
    assert options["context|request_tcp_interface"] == "127.0.0.1"


@pytest.mark.parametrize("pair, words", [
    ("context|no_such_option=1", "no_such_option"),
    ("context|resolver_multicast_port=abc", "abc"),
    ("nosuchscope|resolver_multicast_port=13000", "nosuchscope"),
])
def test_monitor_scope_option_pairs_with_mistakes_are_rejected_at_load(write_gateway, pair, words):
    path = write_gateway(TWO_LANS, daemon=_monitor(f"config=lan1.cfg;{pair}"))
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    assert caught.value.element == "transport-module"
    assert caught.value.path == str(path) and caught.value.line is not None
    assert words in str(caught.value)


# -- reload: a peer whose TLS files were edited (certificate rotation) restarts

TLS_PEER = ("<peer><name>WAN</name><single-tcp><tls><certificate>certs/peer.pem</certificate>"
            "<certificate-key>certs/peer.key</certificate-key>"
            "<certificate-key-password>secret</certificate-key-password>"
            "<trusted-certificates>certs/ca.pem</trusted-certificates></tls>"
            "<acceptor><listen-port>26123</listen-port></acceptor></single-tcp></peer>")


def test_an_edited_tls_file_changes_the_peer_and_nothing_else(write_gateway, tmp_path):
    shutil.copytree(VALID / "certs", tmp_path / "certs")
    path = write_gateway(endpoint("LAN1", 1, "lan1.cfg") + TLS_PEER)
    before = load_gateway_config(path)
    assert diff_configs(before, load_gateway_config(path)).unchanged
    ca = tmp_path / "certs" / "ca.pem"
    ca.write_text(ca.read_text() + "\n")            # a rotated bundle: same path, new content
    diff = diff_configs(before, load_gateway_config(path))
    assert diff.changed == ["WAN"] and diff.kept == ["LAN1"]


# -- reload: an edit in a file XIncluded by a UM XML configuration file is an edit of that file

UM_XML = """<um-configuration version="1.0">
  <applications>
    <application name="tnwgd">
      <contexts>
        <context>
          <xi:include xmlns:xi="http://www.w3.org/2001/XInclude" href="topics.xml"/>
        </context>
      </contexts>
    </application>
  </applications>
</um-configuration>
"""
TOPICS = """<sources><topic topicname="T"><options type="source">
  <option name="transport" default-value="{transport}"/></options></topic></sources>
"""


@pytest.mark.parametrize("where", ["xml-config", "lbm-config"])
def test_an_edited_xincluded_um_xml_part_changes_the_portals_that_use_it(write_gateway, tmp_path, where):
    if where == "xml-config":
        portals, daemon = TWO_LANS, "<xml-config>um.xml</xml-config>"
    else:
        portals, daemon = endpoint("LAN1", 1, "lan1.cfg") + endpoint("LAN2", 2, "um.xml"), ""
    path = write_gateway(portals, daemon=daemon, um__xml=UM_XML, topics__xml=TOPICS.format(transport="lbtrm"))
    before = load_gateway_config(path)
    assert before.portal("LAN2").topic_um.for_topic("T").get("source", "transport") == "lbtrm"
    assert diff_configs(before, load_gateway_config(path)).unchanged
    (tmp_path / "topics.xml").write_text(TOPICS.format(transport="lbtru"))
    after = load_gateway_config(path)
    assert after.portal("LAN2").topic_um.for_topic("T").get("source", "transport") == "lbtru"
    diff = diff_configs(before, after)
    assert "LAN2" in diff.changed
    assert diff.changed == (["LAN1", "LAN2"] if where == "xml-config" else ["LAN2"])


@pytest.mark.parametrize("edited", ["um.xml", "topics.xml"])
def test_an_edit_that_keeps_size_and_timestamp_is_seen_at_reload(write_gateway, tmp_path, edited):
    """A filesystem that keeps whole seconds (or an edit within one clock tick) can leave an edited
    file with its old size and modification time: what a reload reads is what the file says."""
    um_xml = UM_XML.replace("<context>", '<context><options type="context">'
                                         '<option name="resolver_multicast_ttl" default-value="16"/></options>')
    path = write_gateway(TWO_LANS, daemon="<xml-config>um.xml</xml-config>", um__xml=um_xml,
                         topics__xml=TOPICS.format(transport="lbtrm"))
    before = load_gateway_config(path)
    target = tmp_path / edited
    stat = target.stat()
    target.write_text(target.read_text().replace("lbtrm", "lbtru").replace('"16"', '"17"'))
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    after = load_gateway_config(path)
    lan2 = after.portal("LAN2")
    if edited == "um.xml":
        assert lan2.source_um.get("context", "resolver_multicast_ttl") == 17
    else:
        assert lan2.topic_um.for_topic("T").get("source", "transport") == "lbtru"
    assert diff_configs(before, after).changed == ["LAN1", "LAN2"]
