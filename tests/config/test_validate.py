"""Semantic checks: domains, UM option files, values the DTD cannot range-check."""
from __future__ import annotations

import logging

import pytest

from router.config import ConfigError, load_gateway_config
from tests.config.samples import TWO_LANS, VALID, endpoint, peer

UNICAST_A = "context resolver_unicast_daemon 10.0.0.1:15380\n"
UNICAST_B = "context resolver_unicast_daemon 10.0.0.2:15380\n"


def error_of(path) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    return caught.value


# ----------------------------------------------------------------------------- domains

def test_endpoints_sharing_a_unicast_resolver_are_one_domain(write_gateway):
    path = write_gateway(endpoint("A", 1, "a.cfg") + endpoint("B", 2, "b.cfg"),
                         a__cfg=UNICAST_A, b__cfg="context resolver_unicast_daemon 10.0.0.9:15380,10.0.0.1:15380\n")
    err = error_of(path)
    assert (err.line, err.element) == (4, "domain-id")
    assert "unicast resolver 10.0.0.1:15380" in err.reason and "one domain has one domain-id" in err.reason


def test_endpoints_on_different_unicast_resolvers_are_two_domains(write_gateway):
    path = write_gateway(endpoint("A", 1, "a.cfg") + endpoint("B", 2, "b.cfg"), a__cfg=UNICAST_A, b__cfg=UNICAST_B)
    assert [p.domain_id for p in load_gateway_config(path).portals] == [1, 2]


def test_one_group_on_disjoint_interfaces_is_two_domains(write_gateway):
    group = "context resolver_multicast_address 239.1.1.1\ncontext resolver_multicast_interface "
    path = write_gateway(endpoint("A", 1, "a.cfg") + endpoint("B", 2, "b.cfg"),
                         a__cfg=group + "10.1.0.0/16\n", b__cfg=group + "10.2.0.5\n")
    assert len(load_gateway_config(path).endpoints) == 2


def test_two_endpoints_with_default_resolver_settings_share_a_domain(write_gateway):
    err = error_of(write_gateway(endpoint("A", 1) + endpoint("B", 1)))
    assert "are both on domain 1 (resolver 224.9.10.11:12965 on 127.0.0.1)" in err.reason


def test_lbm_attributes_can_move_an_endpoint_to_another_domain(write_gateway):
    attributes = '<lbm-attributes><option scope="context" name="resolver_multicast_port" value="13966"/></lbm-attributes>'
    path = write_gateway(endpoint("A", 1, "lan1.cfg") + endpoint("B", 2, "lan1.cfg", after=attributes))
    config = load_gateway_config(path)
    assert config.portal("B").receiver_um.get("context", "resolver_multicast_port") == 13966


def test_peers_have_no_domain(write_gateway):
    config = load_gateway_config(write_gateway(endpoint("A", 1) + peer("P1") + peer(
        "P2", "<acceptor><listen-port>26124</listen-port></acceptor>")))
    assert [p.kind for p in config.portals] == ["endpoint", "peer", "peer"]


# ------------------------------------------------------------------- UM option files

def test_lbm_config_may_be_a_um_xml_file(write_gateway):
    xml = """
        <um-configuration version="1.0"><applications><application name="tnwgd"><contexts>
          <context name="lan9_rcv"><options type="context">
            <option name="resolver_multicast_port" default-value="14999"/>
          </options></context>
        </contexts></application></applications></um-configuration>
    """
    names = "<receiver-context-name>lan9_rcv</receiver-context-name>"
    path = write_gateway(endpoint("A", 1, "lan1.cfg") + endpoint("B", 2, "lan9.xml", after=names), lan9__xml=xml)
    portal = load_gateway_config(path).portal("B")
    assert portal.receiver_um.get("context", "resolver_multicast_port") == 14999
    assert portal.source_um.get("context", "resolver_multicast_port") == 12965      # unnamed: no match


def test_missing_xml_config_is_reported_at_its_element(write_gateway):
    err = error_of(write_gateway(TWO_LANS, daemon="\n<xml-config>nowhere.xml</xml-config>"))
    assert (err.line, err.element) == (3, "xml-config")
    assert "cannot read xml-config file" in err.reason


def test_bad_option_in_xml_config_names_that_file(write_gateway, tmp_path):
    xml = """
        <um-configuration version="1.0">
          <templates><template name="t"><options type="context">
            <option name="resolver_multicast_port" default-value="70000"/>
          </options></template></templates>
        </um-configuration>
    """
    err = error_of(write_gateway(TWO_LANS, daemon="<xml-config>um.xml</xml-config>", um__xml=xml))
    assert str(err).startswith(f"{tmp_path / 'um.xml'}:3: <option>: option 'resolver_multicast_port': 70000 is outside")


