"""UM automatic monitoring (router.um.monitoring): settings, the csv records, a context publishing its
statistics over real loopback traffic, and `ummon` printing them."""
import json
import socket
import threading

import pytest

from router.um import monitoring
from router.um.context import Context
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration


def test_settings_follow_the_transport_and_format_options(tmp_path):
    found = monitoring.settings(5, "app", "lbm", "config=mon.cfg;topic=stats.here;context|resolver_multicast_port=13001",
                                "csv", "separator=|", base_dir=tmp_path)
    assert (found.topic, found.config_file, found.separator) == ("stats.here", str(tmp_path / "mon.cfg"), "|")
    assert found.options == (("context", "resolver_multicast_port", "13001"),)
    assert monitoring.settings(1, "a", "lbm", {}, "csv", {}).topic == "/29west/statistics"
    for transport, fmt, options, words in (("udp", "csv", "", "transport 'udp' is not available"),
                                           ("lbm", "pb", "", "format 'pb' is not available"),
                                           ("lbm", "csv", "tpoic=x", "unknown monitoring transport option 'tpoic'")):
        with pytest.raises(monitoring.MonitoringError, match=words):
            monitoring.settings(1, "a", transport, options, fmt, "")
    with pytest.raises(monitoring.MonitoringError, match="separator=C"):
        monitoring.settings(1, "a", "lbm", "", "csv", "separator=ab")


def test_records_round_trip_and_bad_ones_are_refused():
    repair = tuple(range(1, 9))
    values = ("tcp", 2, 1000, 3, 0, 0, *repair)
    data = monitoring.encode("source", "app", "TCP:127.0.0.1:14371:00000001", values, "|", when_ms=12)
    record = monitoring.decode(data, "|")
    assert record == {"type": "source", "application_id": "app", "time_ms": 12,
                      "object": "TCP:127.0.0.1:14371:00000001", "transport": "tcp", "num_clients": 2,
                      "bytes_sent": 1000, "batches_sent": 3, "bytes_buffered": 0, "bytes_dropped_would_block": 0,
                      "msgs_sent": 1, "nak_pckts_rcved": 2, "naks_rcved": 3, "naks_ignored": 4, "naks_shed": 5,
                      "naks_rx_delay_ignored": 6, "rxs_sent": 7, "rx_bytes_sent": 8}
    for bad, words in ((b"2,source,a,1,x", "not a version 1"), (b"1,source,a,1,x,tcp", "has 1 values, not 14")):
        with pytest.raises(monitoring.MonitoringError, match=words):
            monitoring.decode(bad)
    with pytest.raises(monitoring.MonitoringError, match="holds the separator"):
        monitoring.encode("source", "a,b", "x", values)


def test_a_monitored_context_publishes_its_own_and_its_transports_statistics(domain):
    records, lock = [], threading.Lock()

    def on_statistics(message):
        with lock:
            records.append(monitoring.decode(message.data))

    def latest(kind: str, app: str) -> dict | None:
        with lock:
            found = [r for r in records if r["type"] == kind and r["application_id"] == app]
        return found[-1] if found else None

    got = []
    with Context(**domain.overrides()) as watcher, Context(**domain.overrides()) as subscriber, \
            Context(**domain.overrides(), monitor_interval=1, monitor_appid="publisher") as publisher, \
            Context(**domain.overrides(), monitor_interval=1, monitor_appid="subscriber") as watched:
        watcher.receiver(monitoring.DEFAULT_TOPIC, on_statistics)
        watched.receiver("mon.topic", got.append)
        source = publisher.source("mon.topic")
        wait_for(lambda: source.receiver_count == 1, 10, message="the receiver joined")
        for n in range(500):
            source.send(b"m%d" % n)
        source.flush()
        wait_for(lambda: len(got) == 500, 10, message="500 messages arrived")
        wait_for(lambda: (latest("receiver", "subscriber") or {}).get("lbm_msgs_rcved") == 500, 10,
                 message="the receiver's transport statistics count all 500")
        wait_for(lambda: (latest("source", "publisher") or {}).get("bytes_sent", 0) > 500 * 12, 10,
                 message="the source's transport statistics count what it sent")
    receiving = latest("receiver", "subscriber")
    assert receiving["object"].startswith("TCP:127.0.0.1:") and receiving["transport"] == "tcp"
    assert latest("source", "publisher")["num_clients"] == 1
    context = latest("context", "subscriber")
    assert context["tr_rcv_topics"] == 1 and context["tr_rcv_unresolved_topics"] == 0 and context["tr_dgrams_rcved"] > 0
    assert latest("context", "publisher")["tr_src_topics"] == 1
    del subscriber


