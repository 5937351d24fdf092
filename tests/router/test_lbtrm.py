"""LBT-RM through the router: what goes on the wire decoded by tshark, and per-topic transports
(both ways and loss repair: tests/router/test_udp_transports.py).

LAN1's sources (the application's and the router's proxy sources) use LBT-RM, as the seed's
lan1.cfg does; LAN2's use LBT-TCP. Loss is made with LBTRM_LOSS_RATE in a receiver's environment
(it drops that share of the DATA datagrams it receives): what it misses it must NAK and get back.
"""
import pytest

from tests.support.delivery import send_and_receive, start_receiver, start_source
from tests.support.routers import endpoint_xml
from tests.support.tshark import LiveCapture, assert_no_expert_info, decode

pytestmark = pytest.mark.integration

LBTRM = "source transport lbtrm"


def _lbtrm_prefs(domain) -> list[str]:
    return [*domain.lbtrm_prefs(), *domain.lbmr_prefs()]


def _receiver(tools, domain, topic: str, count: int, loss_percent: int = 0):
    return start_receiver(tools, domain, topic, count, loss_percent, "LBTRM_LOSS_RATE")


def test_lbtrm_proxy_source_on_the_wire(routers, tools, make_domain, tmp_path):
    """In LAN1 (LBT-RM), the proxy of LAN2's source advertises an LBT-RM session with hop count
    and cost, its data and session messages decode as LBT-RM carrying LBMC, with no expert warning."""
    lan1, lan2 = make_domain(LBTRM), make_domain()
    routers.start(endpoint_xml("LAN1", 1, lan1.config_path, cost=3)
                  + endpoint_xml("LAN2", 2, lan2.config_path, cost=4)).wait_ready()
    count = 2000
    receiver = _receiver(tools, lan1, "rm.wire", count)
    pcap = tmp_path / "lan1.pcapng"
    with LiveCapture(capture_filter=f"udp and (dst host {lan1.group} or dst host {lan1.lbtrm_group} "
                                    f"or dst portrange {lan1.tcp_low}-{lan1.tcp_high})", path=pcap) as capture:
        send_and_receive(start_source(tools, lan2, "rm.wire", count, size=100), receiver, count)
    prefs, decode_as = _lbtrm_prefs(lan1), lan1.lbtrm_decode_as()
    assert_no_expert_info(pcap, decode_as, prefs)
    tirs = [f for f in decode(pcap, decode_as, prefs, fields=["lbmr.tir.name", "lbmr.tir.lbtrm.mcastip", "lbmr.tir.lbtrm.dport",
                                                        "lbmr.tir.lbtrm.sport", "lbmr.topt.cost.hop_count",
                                                        "lbmr.topt.cost.cost"], display_filter=capture.not_canary)
            if f.get("lbmr.tir.name") == ["rm.wire"]]
    assert tirs, "the proxy source advertised itself"
    advert = tirs[0]
    assert advert["lbmr.tir.lbtrm.mcastip"] == [lan1.lbtrm_group]
    assert int(advert["lbmr.tir.lbtrm.dport"][0]) == lan1.port
    assert lan1.tcp_low <= int(advert["lbmr.tir.lbtrm.sport"][0]) <= lan1.tcp_high
    # One hop; the cost of the portal that advertises it (LAN1's 3), as every proxy source says.
    assert advert["lbmr.topt.cost.hop_count"] == ["1"] and advert["lbmr.topt.cost.cost"] == ["3"]
    data = decode(pcap, decode_as, prefs, fields=["lbtrm.hdr.type", "lbtrm.data.sqn", "lbmc.sqn", "lbmc.topic_idx"],
                  display_filter=f"lbtrm and {capture.not_canary}")
    kinds = {f["lbtrm.hdr.type"][0] for f in data}
    assert "0x00" in kinds or "0x0" in kinds, kinds                    # DATA
    messages = sorted(int(sqn) for f in data for sqn in f.get("lbmc.sqn", []))
    assert messages == list(range(count)), "every message, once, in the DATA the receiver got"


