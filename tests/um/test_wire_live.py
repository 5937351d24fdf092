"""tshark as the oracle for live traffic: what router.um puts on the wire decodes cleanly and says
what the source advertised (topic, index, address, port, session id), and tshark ties the data
frames to the topic."""
import threading

import pytest

from router.um.context import Context
from tests.support.processes import wait_for
from tests.support.tshark import LiveCapture, assert_no_expert_info, decode

pytestmark = pytest.mark.integration


def test_live_lbmr_and_lbt_tcp_decode_cleanly_and_match_the_advertisement(domain, tmp_path):
    pcap = tmp_path / "live.pcapng"
    capture_filter = f"udp port {domain.port} or tcp portrange {domain.tcp_low}-{domain.tcp_high}"
    received = []
    done = threading.Event()
    with LiveCapture(capture_filter=capture_filter, path=pcap):
        publisher = Context(**domain.overrides())
        subscriber = Context(**domain.overrides())
        try:
            def on_message(message):
                received.append(message)
                if len(received) == 23:
                    done.set()
            subscriber.receiver("oracle.topic", on_message)
            subscriber.wildcard_receiver(r"^oracle\.", lambda m: None)
            source = publisher.source("oracle.topic")
            wait_for(lambda: source.receiver_count >= 1, 10, message="receiver joins")
            for n in range(20):
                source.send(b"small message %d" % n)
            for n in range(3):
                source.send(bytes([n]) * 150_000)          # fragmented at 65535
            source.flush()
            assert done.wait(10)
            advertised = source.transport_info
            index = source.index
        finally:
            subscriber.close()
            publisher.close()
    decode_as = [f"udp.port=={domain.port},lbmr", f"tcp.port=={advertised.port},lbttcp"]
    prefs = [f"lbttcp.source_port_low:{advertised.port}", f"lbttcp.source_port_high:{advertised.port}",
             "lbmc.reassemble_fragments:TRUE"]
    # Warnings and errors: TCP's own notes about a connection closing are not ours to fix.
    assert_no_expert_info(pcap, decode_as, prefs, min_severity="warn")

    frames = decode(pcap, decode_as, prefs, fields=[
        "lbmr.tir.name", "lbmr.tir.index", "lbmr.tir.tcp.ip", "lbmr.tir.tcp.port", "lbmr.tir.tcp.session_id",
        "lbmr.tqr.name", "lbmr.hdr.type", "lbmc.topic", "lbmc.type", "lbmc.frag.offset"])
    tirs = [f for f in frames if f.get("lbmr.tir.name") == ["oracle.topic"]]
    assert tirs, "no TIR for oracle.topic in the capture"
    for tir in tirs:
        assert tir["lbmr.tir.index"] == [str(index)]
        assert tir["lbmr.tir.tcp.ip"] == ["127.0.0.1"]
        assert tir["lbmr.tir.tcp.port"] == [str(advertised.port)]
        assert int(tir["lbmr.tir.tcp.session_id"][0], 0) == advertised.session_id
    assert any("oracle.topic" in f.get("lbmr.tqr.name", []) for f in frames), "no TQR seen"
    assert any(f.get("lbmr.hdr.type") == ["1"] or "0x01" in f.get("lbmr.hdr.type", []) for f in frames), \
        "no wildcard TQR seen"
    topic_frames = [f for f in frames if "oracle.topic" in f.get("lbmc.topic", [])]
    assert topic_frames, "tshark did not tie any data frame to the topic"
    assert any(f.get("lbmc.frag.offset") for f in frames), "no fragment headers decoded"