def test_ummon_prints_what_a_monitored_tool_publishes(tools, domain, tmp_path):
    watched = tmp_path / "watched.cfg"
    watched.write_text(domain.config_path.read_text() + "context monitor_interval 1\n"
                       "context monitor_appid umrcv-under-watch\n")
    watcher = tools.start("router.cli.ummon", "-c", domain.config_path, "--json", "-C", 2, "-a", "umrcv-under-watch",
                          "--timeout", 30)
    watcher.wait_for_stderr("ummon: subscribed", 30)
    receiver = tools.umrcv("-c", watched, "--json", "--timeout", 30, "-C", 1, "mon.tool")
    receiver.wait_for_stderr("umrcv: subscribed", 30)
    lines = watcher.result_lines(60)
    assert [line["type"] for line in lines] == ["context", "context"]
    assert all(line["application_id"] == "umrcv-under-watch" and line["tr_rcv_topics"] == 1 for line in lines)
    receiver.stop()


def test_a_context_refuses_monitoring_it_cannot_do_before_it_opens_anything(domain):
    with pytest.raises(ValueError, match="monitoring transport 'udp' is not available here"):
        Context(**domain.overrides(), monitor_interval=1, monitor_transport="udp", context_name="watched")


def test_lbtru_loss_repair_is_in_the_transport_statistics(domain, monkeypatch):
    """A receiver losing 10% of the LBT-RU datagrams it hears: its record counts the NAKs and
    retransmissions and nothing lost, the source's the NAKs it answered."""
    monkeypatch.setenv("LBTRU_LOSS_RATE", "10")
    records, lock = [], threading.Lock()

    def on_statistics(message):
        with lock:
            records.append(monitoring.decode(message.data))

    def latest(kind: str, app: str) -> dict:
        with lock:
            found = [r for r in records if r["type"] == kind and r["application_id"] == app]
        return found[-1] if found else {}

    got = []
    with Context(**domain.overrides()) as watcher, \
            Context(**domain.overrides(), transport="lbtru", monitor_interval=1, monitor_appid="ru-src") as publisher, \
            Context(**domain.overrides(), monitor_interval=1, monitor_appid="ru-rcv") as watched:
        watcher.receiver(monitoring.DEFAULT_TOPIC, on_statistics)
        watched.receiver("mon.ru", got.append)
        source = publisher.source("mon.ru")
        wait_for(lambda: source.receiver_count == 1, 10, message="the receiver connected")
        for n in range(3000):
            source.send(b"m%d" % n * 20)
        source.flush()
        wait_for(lambda: len(got) == 3000, 30, message="every message, repaired")
        wait_for(lambda: latest("receiver", "ru-rcv").get("lbm_msgs_rcved") == 3000, 10,
                 message="the receiver's record counts all 3000")
        wait_for(lambda: latest("source", "ru-src").get("rxs_sent", 0) > 0, 10, message="the source's retransmissions")
    receiving, sending = latest("receiver", "ru-rcv"), latest("source", "ru-src")
    assert receiving["transport"] == "lbtru" and receiving["object"].startswith("LBTRU:127.0.0.1:")
    assert receiving["naks_sent"] > 0 and receiving["retransmissions_rcved"] > 0 and receiving["lost"] == 0, receiving
    assert sending["transport"] == "lbtru" and sending["num_clients"] == 1 and sending["naks_rcved"] > 0, sending



