"""The DTD `tnwgd -d` prints: complete per spec/dro.md §1.2, commented, and what `tnwgd -v` checks."""
from __future__ import annotations

import io
import re

import pytest
from lxml import etree

from router.config import ConfigError, dump_dtd, validate_structure
from tests.config.samples import BROKEN, VALID

# spec/dro.md §1.2-1.7, plus umrouter's <admin>, <worker-scheduling>, <cpu-latency-limit> and <worker-group>.
SPEC_ELEMENTS = """
tnw-gateway daemon name log uid gid pidfile lbm-license-file topicmap patternmap monitor
transport-module format-module web-monitor daemon-monitor lbm-config publishing-interval group
remote-snapshot-request remote-config-changes-request propagation-delay xml-config route-info
route-recalculation admin worker-scheduling cpu-latency-limit worker-group portal-name portals endpoint peer domain-id cost hotlink-index source-deletion-delay
max-queue smart-batch lbm-attributes option acl inbound outbound ace topic pcre-pattern regex-pattern
transport source-ip multicast-group udp-source-port udp-destination-port tcp-source-port xport-id
topic-resolution topic-use-query pattern-use-query remote-topic-interest remote-pattern-interest
domain-route initial-request rate-limit late-join topic-purge topic-interest-generate
topic-domain-activity pattern-purge pattern-interest-generate pattern-domain-activity remote-topic
remote-pattern source-context-name receiver-context-name sqn-window context-query sourcemap tcp
single-tcp udp max-datagram batching min-length batch-interval topic-use-check pattern-use-check
gateway-keepalive interface receive-buffer send-buffer keepalive nodelay compression tls certificate
certificate-key certificate-key-password trusted-certificates cipher-suites initiator acceptor
address port listen-port companion multiple-receive-max-datagrams coalesce-threshold
transmission-window peer-rate-limit nak-handling session-message connect
""".split()


def declarations():
    return {decl.name: decl for decl in etree.DTD(io.StringIO(dump_dtd())).elements()}


def content_names(decl):
    found, stack = [], [decl.content]
    while stack:
        node = stack.pop()
        if node is not None:
            if node.type == "element":
                found.append(node.name)
            stack.extend([node.right, node.left])
    return found


def test_dtd_declares_exactly_the_specified_elements():
    assert set(declarations()) == set(SPEC_ELEMENTS)


def test_every_element_declaration_has_its_own_comment():
    text = dump_dtd()
    for match in re.finditer(r"<!ELEMENT ([\w-]+)", text):
        assert text[:match.start()].rstrip().endswith("-->"), match.group(1)


def test_sequences_follow_the_dro_order():
    decls = declarations()
    assert content_names(decls["tnw-gateway"]) == ["daemon", "portals"]
    daemon = content_names(decls["daemon"])
    assert daemon[:3] == ["name", "log", "uid"] and daemon[-4:] == ["admin", "worker-scheduling", "cpu-latency-limit",
                                                                    "worker-group"]
    assert content_names(decls["endpoint"])[:3] == ["name", "domain-id", "cost"]
    assert content_names(decls["peer"])[:6] == ["name", "cost", "sourcemap", "tcp", "single-tcp", "udp"]
    assert content_names(decls["single-tcp"])[-2:] == ["initiator", "acceptor"]


def test_numeric_attributes_are_cdata_and_choices_are_enumerated():
    attributes = {(a.elemname, a.name): a for d in declarations().values() for a in d.attributes()}
    assert attributes[("route-info", "timeout")].type == "cdata"
    assert attributes[("log", "size")].type == "cdata"
    assert attributes[("ace", "match")].values() == ["accept", "reject"]
    assert attributes[("tnw-gateway", "version")].default == "required"


def test_validate_structure_checks_the_dtd_only():
    validate_structure(VALID / "everything.xml")
    validate_structure(BROKEN / "cost-zero.xml")            # a semantic mistake: not its business
    with pytest.raises(ConfigError, match="must come before it"):
        validate_structure(BROKEN / "wrong-order.xml")
