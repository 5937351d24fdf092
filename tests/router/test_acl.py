"""Access control lists on a running router: an inbound ACL keeps a domain's sources in it, an
outbound ACL keeps topics out of a domain; allowed traffic crosses as before (router.portals.acl)."""
import pytest

from tests.support.processes import wait_for
from tests.support.routers import endpoint_xml

pytestmark = pytest.mark.integration

LAN1_INBOUND = """      <acl>
        <inbound>
          <ace match="reject"><pcre-pattern>^blocked\\.</pcre-pattern></ace>
          <ace match="accept"><transport value="tcp" comparison="eq"/></ace>
        </inbound>
      </acl>
"""
LAN2_OUTBOUND = """      <acl>
        <outbound>
          <ace match="reject"><topic>open.secret</topic></ace>
          <ace match="accept"><pcre-pattern>.</pcre-pattern></ace>
        </outbound>
      </acl>
"""


def test_inbound_and_outbound_acls_decide_what_crosses(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path, after_config=LAN1_INBOUND) +
                           endpoint_xml("LAN2", 2, lan2.config_path, after_config=LAN2_OUTBOUND)).wait_ready()
    count = 400
    receivers = {topic: tools.umrcv("-c", lan2.config_path, "--json", "-C", count, "--timeout", 60, topic)
                 for topic in ("open.news", "blocked.news", "open.secret")}
    # LAN2's outbound ACL: its receivers' interest in open.secret is not passed on, so LAN1 pulls
    # in only the other two topics.
    wait_for(lambda: router.counters()[0]["receiver_topics"] == 2, 20,
             message="LAN1 has proxy receivers for open.news and blocked.news only")
    sources = {"open.news": tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-P", 200,
                                        "--start-on-stdin", "open.news")}
    # Nobody (or only the router) joins these: they send without waiting for a receiver.
    for topic in ("blocked.news", "open.secret"):
        sources[topic] = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-P", 200, "-W", 0, topic)
    receivers["open.news"].wait_for_stderr("Beginning of Transport Session", 30)
    sources["open.news"].send_line()
    got = receivers["open.news"].result(60)
    assert (got["received"], got["gaps"], got["duplicates"]) == (count, 0, 0), got
    results = {topic: source.result(60) for topic, source in sources.items()}
    assert all(result["sent"] == count for result in results.values())
    # LAN1's inbound ACL rejected the blocked.news source before joining it: the router never
    # connected to it, and so sent nothing on, had nothing to proxy in LAN2.
    assert (results["open.news"]["receivers"], results["blocked.news"]["receivers"]) == (1, 0), results
    wait_for(lambda: router.counters()[0]["acl_inbound_rejected"] >= 1, 10,
             message="LAN1 counts the source its inbound ACL kept in")
    lan1, lan2 = router.counters()[0], router.counters()[1]
    assert lan2["proxy_sources_created"] == 1                  # open.news only
    assert lan1["transport_topic_fragments_forwarded"] == count
    assert lan2["transport_topic_fragments_dropped_error"] == 0
    for topic in ("blocked.news", "open.secret"):
        receivers[topic].stop()
        assert "Beginning of Transport Session" not in receivers[topic].stderr
    router.wait_for_log("inbound ACL rejects topic blocked.news")
    router.wait_for_log("outbound ACL rejects topic open.secret: its interest is not passed on")