def test_xml_config_without_the_routers_application_is_an_error(write_gateway):
    xml = '<um-configuration version="1.0"><applications><application name="umsrc"/></applications></um-configuration>'
    err = error_of(write_gateway(TWO_LANS, daemon="<xml-config>um.xml</xml-config>", um__xml=xml))
    assert 'no <application name="tnwgd"> in this file' in err.reason


def test_option_value_errors_in_lbm_attributes_name_the_option(write_gateway):
    attributes = '<lbm-attributes><option scope="context" name="resolver_multicast_port" value="port"/></lbm-attributes>'
    err = error_of(write_gateway(endpoint("A", 1, "lan1.cfg", after=attributes) + endpoint("B", 2, "lan2.cfg")))
    assert err.element == "option"
    assert err.reason == "option 'resolver_multicast_port': 'port' is not an integer (lbm-attributes of portal 'A')"


def test_option_in_the_wrong_scope_is_an_error(write_gateway):
    attributes = '<lbm-attributes><option scope="source" name="resolver_multicast_port" value="1"/></lbm-attributes>'
    err = error_of(write_gateway(endpoint("A", 1, "lan1.cfg", after=attributes) + endpoint("B", 2, "lan2.cfg")))
    assert "belongs to scope context, not source" in err.reason


# ------------------------------------------------------------------- single values

@pytest.mark.parametrize("element, words", [
    ('<sqn-window size="100" increment="8"/>', "must be multiples of 8"),
    ('<sqn-window size="1024" increment="1024"/>', "must be smaller than size (1024) and divide it"),
    ('<sqn-window size="1024" increment="48"/>', "must be smaller than size (1024) and divide it"),
    ("<hotlink-index>65536</hotlink-index>", "hotlink-index must be 0..65535"),
    ("<smart-batch>yes</smart-batch>", "smart-batch must be 0 or 1"),
    ("<cost>-1</cost>", "cost must be a positive integer (1 or more), got -1"),
    ("<cost>1.5</cost>", "cost must be an integer, got '1.5'"),
])
def test_endpoint_values_are_range_checked(write_gateway, element, words):
    before, after = (element, "") if not element.startswith("<sqn") else ("", element)
    err = error_of(write_gateway(endpoint("A", 1, "lan1.cfg", before=before, after=after) + endpoint("B", 2, "lan2.cfg")))
    assert words in err.reason
    assert err.line == 4        # write_gateway puts all portals on line 4


@pytest.mark.parametrize("link, words", [
    ("<compression>zstd</compression><acceptor><listen-port>1</listen-port></acceptor>",
     "the only compression is LZ4, got 'zstd'"),
    ("<interface>eth0</interface><acceptor><listen-port>1</listen-port></acceptor>",
     "'eth0' is not an IPv4 address or network"),
    ("<acceptor><listen-port>0</listen-port></acceptor>", "listen-port must be 1..65535, got 0"),
    ("<initiator><address></address><port>1</port></initiator>", "must not be empty"),
])
def test_peer_link_values_are_range_checked(write_gateway, link, words):
    err = error_of(write_gateway(endpoint("A", 1) + peer("P", link)))
    assert words in err.reason


CERTS = VALID / "certs"          # a CA, and a certificate it signed whose key is encrypted with "secret"


def _tls(password="secret", key=CERTS / "peer.key", trusted=CERTS / "ca.pem", ciphers=""):
    return (f"<tls><certificate>{CERTS / 'peer.pem'}</certificate><certificate-key>{key}</certificate-key>"
            f"<certificate-key-password>{password}</certificate-key-password>"
            f"<trusted-certificates>{trusted}</trusted-certificates>{ciphers}</tls>"
            "<acceptor><listen-port>1</listen-port></acceptor>")


def test_tls_files_openssl_can_use_are_accepted(write_gateway):
    ciphers = "<cipher-suites>AES256-GCM-SHA384,AES128-GCM-SHA256</cipher-suites>"
    config = load_gateway_config(write_gateway(endpoint("A", 1) + peer("P", _tls(ciphers=ciphers))))
    assert config.portal("P").link.tls.cipher_suites == "AES256-GCM-SHA384,AES128-GCM-SHA256"


@pytest.mark.parametrize("tls, words", [
    (_tls(password="wrong"), "a wrong <certificate-key-password>"),
    (_tls(key=CERTS / "ca.pem"), "cannot use <certificate>"),
    (_tls(trusted=CERTS / "peer.key"), "cannot read <trusted-certificates>"),
    (_tls(ciphers="<cipher-suites>NO-SUCH-CIPHER</cipher-suites>"), "OpenSSL knows none of these cipher suites"),
])
def test_tls_that_openssl_cannot_use_is_an_error_naming_the_element(write_gateway, tls, words):
    err = error_of(write_gateway(endpoint("A", 1) + peer("P", tls), name="gw.xml"))
    assert (err.element, err.line) == ("tls", 4) and err.path.endswith("gw.xml")
    assert err.reason.startswith("peer 'P': ") and words in err.reason, err.reason


