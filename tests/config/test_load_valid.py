"""The seed's and the spec's example configurations load into the model with the DRO's meaning."""
from __future__ import annotations

import logging

import pytest

from router.config import EndpointConfig, PeerConfig, load_gateway_config
from router.config.model import (Acceptor, Initiator, MonitorConfig, RateLimit, RouteInfo,
                                 RouteRecalculation, WebMonitorConfig)
from tests.config.samples import VALID


def load(name: str):
    return load_gateway_config(VALID / name)


def test_two_lans_seed_example():
    config = load("two-lans.xml")
    assert config.daemon.name == "two-lans"                     # no <name>: the file's stem
    assert config.daemon.log.type == "console"
    assert config.daemon.monitor == MonitorConfig(interval=5, transport_options={"config": str(VALID / "lan1.cfg")})
    assert config.daemon.web_monitor == WebMonitorConfig("0.0.0.0", 15304)
    assert [(p.name, p.domain_id, p.lbm_config) for p in config.endpoints] == [
        ("LAN1", 1, VALID / "lan1.cfg"), ("LAN2", 2, VALID / "lan2.cfg")]
    assert config.portal("LAN2").line == 18


def test_endpoint_defaults_are_the_dros():
    endpoint = load("two-lans.xml").portal("LAN1")
    assert (endpoint.cost, endpoint.max_queue, endpoint.source_deletion_delay) == (1, 1000000, 1000)
    assert (endpoint.hotlink_index, endpoint.smart_batch, endpoint.acl) == (0, False, None)
    resolution = endpoint.topic_resolution
    assert (resolution.initial_request.periodic_interval, resolution.initial_request.duration) == (1000, 10)
    assert resolution.topic_use_query.periodic_interval == 300000
    assert (resolution.topic_use_query.timeout, resolution.topic_use_query.max) == (3000, 5)
    assert resolution.topic_use_query.rate_limit == RateLimit(500000, 500)
    assert resolution.pattern_use_query == resolution.topic_use_query
    assert (resolution.remote_topic_interest.min_interval, resolution.remote_topic_interest.max_interval) == (1000, 60000)
    assert resolution.remote_topic_interest.rate_limit == RateLimit(500000, 0)
    assert (resolution.domain_route.min_interval, resolution.domain_route.max_interval) == (100, 1000)
    assert resolution.domain_route.rate_limit == RateLimit(0, 50)
    assert (endpoint.remote_topic.check_interval, endpoint.remote_topic.max_topics,
            endpoint.remote_topic.timeout) == (90000, 100, 300000)
    assert (endpoint.sqn_window.size, endpoint.sqn_window.increment) == (16384, 2048)
    assert endpoint.context_query.timeout == 900


def test_daemon_defaults_are_the_dros():
    daemon = load("endpoints-only.xml").daemon
    assert daemon.route_info == RouteInfo(1000, 750, 4000, 100)
    assert daemon.route_recalculation == RouteRecalculation(5000, 10000)
    assert (daemon.topicmap.hash_function, daemon.topicmap.size) == ("murmur2", 131111)
    assert (daemon.web_monitor, daemon.admin, daemon.xml_config) == (None, None, None)
    assert daemon.worker_scheduling == "adaptive"


def test_three_lans_with_eliminated_late_join_warns_loads_and_applies_provide(caplog):
    with caplog.at_level(logging.WARNING, logger="router.config"):
        config = load("three-lans.xml")
    assert [p.name for p in config.portals] == ["LAN1", "LAN2", "LAN3"]
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [f"{VALID / 'three-lans.xml'}:{line}: <late-join>: element has been deprecated; "
                        "provide=\"always\": this portal's proxy sources keep what they send for late join (source "
                        "option late_join 1); forward=\"yes\": what a proxy source does not keep is asked of the origin"
                        for line in (24, 30)]
    assert [p.source_um.get("source", "late_join") for p in config.portals] == [False, True, True]
    assert [p.late_join_forward for p in config.portals] == [True, True, True]


def test_each_endpoint_gets_its_lbm_config_options():
    lan2 = load("two-lans.xml").portal("LAN2")
    for um in (lan2.source_um, lan2.receiver_um):
        assert um.get("context", "resolver_multicast_address") == "225.8.32.85"
        assert um.get("context", "resolver_multicast_interface") == "10.29.3.0/24"
        assert um.get("context", "transport_tcp_port_low") == 17000


def test_peer_link_initiator_and_acceptor_sides():
    side_a = load("peer-initiator.xml").portal("TUNNEL_TO_LAN2")
    side_b = load("peer-acceptor.xml").portal("TUNNEL_TO_LAN1")
    assert isinstance(side_a, PeerConfig) and side_a.cost == 2
    assert side_a.link.initiator == Initiator("10.30.3.102", 26123, reconnect_interval=2000)
    assert (side_a.link.acceptor, side_a.link.interface, side_a.link.nodelay) == (None, "10.30.3.100", True)
    assert (side_a.gateway_keepalive.interval, side_a.gateway_keepalive.timeout,
            side_a.gateway_keepalive.idle) == (2000, 6000, False)
    assert side_b.link.acceptor == Acceptor(26123) and side_b.link.initiator is None
    assert side_b.link.interface == "10.30.3.0/24"
    assert (side_b.max_datagram, side_b.batching.min_length, side_b.batching.batch_interval) == (65500, 8192, 200)
    assert (side_b.gateway_keepalive.interval, side_b.gateway_keepalive.timeout) == (5000, 15000)
    assert side_b.udp is None and side_b.sourcemap_size == 131072