def test_peer_portal_acls_over_a_link(routers, tools, make_domain):
    """Router A (D1, peer TO_B with an outbound ACL) linked to router B (peer TO_A with an inbound
    ACL, D2): only what both let through reaches D2."""
    from tests.support.peer_links import linked_pair, send_across
    lan1, lan2 = make_domain(), make_domain()
    outbound = ('      <acl><outbound><ace match="reject"><topic>link.secret</topic></ace>'
                '<ace match="accept"><pcre-pattern>.</pcre-pattern></ace></outbound></acl>\n')
    inbound = ('      <acl><inbound><ace match="reject"><pcre-pattern>^link\\.blocked</pcre-pattern></ace>'
               '<ace match="accept"><pcre-pattern>.</pcre-pattern></ace></inbound></acl>\n')
    a, b = linked_pair(routers, lan1, lan2, "acl", a_link={"extra": outbound}, b_link={"extra": inbound})
    blocked = {topic: tools.umrcv("-c", lan2.config_path, "--json", "--timeout", 60, topic)
               for topic in ("link.secret", "link.blocked")}
    # B passes interest in link.blocked on (B's inbound list judges streams, not interest), but A's
    # TO_B does not pass link.secret on: A pulls in link.blocked (and, below, link.open) only.
    wait_for(lambda: a.counters()[0]["receiver_topics"] == 1, 20, message="A pulls in link.blocked only")
    senders = {topic: tools.umsrc("-c", lan1.config_path, "--json", "-M", 300, "-P", 500, "-W", 0, topic)
               for topic in blocked}
    [got] = send_across(tools, lan1, [lan2], "link.open", 1000, rate=2000)
    assert (got["received"], got["gaps"], got["duplicates"]) == (1000, 0, 0), got
    for sender in senders.values():
        assert sender.result(60)["sent"] == 300
    wait_for(lambda: b.counters()[0]["acl_inbound_rejected"] >= 1, 10,
             message="B's TO_A counts the stream its inbound ACL kept out")
    assert b.counters()[1]["proxy_sources_created"] == 1          # link.open only
    assert b.counters()[0]["transport_topic_fragments_rcvd_unknown"] == 0
    for receiver in blocked.values():
        receiver.stop()
        assert "Beginning of Transport Session" not in receiver.stderr
    b.wait_for_log("inbound ACL rejects topic link.blocked")
    a.wait_for_log("outbound ACL rejects topic link.secret: its interest is not passed on")


def test_an_outbound_acl_added_at_reload_withdraws_the_interest_it_rejects(routers, make_domain):
    """LAN2's receivers want two topics; a reload gives LAN2 an outbound ACL that rejects one.
    LAN2's worker restarts with the interest it had shared: what its new ACL rejects is withdrawn
    at once (LAN1 stops pulling it in), not kept until use queries find it unanswered."""
    from router.um.context import Context
    from tests.router.test_reload_adversarial import lan_restarted, pids_of, reload_ok, rewrite
    lan1, lan2 = make_domain(), make_domain()
    # Use queries ten minutes apart: nothing but the reload can drop the interest in this test.
    queries = ('      <topic-resolution>\n        <topic-use-query periodic-interval="600000"/>\n'
               '      </topic-resolution>\n')
    acl = LAN2_OUTBOUND.replace("open.secret", "ours.secret")
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path)
                           + endpoint_xml("LAN2", 2, lan2.config_path, after_config=queries)).wait_ready()
    with Context(**lan2.overrides()) as receiving:
        for topic in ("ours.news", "ours.secret"):
            receiving.receiver(topic, on_message=lambda message: None)
        wait_for(lambda: router.counters()[0]["receiver_topics"] == 2, 20,
                 message="LAN1 pulls in both topics LAN2's receivers want")
        pids = pids_of(router)
        rewrite(router, endpoint_xml("LAN1", 1, lan1.config_path)
                + endpoint_xml("LAN2", 2, lan2.config_path, after_config=acl + queries))
        assert reload_ok(router)["changed"] == ["LAN2"]
        wait_for(lambda: lan_restarted(router, "LAN2", pids["LAN2"]), 20, message="LAN2 restarted")
        wait_for(lambda: router.counters()[0]["receiver_topics"] == 1, 20,
                 message="LAN1 stops pulling in the topic LAN2's new outbound ACL rejects")
        wait_for(lambda: router.counters()[1]["local_interest_topics"] == 1, 10,
                 message="LAN2 keeps the interest its ACL lets through")
    router.wait_for_log("outbound ACL rejects topic ours.secret: its interest is not passed on")
