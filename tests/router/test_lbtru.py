"""LBT-RU through the router: the wire decoded by tshark and the seed's per-topic transports (both
ways and loss repair: tests/router/test_udp_transports.py).

LAN1's sources (the application's and the router's proxy sources) use LBT-RU; LAN2's use LBT-TCP.
Loss is made with LBTRU_LOSS_RATE in a receiver's environment (it drops that share of the DATA
datagrams it receives): what it misses it must NAK and get back from the source that sent it,
which for a receiver in LAN1 is the router's proxy source.
"""
import pytest

from tests.support.delivery import send_and_receive, start_receiver, start_source
from tests.support.routers import endpoint_xml
from tests.support.tshark import LiveCapture, decode, expert_info

pytestmark = pytest.mark.integration

LBTRU = "source transport lbtru"


def _prefs(domain) -> list[str]:
    """What makes tshark claim the domain's LBT-RU ports and its topic resolution group."""
    return [f"lbtru.source_port_low:{domain.tcp_low}", f"lbtru.source_port_high:{domain.tcp_high}",
            f"lbtru.receiver_port_low:{domain.request_low}", f"lbtru.receiver_port_high:{domain.request_high}",
            *domain.lbmr_prefs()]


def _receiver(tools, domain, topic: str, count: int, loss_percent: int = 0):
    return start_receiver(tools, domain, topic, count, loss_percent, "LBTRU_LOSS_RATE")


def test_lbtru_proxy_source_on_the_wire(routers, tools, make_domain, tmp_path):
    """In LAN1, the proxy of LAN2's source advertises an LBT-RU session with hop count and cost;
    the receiver connects to it (CREQ, SM SYN) and its data decodes as LBT-RU carrying the LBMC
    messages, with no expert info beyond the dissector's by-design markers."""
    lan1, lan2 = make_domain(LBTRU), make_domain()
    routers.start(endpoint_xml("LAN1", 1, lan1.config_path, cost=3)
                  + endpoint_xml("LAN2", 2, lan2.config_path, cost=4)).wait_ready()
    count = 2000
    receiver = _receiver(tools, lan1, "ru.wire", count)
    pcap = tmp_path / "lan1.pcapng"
    with LiveCapture(capture_filter=f"udp and (dst host {lan1.group} or portrange {lan1.tcp_low}-{lan1.tcp_high})",
                     path=pcap) as capture:
        send_and_receive(start_source(tools, lan2, "ru.wire", count, size=100), receiver, count)
    prefs = _prefs(lan1)
    rows = expert_info(pcap, [], prefs, min_severity="warn")
    assert all(row.startswith("Warn/Sequence/LBT-RU: NAK") for row in rows), rows
    tirs = [f for f in decode(pcap, [], prefs, fields=["lbmr.tir.name", "lbmr.tir.lbtru.ip", "lbmr.tir.lbtru.port",
                                                        "lbmr.tir.lbtru.session_id", "lbmr.topt.cost.hop_count",
                                                        "lbmr.topt.cost.cost"], display_filter=capture.not_canary)
            if f.get("lbmr.tir.name") == ["ru.wire"]]
    assert tirs, "the proxy source advertised itself"
    advert = tirs[0]
    assert advert["lbmr.tir.lbtru.ip"] == ["127.0.0.1"]
    port = int(advert["lbmr.tir.lbtru.port"][0])
    assert lan1.tcp_low <= port <= lan1.tcp_high
    # One hop; the cost of the portal that advertises it (LAN1's 3), as every proxy source says.
    assert advert["lbmr.topt.cost.hop_count"] == ["1"] and advert["lbmr.topt.cost.cost"] == ["3"]
    packets = decode(pcap, [], prefs, fields=["lbtru.hdr.type", "lbtru.hdr.flags.syn", "lbmc.sqn", "udp.srcport"],
                     display_filter=f"lbtru and {capture.not_canary}")
    kinds = {int(f["lbtru.hdr.type"][0], 0) for f in packets}
    assert {0, 2, 6} <= kinds, kinds                         # DATA, SM, CREQ (ACKs need a longer session)
    assert any(f.get("lbtru.hdr.flags.syn") in (["1"], ["True"]) for f in packets), "an SM SYN answered the CREQ"
    messages = sorted(int(sqn) for f in packets if int(f["udp.srcport"][0]) == port for sqn in f.get("lbmc.sqn", []))
    assert messages == list(range(count)), "every message, once, in the DATA the proxy source sent"


# Seed §4.1.2: one topic's proxy sources take LBT-RU from options written in its <topic> tag,
# another's take LBT-RM from a template; the rest keep the portal's transport.
SEED_UM_XML = """<?xml version="1.0" encoding="UTF-8" ?>
<um-configuration version="1.0">
  <templates>
    <template name="tnwgd-common">
      <options type="source">
        <option name="transport" default-value="tcp" />
      </options>
    </template>
    <template name="rm-source">
      <options type="source">
        <option name="transport" default-value="lbtrm" />
      </options>
    </template>
  </templates>
  <applications>
    <application name="tnwgd" template="tnwgd-common">
      <contexts>
        <context>
          <sources>
            <topic topicname="LBTRM_TOPIC" template="rm-source" />
            <topic topicname="LBTRU_TOPIC">
              <options type="source">
                <option name="transport" default-value="lbtru" />
              </options>
            </topic>
          </sources>
        </context>
      </contexts>
    </application>
  </applications>
</um-configuration>
"""


def test_the_seeds_um_xml_gives_topics_lbtru_and_lbtrm_proxy_sources(routers, tools, make_domain, tmp_path):
    lan1, lan2 = make_domain(), make_domain()
    um_xml = tmp_path / "sample-config.xml"
    um_xml.write_text(SEED_UM_XML)
    routers.start(endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path),
                  daemon_extra=f"    <xml-config>{um_xml}</xml-config>\n").wait_ready()
    count = 3000
    transports = {}
    for topic in ("LBTRU_TOPIC", "LBTRM_TOPIC", "OTHER_TOPIC"):
        receiver = _receiver(tools, lan2, topic, count)
        got = send_and_receive(start_source(tools, lan1, topic, count), receiver, count)
        transports[topic] = [s.split(":")[0] for s in got["um_sources"]]
    assert transports == {"LBTRU_TOPIC": ["LBTRU"], "LBTRM_TOPIC": ["LBTRM"], "OTHER_TOPIC": ["TCP"]}, transports
