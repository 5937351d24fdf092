"""<monitor> with the lbm transport: every endpoint portal's context publishes its UM statistics into
the domain the transport options name, as the seed's two-LAN example has it (seed §2.11, §5.1)."""
import pytest

from tests.support.routers import endpoint_xml

pytestmark = pytest.mark.integration


def test_portal_contexts_publish_their_transport_statistics_into_lan1(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    monitor = (f'    <monitor interval="1">\n'
               f'      <transport-module module="lbm" options="config={lan1.config_path}"/>\n'
               f'    </monitor>\n')
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path),
                           monitor).wait_ready()
    router.wait_for_log("UM statistics of the endpoint portals' contexts every 1 s")
    # The source and the receiver stay while the statistics are read: they are of the sessions that exist.
    receiver = tools.umrcv("-c", lan2.config_path, "--json", "--timeout", 60, "stats.topic")
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", 1000, "-l", 64, "-L", 30, "--start-on-stdin",
                         "stats.topic")
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()

    # What a monitoring application in LAN1 reads: the LAN1 portal's proxy receiver joined the
    # source's session and got every message; the LAN2 portal's proxy source sent them to its client.
    def delivered(records) -> bool:
        return any(r["application_id"] == "Gateway_Portal_LAN1_rcv_ctx" and r["type"] == "receiver"
                   and r["lbm_msgs_rcved"] == 1000 for r in records)
    records = []
    for _ in range(10):                     # bounded: a few seconds of statistics per round
        records = tools.start("router.cli.ummon", "-c", lan1.config_path, "--json", "--timeout", 3).result_lines(30)
        if delivered(records):
            break
    assert delivered(records), records
    latest = {(r["application_id"], r["type"]): r for r in records}
    received = latest[("Gateway_Portal_LAN1_rcv_ctx", "receiver")]
    assert received["transport"] == "tcp" and received["object"].startswith("TCP:127.0.0.1:")
    sent = latest[("Gateway_Portal_LAN2_src_ctx", "source")]
    assert sent["num_clients"] == 1 and sent["bytes_sent"] >= 1000 * 64
    assert latest[("Gateway_Portal_LAN1_rcv_ctx", "context")]["tr_rcv_topics"] >= 1
    assert latest[("Gateway_Portal_LAN2_rcv_ctx", "context")]["tr_src_topics"] == 1
    assert all(r["application_id"].startswith("Gateway_Portal_LAN") for r in records)
    receiver.stop()
    assert receiver.result(10)["received"] == 1000
    source.stop()
