"""The admin protocol without processes: every request gets exactly one reply with a stable errno."""
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from router.admin.commands import commands
from router.admin.dispatch import dispatch
from router.admin.protocol import MAX_REQUEST_BYTES, Errno, decode_reply, encode_request
from router.monitor.parquet_sink import ParquetSink
from tests.admin.fake_supervisor import FakeSupervisor


def ask(supervisor, payload: bytes) -> list[dict]:
    replies: list[dict] = []
    dispatch(supervisor, payload, lambda raw: replies.append(decode_reply(raw)))
    return replies


def call(supervisor, command, props=None, request_id=7) -> dict:
    replies = ask(supervisor, encode_request(request_id, command, props))
    assert len(replies) == 1, replies
    return replies[0]


def test_every_command_documents_usage_and_reply_data():
    assert set(commands()) == {"status", "reload", "portals", "topics", "stats", "options", "topology", "path",
                               "recalculate", "stop"}
    for name, command in commands().items():
        assert f"Usage: routerctl {name}" in command.description, name
        assert "Reply data" in command.description, name


def test_status_reply_has_the_documented_shape():
    reply = call(FakeSupervisor(), "status", request_id="abc")
    assert (reply["id"], reply["status"], reply["errno"], reply["reason"]) == ("abc", "ok", 0, "")
    data = reply["data"]
    assert {"router", "node_id", "portals"} <= set(data)
    for portal in data["portals"]:
        assert {"name", "kind", "domain_id", "pid", "uptime_s", "restarts", "heartbeat_age_s",
                "proxy_receivers", "proxy_sources", "rx_fragments_per_s", "tx_fragments_per_s"} <= set(portal)


def test_status_names_the_statistics_sink_and_whether_it_keeps_up(tmp_path):
    supervisor = FakeSupervisor()
    assert call(supervisor, "status")["data"]["statistics"] is None
    sink = ParquetSink("fake", lambda: {}, tmp_path / "stats", retain_days=30)
    supervisor.extensions.append(sink)
    try:
        data = call(supervisor, "status")["data"]
        assert data["statistics"]["dir"] == str(tmp_path / "stats") and data["statistics"]["retain_days"] == 30
        assert f"statistics  {tmp_path / 'stats'}, 0 writes, kept 30 days" in commands()["status"].render(data)
    finally:
        sink.writer.stop(5)


@pytest.mark.parametrize("held, asked, shown", [
    (0, 0, "latency     CPU wake-ups limited to 0 µs while the router runs (<cpu-latency-limit>)"),
    (None, 0, "latency     <cpu-latency-limit> 0 µs asked for but not held (refused at start: see the log)"),
    (None, None, "latency     -"),
], ids=["held", "refused", "not asked for"])
def test_status_says_whether_the_cpu_latency_limit_asked_for_is_held(held, asked, shown):
    data = call(FakeSupervisor(), "status")["data"]
    data.update(cpu_latency_limit_us=held, cpu_latency_limit_asked_us=asked)
    assert shown in commands()["status"].render(data).splitlines()


def test_stats_reads_the_counters_and_selects_a_portal():
    data = call(FakeSupervisor(), "stats", {"portal": "LAN1"})["data"]
    assert list(data["portals"]) == ["LAN1"]
    counters = data["portals"]["LAN1"]["counters"]
    assert counters["transport_topic_fragments_rcvd"] == 10
    assert counters["transport_topic_fragment_bytes_rcvd"] == 640
    assert "heartbeat_ns" not in counters


@pytest.mark.parametrize("command, props, errno", [
    ("no-such-command", {}, Errno.UNKNOWN_COMMAND),
    ("stats", {"portal": "LAN9"}, Errno.UNKNOWN_PORTAL),
    ("stats", {"colour": "red"}, Errno.INVALID_PROPERTY),
    ("stats", {"portal": 5}, Errno.INVALID_PROPERTY),
    ("status", {"portal": "LAN1"}, Errno.INVALID_PROPERTY),
])
def test_user_errors_have_stable_numbers(command, props, errno):
    reply = call(FakeSupervisor(), command, props)
    assert (reply["status"], reply["errno"], reply["data"]) == ("error", errno, None)
    assert reply["reason"]


