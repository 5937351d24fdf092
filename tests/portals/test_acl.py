"""ACL evaluation (router.portals.acl): first matching ACE decides, implicit reject, conditions
that do not apply are ignored; the lists come from real configuration text."""
from __future__ import annotations

import pytest

from router.config import load_gateway_config
from router.eventlog import MESSAGE_IDS
from router.portals.acl import AccessList, PortalAccess, SourceFacts
from router.um.wire.lbmr_records import LbtipcInfo, LbtrmInfo, TcpInfo
from tests.config.conftest import write_gateway  # noqa: F401 - fixture

SEED_EXAMPLE = """
<inbound>
  <ace match="accept"><topic>ABC</topic></ace>
  <ace match="accept"><topic>DEF</topic><transport value="lbt-rm" comparison="eq"/></ace>
  <ace match="accept"><topic>GHI</topic></ace>
</inbound>
<outbound>
  <ace match="accept"><topic>ABC123</topic></ace>
  <ace match="reject"><pcre-pattern>ABC.*123</pcre-pattern></ace>
  <ace match="accept"><pcre-pattern>.*</pcre-pattern><transport value="tcp" comparison="eq"/></ace>
</outbound>

"""


def lists(write_gateway, body: str) -> tuple[AccessList, AccessList]:
    portal = (f"<endpoint><name>LAN1</name><domain-id>1</domain-id><lbm-config>lan1.cfg</lbm-config>"
              f"<acl>{body}</acl></endpoint>"
              "<endpoint><name>LAN2</name><domain-id>2</domain-id><lbm-config>lan2.cfg</lbm-config></endpoint>")
    acl = load_gateway_config(write_gateway(portal)).portal("LAN1").acl
    return AccessList.of(acl, "inbound"), AccessList.of(acl, "outbound")


TCP = SourceFacts.of(TcpInfo("10.1.2.3", 14391, 7))
RM = SourceFacts.of(LbtrmInfo("10.1.2.3", "239.1.1.1", 1, 14400, 14401))


def test_the_seed_example(write_gateway):
    inbound, outbound = lists(write_gateway, SEED_EXAMPLE)
    assert inbound.accepts("ABC", TCP) and inbound.accepts("GHI", TCP)
    assert inbound.accepts("DEF", RM) and not inbound.accepts("DEF", TCP)     # DEF only over LBT-RM
    assert not inbound.accepts("XYZ", TCP)                                     # implicit reject
    # Specific to general: ABC123 accepted before the reject that would also match it.
    assert outbound.accepts("ABC123") and not outbound.accepts("ABCD123")
    # Transport conditions do not apply outbound: the catch-all accepts everything else.
    assert outbound.accepts("anything.else")


def test_no_list_lets_everything_through(write_gateway):
    inbound, outbound = lists(write_gateway, '<outbound><ace match="reject"><topic>x</topic></ace></outbound>')
    assert not inbound and inbound.accepts("x", TCP)
    assert outbound and not outbound.accepts("x") and not outbound.accepts("y")


@pytest.mark.parametrize("condition, facts, expected", [
    ('<source-ip value="10.1.2.3" comparison="eq"/>', TCP, True),
    ('<source-ip value="10.1.2.3" comparison="ne"/>', TCP, False),
    ('<source-ip value="10.9.9.9" comparison="ne"/>', TCP, True),
    ('<source-ip value="localhost" comparison="eq"/>', SourceFacts.of(TcpInfo("127.0.0.1", 1)), True),
    ('<tcp-source-port value="14391" comparison="eq"/>', TCP, True),
    ('<tcp-source-port value="14000" comparison="lt"/>', TCP, False),
    ('<tcp-source-port value="1" comparison="eq"/>', RM, True),        # no TCP port on LBT-RM: ignored
    ('<multicast-group value="239.1.1.1" comparison="eq"/>', RM, True),
    ('<udp-destination-port value="14400" comparison="ne"/>', RM, False),
    ('<transport value="lbt-ipc" comparison="eq"/>', SourceFacts.of(LbtipcInfo(1, 2, 3)), True),
    ('<xport-id value="3" comparison="ge"/>', SourceFacts.of(LbtipcInfo(1, 2, 3)), True),
    ('<transport value="tcp" comparison="ne"/>', TCP, False),
])
def test_inbound_source_conditions(write_gateway, condition, facts, expected):
    inbound, _ = lists(write_gateway, f'<inbound><ace match="accept"><topic>t</topic>{condition}</ace></inbound>')
    assert inbound.accepts("t", facts) is expected


def test_pcre_searches_and_topic_is_exact(write_gateway):
    inbound, _ = lists(write_gateway, '<inbound><ace match="accept"><pcre-pattern>^md\\.</pcre-pattern></ace>'
                                      '<ace match="accept"><topic>a.*</topic></ace></inbound>')
    assert inbound.accepts("md.prices") and not inbound.accepts("xmd.prices")
    assert inbound.accepts("a.*") and not inbound.accepts("ab")