def test_ummon_reports_malformed_statistics_and_goes_on(tools, domain):
    """Records a monitoring receiver cannot read (a time that is no number, a counter that is
    none) are said on standard error and counted (ummon then exits 1), never a traceback; the
    good record after them is printed."""
    watcher = tools.start("router.cli.ummon", "-c", domain.config_path, "--json", "-C", 1, "--timeout", 30)
    watcher.wait_for_stderr("ummon: subscribed", 30)
    context_values = ",".join(["0"] * len(monitoring.FIELDS["context"]))
    bad_time = f"1,context,app,soon,ctx,{context_values}".encode()
    bad_counter = f"1,context,app,12,ctx,--5,{context_values[2:]}".encode()
    good = monitoring.encode("context", "app", "ctx", [7] * len(monitoring.FIELDS["context"]), when_ms=12)
    with Context(**domain.overrides()) as publisher:
        source = publisher.source(monitoring.DEFAULT_TOPIC)
        wait_for(lambda: source.receiver_count == 1, 10, message="ummon joined")
        for data in (bad_time, bad_counter, good):
            source.send(data)
        source.flush()
        watcher.proc.wait(30)
    assert watcher.proc.returncode == 1, watcher.stderr
    assert watcher.stderr.count("ummon: ") == 3, watcher.stderr        # subscribed, and each bad record
    assert "time" in watcher.stderr and "tr_dgrams_sent" in watcher.stderr
    printed = [json.loads(line) for line in watcher.stdout_lines if line.startswith("{")]
    assert printed == [monitoring.decode(good)]


def test_a_record_with_a_counter_that_is_no_number_is_refused():
    names = monitoring.FIELDS["source"]
    values = ["tcp", "2", "x1000"] + ["0"] * (len(names) - 3)
    with pytest.raises(monitoring.MonitoringError, match="bytes_sent"):
        monitoring.decode(("1,source,app,12,TCP:x," + ",".join(values)).encode())
    with pytest.raises(monitoring.MonitoringError, match="time"):
        monitoring.decode(("1,source,app,²,TCP:x,tcp," + ",".join(["0"] * (len(names) - 1))).encode())


def test_a_stalled_statistics_receiver_neither_stops_the_monitored_context_nor_grows_its_memory(domain):
    """A monitoring receiver that stopped reading (a suspended ummon, a hung collector): the
    context publishing its statistics keeps running (publishing is on its loop, which its own
    receivers and sources need) and what the receiver does not take is dropped and counted
    beyond the session's queue limit."""
    with Context(**domain.overrides(), monitor_interval=3600, monitor_appid="a" * 4000) as watched:
        monitor = watched.monitor
        session = monitor.source.session
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(("127.0.0.1", session.port))
        published = threading.Event()
        stop_draining = threading.Event()

        def publish_often():                # about 16 MB of 4 KB records: past the 8 MB queue
            for _ in range(4000):
                monitor.publish()
            published.set()

        def drain():                        # only once the test has looked: lets a blocked loop go
            stop_draining.wait()
            stalled.settimeout(0.2)
            while not published.is_set():
                try:
                    stalled.recv(1 << 20)
                except (socket.timeout, OSError):
                    pass

        drainer = threading.Thread(target=drain, daemon=True)
        drainer.start()
        try:
            wait_for(lambda: session.receiver_count == 1, 10, message="the statistics receiver connected")
            watched.loop.call_soon_threadsafe(publish_often)
            wait_for(published.is_set, 60, message="4000 publications while the receiver reads nothing")
            assert session.queued_bytes() <= 8 * 1024 * 1024
            assert session.counters["dropped_would_block_bytes"] > 0
        finally:
            stop_draining.set()
            drainer.join(120)
            stalled.close()
