"""Every file in broken/ is rejected with the file, line and element an operator has to fix."""
from __future__ import annotations

import pytest

from router.config import ConfigError, load_gateway_config
from tests.config.samples import BROKEN

# file -> (file named in the error, line, element or None, words the message must contain)
CASES = {
    "wrong-order.xml": ("wrong-order.xml", 7, "endpoint",
                        "element 'cost' is not allowed here: <domain-id> must come before it "
                        "(expected order: name, domain-id, cost, hotlink-index,"),
    "seed-acl-order.xml": ("seed-acl-order.xml", 7, "endpoint",
                           "element 'lbm-config' is not allowed here: <domain-id> must come before it"),
    "unknown-element.xml": ("unknown-element.xml", 8, "endpoint",
                            "unknown element 'costs' (did you mean 'cost'?)"),
    "missing-domain-id.xml": ("missing-domain-id.xml", 10, "endpoint",
                              "missing required element <domain-id> before <lbm-config>"),
    "domain-id-on-peer.xml": ("domain-id-on-peer.xml", 17, "peer",
                              "element 'domain-id' is not allowed in <peer>"),
    "peer-without-end.xml": ("peer-without-end.xml", 12, "single-tcp",
                             "missing required element <initiator> or <acceptor>"),
    "wrong-version.xml": ("wrong-version.xml", 3, "tnw-gateway",
                          "attribute 'version' must be 1.0, got '6.17'"),
    "wrong-root.xml": ("wrong-root.xml", 3, "um-configuration",
                       'the root element must be <tnw-gateway version="1.0">'),
    "ace-without-match.xml": ("ace-without-match.xml", 11, "ace",
                              "missing required attribute 'match' (accept | reject)"),
    "unknown-attribute.xml": ("unknown-attribute.xml", 8, "cost",
                              "unknown attribute 'value' (<cost> takes no attributes)"),
    "malformed.xml": ("malformed.xml", 8, "endpont",
                      "malformed XML: closing tag </endpont> does not match <endpoint> opened on line 5"),
    "unquoted-attribute.xml": ("unquoted-attribute.xml", 12, None,
                               "malformed XML: attribute values must be quoted"),
    "bad-include.xml": ("bad-include.xml", 9, "xi:include", "cannot include 'no-such-acl.xml': no such file"),
    "bad-in-included.xml": ("parts/bad-cost.xml", 5, "cost",
                            "cost must be a positive integer (1 or more), got 0"),
    "cost-zero.xml": ("cost-zero.xml", 8, "cost", "cost must be a positive integer (1 or more), got 0"),
    "domain-id-text.xml": ("domain-id-text.xml", 7, "domain-id", "domain-id must be an integer, got 'LAN-one'"),
    "domain-id-range.xml": ("domain-id-range.xml", 7, "domain-id",
                            "domain-id must be 0..4294967295, got 4294967296"),
    "interest-interval.xml": ("interest-interval.xml", 10, "remote-topic-interest",
                              "min-interval (60000) must be less than max-interval (1000)"),
    "backoff-over-warning.xml": ("backoff-over-warning.xml", 5, "route-recalculation",
                                 "backoff-interval (20000) must not exceed warning-interval (10000)"),
    "log-size.xml": ("log-size.xml", 5, "log", "attribute 'size' must be 0..4000, got 5000"),
    "admin-not-loopback.xml": ("admin-not-loopback.xml", 5, "admin",
                               "tcp:// admin endpoints must be on loopback"),
    "udp-with-dual-tcp.xml": ("udp-with-dual-tcp.xml", 14, "udp",
                              "peer 'TUNNEL_TO_LAN2': <udp> needs a <single-tcp> link"),
    "worker-group-unknown-portal.xml": ("worker-group-unknown-portal.xml", 7, "portal-name",
                                        "worker group names 'LAN3', which is not a portal of this router "
                                        "(portals: LAN1, LAN2)"),
    "worker-group-twice.xml": ("worker-group-twice.xml", 10, "portal-name",
                               "portal 'LAN2' is already in the worker group at line 5; a portal runs in one worker"),
    "monitor-missing-config.xml": ("monitor-missing-config.xml", 6, "transport-module",
                                   f"the monitoring context's configuration: {BROKEN / 'lan9.cfg'}: cannot read"),
    "monitor-unknown-option.xml": ("monitor-unknown-option.xml", 6, "transport-module",
                                   "unknown monitoring transport option 'tpoic'"),
    "worker-scheduling.xml": ("worker-scheduling.xml", 5, "worker-scheduling",
                              "expected one of adaptive, normal, got 'realtime'"),
    "cpu-latency-limit.xml": ("cpu-latency-limit.xml", 5, "cpu-latency-limit",
                              "cpu-latency-limit must be an integer, got '10us'"),
    "bad-pcre.xml": ("bad-pcre.xml", 12, "pcre-pattern", r"invalid pattern '^md\.(prices'"),
    "batch-interval.xml": ("batch-interval.xml", 18, "batch-interval", "batch-interval must be at least 3, got 2"),
    "max-datagram.xml": ("max-datagram.xml", 17, "max-datagram", "max-datagram must be 1..65500, got 65535"),
    "duplicate-names.xml": ("duplicate-names.xml", 11, "name",
                            "portal name 'LAN' is already used by the endpoint at line 6"),
    "same-domain.xml": ("same-domain.xml", 14, "domain-id",
                        "endpoints 'LAN1' (line 7) and 'LAN1-again' are both on domain 1 "
                        "(resolver 225.7.32.85:13965 on 10.29.2.0/24); a router may have only one "
                        "endpoint per topic resolution domain"),
    "two-domain-ids.xml": ("two-domain-ids.xml", 13, "domain-id",
                           "domain-id 7 differs from domain-id 1 of endpoint 'LAN1' (line 6), which is "
                           "on the same topic resolution domain"),
    "domain-id-reused.xml": ("domain-id-reused.xml", 12, "domain-id",
                             "domain-id 1 is already used by endpoint 'LAN1' (line 5) for another topic "
                             "resolution domain"),
    "missing-lbm-config.xml": ("missing-lbm-config.xml", 13, "lbm-config",
                               f"portal 'LAN2': cannot read lbm-config file '{BROKEN / 'lan9.cfg'}': no such file"),
    "unknown-option.xml": ("unknown-option.xml", 11, "option",
                           "unknown option 'resolver_multicast_adress' (lbm-attributes of portal 'LAN1')"),
    "bad-option-value.xml": ("bad-value.cfg", 4, None,
                             "resolver_multicast_port: 99999 is outside 0..65535 (lbm-config of portal "
                             f"'LAN1', {BROKEN / 'bad-option-value.xml'}:8)"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_broken_file_is_rejected_at_the_right_place(name):
    where, line, element, words = CASES[name]
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(BROKEN / name)
    prefix = f"{BROKEN / where}:{line}: " + (f"<{element}>: " if element else "")
    message = str(caught.value)
    assert message.startswith(prefix), message
    assert words in message, message
    assert (caught.value.path, caught.value.line, caught.value.element) == (str(BROKEN / where), line, element)


def test_every_broken_file_has_a_case_and_says_what_is_wrong():
    files = {path.name for path in BROKEN.glob("*.xml")}
    assert files == set(CASES)
    for path in BROKEN.glob("*.xml"):
        assert "<!-- BROKEN: " in path.read_text(), path.name