def test_missing_tls_files_are_an_error(write_gateway):
    tls = ("<tls><certificate>c.pem</certificate><certificate-key>k.pem</certificate-key></tls>"
           "<acceptor><listen-port>1</listen-port></acceptor>")
    err = error_of(write_gateway(endpoint("A", 1) + peer("P", tls), name="gw.xml"))
    assert err.element == "tls"
    assert err.reason == f"peer 'P': TLS file '{err.path.rsplit('/', 1)[0]}/c.pem' does not exist"


@pytest.mark.parametrize("daemon, words", [
    ("<web-monitor>15304</web-monitor>", "expected 'interface:port'"),
    ("<web-monitor>*:99999</web-monitor>", "the port must be 1..65535"),
    ("<web-monitor>1.2.3.4.5:15304</web-monitor>", "interface '1.2.3.4.5' is not valid"),
    ("<web-monitor>10.0.0.0/33:15304</web-monitor>", "interface '10.0.0.0/33' is not valid"),
    ("<web-monitor>my host:15304</web-monitor>", "interface 'my host' is not a name"),
    ("<web-monitor>[::g]:15304</web-monitor>", "interface '[::g]' is not valid"),
    ('<log type="file"/>', 'type="file" needs the log file path'),
    ("<admin>inproc://x</admin>", "expected an ipc:// or tcp:// endpoint"),
    ('<monitor><format-module module="json"/></monitor>', "module must be csv | pb | parquet"),
    ('<monitor><transport-module options="config"/></monitor>', "options must be 'key=value;key=value'"),
    ('<route-info max-hop-count="300"/>', "attribute 'max-hop-count' must be 1..255"),
    (f"<name>{'x' * 257}</name>", "a name is at most 256 bytes long"),
])
def test_daemon_values_are_checked(write_gateway, daemon, words):
    err = error_of(write_gateway(TWO_LANS, daemon=daemon))
    assert words in err.reason


def test_acl_conditions_are_checked(write_gateway):
    acl = ('<acl><inbound><ace match="accept"><multicast-group value="10.0.0.1" comparison="eq"/>'
           '</ace></inbound></acl>')
    err = error_of(write_gateway(endpoint("A", 1, "lan1.cfg", after=acl) + endpoint("B", 2, "lan2.cfg")))
    assert (err.element, err.reason) == ("multicast-group", "'10.0.0.1' is not a multicast address")


# ------------------------------------------------------------------------ warnings

def test_questionable_settings_load_with_warnings(write_gateway, caplog):
    acl = '<acl><outbound><ace match="accept"><tcp-source-port value="1" comparison="eq"/></ace></outbound></acl>'
    path = write_gateway(endpoint("A", 1, "lan1.cfg", after=acl)
                         + peer("P", before='<sourcemap size="1000"/>', after='<gateway-keepalive interval="5000" timeout="5000"/>'))
    with caplog.at_level(logging.WARNING, logger="router.config"):
        config = load_gateway_config(path)
    assert config.portal("P").sourcemap_size == 1024
    assert "applies to inbound ACLs only; ignored in an outbound ACL" in caplog.text
    assert "sourcemap size 1000 is not a power of two; using 1024" in caplog.text
    assert "should be about three times the interval" in caplog.text


def test_a_single_portal_is_allowed_with_a_warning(write_gateway, caplog):
    with caplog.at_level(logging.WARNING, logger="router.config"):
        load_gateway_config(write_gateway(endpoint("A", 1)))
    assert "only one portal" in caplog.text


def test_a_seventeenth_portal_is_refused_at_its_element(write_gateway):
    """Each portal has a consumer slot in every other portal's ring: 16 at most, said where the
    17th is, not found when a worker's ring cannot be made."""
    portals = "".join(peer(f"P{n}", f"<acceptor><listen-port>{30000 + n}</listen-port></acceptor>")
                      for n in range(17))
    err = error_of(write_gateway(portals))
    assert err.element == "peer" and "at most 16" in err.reason and "'P16'" in err.reason
    assert len(load_gateway_config(write_gateway("".join(
        peer(f"P{n}", f"<acceptor><listen-port>{30000 + n}</listen-port></acceptor>") for n in range(16)))).portals) == 16


def test_a_domain_route_interval_applications_outlast_is_warned_about(write_gateway, caplog):
    slow = '<topic-resolution><domain-route min-interval="1000" max-interval="6000"/></topic-resolution>'
    with caplog.at_level(logging.WARNING, logger="router.config"):
        path = write_gateway(endpoint("A", 1, "lan1.cfg", after=slow) + endpoint("B", 2, "lan2.cfg"))
        config = load_gateway_config(path)
    assert config.portal("A").topic_resolution.domain_route.max_interval == 6000
    [warning] = [r.getMessage() for r in caplog.records if "domain-route" in r.getMessage()]
    assert "max-interval 6000 ms: applications forget a router's domain routes 5 s after" in warning, warning