def test_dual_tcp_is_accepted_with_a_warning_and_keeps_both_connections(caplog):
    with caplog.at_level(logging.WARNING, logger="router.config"):
        link = load("dual-tcp.xml").portal("TUNNEL_TO_LAN2").link
    assert link.dual
    assert link.acceptor == Acceptor(26123)
    assert link.initiator == Initiator("10.30.3.88", 26124, reconnect_interval=5000)
    assert "dual TCP (<tcp> with <companion>) was eliminated" in caplog.text
    assert f"{VALID / 'dual-tcp.xml'}:9: <tcp>" in caplog.text


def test_xinclude_portals_come_from_their_files():
    config = load("xinclude.xml")
    assert [p.name for p in config.portals] == ["LAN1", "LAN2"]
    assert config.portal("LAN2").where("domain-id") == (str(VALID / "parts" / "lan2-endpoint.xml"), 5)
    assert config.portal("LAN1").lbm_config == VALID / "lan1.cfg"     # relative to the main file


def test_xml_config_selects_each_endpoints_context():
    config = load("xml-config.xml")
    ports = {p.name: p.receiver_um.get("context", "resolver_multicast_port") for p in config.portals}
    assert ports == {"Endpoint_1": 14001, "Endpoint_2": 14002, "Endpoint_3": 14003}
    assert config.portal("Endpoint_1").source_um.get("source", "transport") == "lbtipc"   # <sources template>
    assert config.portal("Endpoint_2").source_um.get("context", "context_name") == "endpt_2"
    assert config.daemon.xml_config_digest


def test_xml_config_wins_over_lbm_attributes():
    endpoint = load("xml-config.xml").portal("Endpoint_1")
    assert endpoint.receiver_um.get("context", "transport_tcp_port_low") == 18000      # not 11000
    assert endpoint.receiver_um.get("context", "request_tcp_interface") == "10.29.1.0/24"


def test_every_element_of_the_dtd_is_read(caplog):
    with caplog.at_level(logging.WARNING, logger="router.config"):
        config = load("everything.xml")
    daemon = config.daemon
    assert (daemon.name, daemon.uid, daemon.gid) == ("everything", 1000, 1000)
    assert (daemon.log.type, daemon.log.path, daemon.log.frequency, daemon.log.size) == (
        "file", VALID / "logs" / "tnwgd.log", "daily", 100)
    assert daemon.pidfile == VALID / "run" / "tnwgd.pid"
    assert daemon.monitor.format_module == "parquet"
    assert daemon.monitor.format_options == {"dir": str(VALID / "stats")}
    assert daemon.route_info == RouteInfo(500, 300, 2000, 16)
    assert daemon.admin == "tcp://127.0.0.1:15400"
    assert daemon.worker_scheduling == "normal"
    assert daemon.cpu_latency_limit == 10
    lan = config.portal("LAN1")
    assert isinstance(lan, EndpointConfig)
    assert (lan.domain_id, lan.cost, lan.hotlink_index, lan.max_queue, lan.smart_batch) == (
        4294967295, 3, 7, 2000000, True)
    assert lan.lbm_attributes[0] == ("context", "transport_tcp_port_low", "18100")
    assert lan.receiver_um.get("context", "transport_tcp_port_low") == 18100    # overrides lan1.cfg
    assert lan.receiver_um.get("context", "context_name") == "lan1_rcv"
    assert lan.source_um.get("context", "context_name") == "lan1_src"
    assert [ace.match for ace in lan.acl.inbound] == ["accept", "reject", "accept"]
    reject = lan.acl.inbound[1]
    assert [(c.kind, c.value, c.comparison) for c in reject.conditions][1:3] == [
        ("transport", "lbtrm", "eq"), ("source-ip", "10.29.2.7", "ne")]
    assert lan.topic_resolution.domain_route.rate_limit == RateLimit(1000, 10)
    assert (lan.sqn_window.size, lan.sqn_window.increment) == (8192, 1024)
    wan = config.portal("WAN")
    assert (wan.sourcemap_size, wan.max_datagram, wan.batching.batch_interval) == (1024, 16000, 3)
    assert (wan.link.compression, wan.link.keepalive, wan.link.receive_buffer) == ("lz4", True, 4194304)
    assert wan.link.tls.certificate == VALID / "certs" / "peer.pem"
    assert (wan.udp.port, wan.udp.send_naks, wan.udp.connect_max_attempts) == (26124, False, 5)
    assert [ace.match for ace in wan.acl.outbound] == ["reject", "accept"]
    warned = {r.getMessage().split("<")[1].split(">")[0] for r in caplog.records}
    assert "with <tls> the data stays on the TCP link" in caplog.text
    assert config.daemon.uid is not None and config.daemon.gid is not None      # switched to at start
    assert warned == {"udp", "daemon-monitor", "propagation-delay", "late-join", "topic-purge",
                          "topic-interest-generate", "topic-domain-activity", "pattern-purge",
                          "pattern-interest-generate", "pattern-domain-activity", "topic-use-check",
                          "pattern-use-check", "publishing-interval"}, "<hotlink-index> is implemented: no warning"


@pytest.mark.parametrize("name", ["two-lans.xml", "three-lans.xml", "endpoints-only.xml",
                                  "peer-initiator.xml", "peer-acceptor.xml", "dual-tcp.xml",
                                  "xinclude.xml", "xml-config.xml", "everything.xml"])
def test_loading_twice_gives_equal_models(name):
    assert load(name) == load(name)