def test_a_proxy_source_its_rate_limit_holds_back_drops_beyond_max_queue_and_says_why(routers, tools, make_domain):
    """An LBT-RM proxy source sends no faster than its data rate limit: what comes faster waits up
    to <max-queue>, and beyond it is dropped, counted and logged. UDP never waits for receivers,
    so the line names the rate limit, where an operator must look, not a slow receiver."""
    lan1 = make_domain(LBTRM, "context transport_lbtrm_data_rate_limit 1000000")
    lan2 = make_domain()
    max_queue = "      <max-queue>100000</max-queue>\n"
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path, before_config=max_queue)
                           + endpoint_xml("LAN2", 2, lan2.config_path)).wait_ready()
    count = 2000                                    # 2 MB: 16 s at 1 Mbit/s, 20 times <max-queue>
    receiver = tools.start("router.cli.umrcv", "-c", lan1.config_path, "--json", "--timeout", 120, "rm.limited")
    source = start_source(tools, lan2, "rm.limited", count, size=1000)
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    assert source.result(120)["sent"] == count, "the source was held back by another domain's rate limit"
    router.wait_for_log("UMR-3001-1")
    [line] = [line for line in router.log().splitlines() if "UMR-3001-1" in line][:1]
    assert ("portal LAN1: the LBT-RM rate limit (transport_lbtrm_data_rate_limit 1000000 bits/s) holds back what "
            "comes faster:") in line, line
    lan1_counters = router.counters()[0]
    assert lan1_counters["transport_topic_fragments_dropped_would_block"] > 0
    assert lan1_counters["data_bytes_enqueued_limit"] == 100000


def um_xml_with_rm_template(contexts: str) -> str:
    """A UM XML configuration for the router's contexts with a template, rm-source, of LBT-RM sources."""
    return f"""<um-configuration version="1.0">
  <templates>
    <template name="rm-source">
      <options type="source">
        <option name="transport" default-value="lbtrm" />
      </options>
    </template>
  </templates>
  <applications>
    <application name="tnwgd">
      <contexts>
{contexts}      </contexts>
    </application>
  </applications>
</um-configuration>
"""


UM_XML_TOPIC_TRANSPORT = um_xml_with_rm_template("""        <context>
          <sources>
            <topic topicname="rm.by.topic" template="rm-source" />
          </sources>
        </context>
""")


def test_a_um_xml_configuration_gives_one_topics_proxy_sources_their_own_transport(routers, tools, make_domain,
                                                                                     tmp_path):
    """Seed §4.1: the daemon's <xml-config> assigns UM attributes to the proxy sources of one
    topic: in LAN2 (LBT-TCP), the proxy for rm.by.topic multicasts, the proxy for others does not."""
    lan1, lan2 = make_domain(), make_domain()
    um_xml = tmp_path / "um.xml"
    um_xml.write_text(UM_XML_TOPIC_TRANSPORT)
    routers.start(endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path),
                  daemon_extra=f"    <xml-config>{um_xml}</xml-config>\n").wait_ready()
    count = 5000
    by_topic, other = _receiver(tools, lan2, "rm.by.topic", count), _receiver(tools, lan2, "rm.other", count)
    by_topic_source, other_source = (start_source(tools, lan1, "rm.by.topic", count),
                                     start_source(tools, lan1, "rm.other", count))
    by_topic_got = send_and_receive(by_topic_source, by_topic, count)
    other_got = send_and_receive(other_source, other, count)
    assert [s.split(":")[0] for s in by_topic_got["um_sources"]] == ["LBTRM"], by_topic_got["um_sources"]
    assert [s.split(":")[0] for s in other_got["um_sources"]] == ["TCP"], other_got["um_sources"]


# The portal's two contexts configured apart by name: sources of the source context multicast.
UM_XML_SOURCE_CONTEXT = um_xml_with_rm_template("""        <context name="lan2-src">
          <sources template="rm-source" />
        </context>
        <context name="lan2-rcv" />
""")


def test_proxy_sources_take_the_source_contexts_options(routers, tools, make_domain, tmp_path):
    """Seed §4.1.1: <source-context-name> names the context the portal's proxy sources belong to,
    so a UM XML configuration's template for that context is theirs; the receive context, named
    apart, has no say in them."""
    lan1, lan2 = make_domain(), make_domain()
    um_xml = tmp_path / "um.xml"
    um_xml.write_text(UM_XML_SOURCE_CONTEXT)
    names = ("      <source-context-name>lan2-src</source-context-name>\n"
             "      <receiver-context-name>lan2-rcv</receiver-context-name>\n")
    routers.start(endpoint_xml("LAN1", 1, lan1.config_path)
                  + endpoint_xml("LAN2", 2, lan2.config_path, after_config=names),
                  daemon_extra=f"    <xml-config>{um_xml}</xml-config>\n").wait_ready()
    count = 3000
    receiver = _receiver(tools, lan2, "ctx.rm", count)
    got = send_and_receive(start_source(tools, lan1, "ctx.rm", count), receiver, count)
    assert [s.split(":")[0] for s in got["um_sources"]] == ["LBTRM"], got["um_sources"]