def test_posix_character_classes_in_a_pattern_match_as_in_pcre(write_gateway):
    """[[:digit:]] is a digit in PCRE and POSIX regex; Python's re read it as a set followed by a
    literal ']', so the ACE matched ':]' and never 'feed.42'."""
    inbound, _ = lists(write_gateway, '<inbound><ace match="accept"><pcre-pattern>^feed\\.[[:digit:]]+$'
                                      '</pcre-pattern></ace></inbound>')
    assert inbound.accepts("feed.42") and not inbound.accepts("feed.x") and not inbound.accepts("feed.:]")


def test_an_unknown_posix_class_is_a_configuration_error(write_gateway):
    from router.config import ConfigError
    with pytest.raises(ConfigError, match="invalid pattern"):
        lists(write_gateway, '<inbound><ace match="accept"><pcre-pattern>[[:digits:]]</pcre-pattern></ace></inbound>')


def test_a_pattern_nested_too_deeply_to_compile_is_a_configuration_error(write_gateway):
    """Not a RecursionError traceback from the loader (the reload refused without a line)."""
    from router.config import ConfigError
    deep = "(" * 3000 + "x" + ")" * 3000
    with pytest.raises(ConfigError, match="invalid pattern .*too deeply nested"):
        lists(write_gateway, f'<inbound><ace match="accept"><pcre-pattern>{deep}</pcre-pattern></ace></inbound>')


class Counters(dict):
    def add(self, name, amount=1):
        self[name] = self.get(name, 0) + amount


def test_portal_access_counts_streams_and_logs_each_decision_once(write_gateway):
    logged = []
    acl = load_gateway_config(write_gateway(
        "<endpoint><name>LAN1</name><domain-id>1</domain-id><lbm-config>lan1.cfg</lbm-config><acl>"
        '<inbound><ace match="reject"><topic>in.no</topic></ace><ace match="accept"><pcre-pattern>.</pcre-pattern></ace></inbound>'
        '<outbound><ace match="reject"><topic>out.no</topic></ace><ace match="accept"><pcre-pattern>.</pcre-pattern></ace></outbound>'
        "</acl></endpoint>"
        "<endpoint><name>LAN2</name><domain-id>2</domain-id><lbm-config>lan2.cfg</lbm-config></endpoint>")).portal("LAN1").acl
    access = PortalAccess(acl, Counters(), lambda kind, text: logged.append((MESSAGE_IDS[kind] and kind, text)))
    assert access.interest_allowed(True, "in.no") and access.interest_allowed(False, "out.no")   # a pattern passes
    assert not access.interest_allowed(True, "out.no") and not access.interest_allowed(True, "out.no")
    assert not access.source_allowed("in.no", TCP, "TCP:10.1.2.3:14391") and access.source_allowed("ok", TCP)
    assert not access.stream_out_allowed(3, 7, "out.no") and access.stream_rejected(3, 7)
    access.stream_ended(3, 7)
    assert not access.stream_rejected(3, 7)
    assert access.counters == {"acl_inbound_rejected": 1, "acl_outbound_rejected": 1}
    assert [kind for kind, _ in logged] == ["acl-rejected"] * 3
    assert "outbound ACL rejects topic out.no: its interest is not passed on" in logged[0][1]


def test_topics_an_acl_pattern_rejects_are_remembered_within_a_bound(write_gateway):
    """Short-lived topics (a name per request, per session) that a pattern rejects come and go
    for the router's life: what it remembers of them, to log each once, stays bounded."""
    from router.portals.acl import MAX_REPORTED_TOPICS
    logged = []
    acl = load_gateway_config(write_gateway(
        "<endpoint><name>LAN1</name><domain-id>1</domain-id><lbm-config>lan1.cfg</lbm-config><acl>"
        '<inbound><ace match="reject"><pcre-pattern>^tmp\\.</pcre-pattern></ace>'
        '<ace match="accept"><pcre-pattern>.</pcre-pattern></ace></inbound>'
        '<outbound><ace match="reject"><pcre-pattern>^tmp\\.</pcre-pattern></ace>'
        '<ace match="accept"><pcre-pattern>.</pcre-pattern></ace></outbound>'
        "</acl></endpoint>"
        "<endpoint><name>LAN2</name><domain-id>2</domain-id><lbm-config>lan2.cfg</lbm-config></endpoint>")).portal("LAN1").acl
    access = PortalAccess(acl, Counters(), lambda kind, text: logged.append(text))
    topics = 3 * MAX_REPORTED_TOPICS
    for n in range(topics):
        assert not access.interest_allowed(True, f"tmp.{n}")
        assert not access.source_allowed(f"tmp.{n}", TCP)
        assert not access.stream_out_allowed(1, n, f"tmp.{n}")
        access.stream_ended(1, n)
    assert access.counters == {"acl_inbound_rejected": topics, "acl_outbound_rejected": topics}
    assert len(logged) == 3 * topics                    # each decision about each topic, once
    assert len(access._reported) <= MAX_REPORTED_TOPICS
    assert not access.rejected_streams
    # A topic rejected again soon is not logged again.
    assert not access.interest_allowed(True, f"tmp.{topics - 1}")
    assert len(logged) == 3 * topics