def test_a_rejected_reload_carries_the_validators_message():
    supervisor = FakeSupervisor()
    supervisor.reload_result = {"ok": False, "error": "gw.xml:7: <cost>: expected an integer, got 'x'"}
    reply = call(supervisor, "reload")
    assert reply["errno"] == Errno.CONFIG_INVALID
    assert "gw.xml:7" in reply["reason"]


def test_a_command_bug_is_an_error_reply_not_a_crash(monkeypatch):
    supervisor = FakeSupervisor()
    monkeypatch.setattr(supervisor, "status", lambda: 1 / 0)
    reply = call(supervisor, "status")
    assert reply["errno"] == Errno.COMMAND_FAILED and "ZeroDivisionError" in reply["reason"]


def test_topics_replies_when_the_workers_answer():
    supervisor = FakeSupervisor()
    replies: list[dict] = []
    dispatch(supervisor, encode_request(1, "topics", {"portal": "LAN2"}), lambda raw: replies.append(decode_reply(raw)))
    assert replies == []                          # waiting for the worker, not blocking
    what, portals, on_done = supervisor.queries[0]
    assert (what, portals) == ("topics", ["LAN2"])
    on_done({"LAN2": {"proxy_receivers": ["a.topic"]}})
    on_done({"LAN2": None})                       # a late second call must not send a second reply
    assert len(replies) == 1
    data = replies[0]["data"]
    assert data["portals"] == {"LAN2": {"proxy_receivers": ["a.topic"]}}
    assert data["interest"]["topics"] == {"a.topic": ["LAN2"]}
    assert data["interest"]["pcre_patterns"] == {"^b.*": ["LAN1"]}


def test_stop_asks_the_supervisor_to_stop():
    supervisor = FakeSupervisor()
    assert call(supervisor, "stop")["data"] == {"stopping": True, "pid": 4242}
    assert supervisor.stopped


def test_oversized_request_is_refused_unparsed():
    reply = ask(FakeSupervisor(), b"\x81" + b"x" * (MAX_REQUEST_BYTES + 1))[0]
    assert reply["errno"] == Errno.REQUEST_TOO_LARGE


@pytest.mark.parametrize("payload", [
    b"", b"\xc1", b"\x93\x01\x02\x03", msgpack.packb({"command": 5}), msgpack.packb({"id": [1], "command": "status"}),
    msgpack.packb({"command": "status", "props": [1]}), msgpack.packb({"command": "status", "extra": 1}),
    msgpack.packb({"command": "status", "props": {1: 2}}), msgpack.packb({"id": "x" * 1000, "command": "status"}),
])
def test_malformed_envelopes(payload):
    reply = ask(FakeSupervisor(), payload)[0]
    assert (reply["status"], reply["errno"]) == ("error", Errno.MALFORMED_REQUEST)


scalars = (st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats() | st.text(max_size=20)
           | st.binary(max_size=20))
msgpack_values = st.recursive(
    scalars,
    lambda children: (st.lists(children, max_size=4)
                      | st.dictionaries(st.text(max_size=8) | st.integers(-9, 9), children, max_size=4)),
    max_leaves=12)
envelopes = st.fixed_dictionaries({"id": msgpack_values,
                                   "command": st.sampled_from(sorted(commands())) | st.text(),
                                   "props": msgpack_values})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=200), msgpack_values.map(lambda v: msgpack.packb(v, use_bin_type=True)),
                 envelopes.map(msgpack.packb)))
def test_any_payload_gets_exactly_one_well_formed_reply(payload):
    supervisor = FakeSupervisor()
    replies = ask(supervisor, payload)
    for _, portals, on_done in supervisor.queries:       # answer asynchronous commands at once
        on_done({name: None for name in portals})
    assert len(replies) == 1
    reply = replies[0]
    assert reply["errno"] in set(Errno)
    assert (reply["status"] == "ok") == (reply["errno"] == 0)
    assert reply["errno"] != Errno.COMMAND_FAILED, reply["reason"]
