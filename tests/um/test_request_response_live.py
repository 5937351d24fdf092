"""Request/response between two contexts on loopback: a requester's source, a responder's receiver
answering from its callback or from another thread; fragmented requests and responses; responses
nobody asked for; a request port that cannot be opened; and tshark's reading of it all."""
import socket
import threading

import pytest

from router.um.config import UMConfig
from router.um.context import Context
from router.um.messages import RequestMessage
from router.um.requests import RequestOrigin, RequestPortUnavailable
from tests.support.processes import wait_for
from tests.support.tshark import LiveCapture, assert_no_expert_info, decode

pytestmark = pytest.mark.integration


class Responder:
    """A receiver that answers every request with b"re:" + its data (or with `answer(request)`)."""

    def __init__(self, context: Context, topic: str, answer=None, on_batch: bool = False):
        self.seen = []
        self.answer = answer or (lambda request: b"re:" + request.data)
        if on_batch:
            self.receiver = context.receiver(topic, on_batch=lambda messages: [self._on(m) for m in messages])
        else:
            self.receiver = context.receiver(topic, self._on)

    def _on(self, message) -> None:
        self.seen.append(message)
        if isinstance(message, RequestMessage):
            message.respond(self.answer(message))


@pytest.fixture
def pair(domain):
    requester, responder = Context(**domain.overrides()), Context(**domain.overrides())
    yield requester, responder
    responder.close()
    requester.close()


def joined_source(context: Context, topic: str, **kwargs):
    source = context.source(topic, **kwargs)
    wait_for(lambda: source.receiver_count >= 1, 20, message=f"a receiver joins {topic}")
    return source


@pytest.mark.parametrize("on_batch", [False, True], ids=["on_message", "on_batch"])
def test_fifty_requests_each_answered_in_sequence_with_the_data_around_them(pair, on_batch):
    requester, responder_context = pair
    responder = Responder(responder_context, "svc.quote", on_batch=on_batch)
    source = joined_source(requester, "svc.quote")
    answers, pending = {}, []
    for n in range(50):
        source.send(b"data %d" % n)
        pending.append(source.send_request(b"ask %d" % n, lambda r, n=n: answers.setdefault(n, []).append(r)))
    source.flush()
    wait_for(lambda: len(answers) == 50, 20, message="every request answered")
    assert [p.qidx for p in pending] == list(range(1, 51))
    for n in range(50):
        (response,) = answers[n]
        assert response.data == b"re:ask %d" % n and response.qidx == pending[n].qidx
        assert response.source.startswith("TCP:127.0.0.1:")
        assert pending[n].responses == 1
    seen = responder.seen
    assert [m.sequence_number for m in seen] == list(range(100))
    assert [(isinstance(m, RequestMessage), m.data) for m in seen] == \
        [pair for n in range(50) for pair in ((False, b"data %d" % n), (True, b"ask %d" % n))]
    assert seen[1].origin == RequestOrigin(*requester.request_address(), 1)
    counters = requester.counters()
    assert (counters["requests_sent"], counters["responses_received"], counters["responses_unmatched"]) == (50, 50, 0)
    wait_for(lambda: responder_context.counters()["responses_sent"] == 50, 10, message="responses counted")
    assert responder_context.counters()["responses_dropped"] == 0


def test_a_fragmented_request_and_a_fragmented_response(pair):
    requester, responder_context = pair
    request, answer = bytes(range(256)) * 800, bytes(reversed(range(256))) * 1200     # 200 KB, 300 KB
    responder = Responder(responder_context, "svc.big", answer=lambda r: answer + r.data[:8])
    source = joined_source(requester, "svc.big")
    got = threading.Event()
    responses = []
    pending = source.send_request(request, lambda r: (responses.append(r), got.set()))
    assert got.wait(20)
    assert responses[0].data == answer + request[:8] and responses[0].qidx == pending.qidx
    (asked,) = responder.seen
    assert asked.data == request and asked.sequence_number == 0
    source.send(b"next")                    # the source's sequence went on past the request's pieces
    wait_for(lambda: len(responder.seen) == 2, 10, message="the message after the request")
    assert responder.seen[1].sequence_number == len(request) // (65535 - 44) + 1


def test_several_responses_until_the_request_is_closed_then_unmatched(pair):
    requester, responder_context = pair
    responder = Responder(responder_context, "svc.many")
    source = joined_source(requester, "svc.many")
    responses = []
    pending = source.send_request(b"tell me twice", responses.append)
    wait_for(lambda: len(responder.seen) == 1, 10, message="the request")
    request = responder.seen[0]
    request.respond(b"second")                       # from this thread, not the context's
    wait_for(lambda: pending.responses == 2, 10, message="both responses")
    assert sorted(r.data for r in responses) == [b"re:tell me twice", b"second"]
    pending.close()
    request.respond(b"too late")
    wait_for(lambda: requester.counters()["responses_unmatched"] == 1, 10, message="the late response counted")
    assert pending.responses == 2 and len(responses) == 2


def test_a_response_to_no_request_is_unmatched_unless_the_response_handler_takes_it(pair):
    requester, stranger = pair
    address = requester.request_address()
    stranger.respond(RequestOrigin(*address, 777), b"nobody asked")
    wait_for(lambda: requester.counters()["responses_unmatched"] == 1, 10, message="unmatched response")
    taken = []
    requester.response_handler = lambda qidx, data, source: taken.append((qidx, data, source)) or qidx == 778
    stranger.respond(RequestOrigin(*address, 778), b"for the handler")
    stranger.respond(RequestOrigin(*address, 779), b"refused by the handler")
    wait_for(lambda: len(taken) == 2, 10, message="the handler sees both")
    assert [t[:2] for t in taken] == [(778, b"for the handler"), (779, b"refused by the handler")]
    assert taken[0][2].startswith("TCP:127.0.0.1:")
    wait_for(lambda: requester.counters()["responses_unmatched"] == 2, 10, message="the refused one counted")
    assert requester.counters()["responses_received"] == 3


def test_a_response_nobody_can_take_is_dropped_counted_and_logged(domain, caplog):
    with Context(**domain.overrides()) as responder:
        # Nothing listens on the domain's request ports: nobody in this test opened one.
        responder.respond(RequestOrigin("127.0.0.1", domain.request_low, 1), b"into the void")
        wait_for(lambda: responder.counters()["responses_dropped"] == 1, 10, message="the drop counted")
    assert f"127.0.0.1:{domain.request_low}" in caplog.text


def test_a_broken_response_stream_is_counted_and_closed_and_the_port_goes_on(pair):
    requester, stranger = pair
    address = requester.request_address()
    with socket.create_connection(address, timeout=10) as rogue:
        rogue.sendall(b"\x00\x00\x00\x02")                 # msglen 2: no frame is that short
        assert rogue.recv(10) == b""                        # the port hung up on it
    assert requester.counters()["responses_malformed"] == 1
    stranger.respond(RequestOrigin(*address, 5), b"still listening")
    wait_for(lambda: requester.counters()["responses_unmatched"] == 1, 10, message="the next response")


def test_a_response_after_the_context_closed_is_counted_not_raised(domain):
    context = Context(**domain.overrides())
    context.close()
    context.respond(RequestOrigin("127.0.0.1", domain.request_low, 1), b"too late")
    assert context.counters()["responses_dropped"] == 1


def test_a_routed_response_after_the_context_closed_is_counted_not_raised(domain, loop):
    """An answer to a request from another domain (it goes back through a router), given after the
    context closed: counted as dropped, whether the context ran its own loop (closed with it: its
    wake-up descriptor is gone, maybe reused) or a shared one that goes on."""
    origin = RequestOrigin("127.0.0.1", domain.request_low, 1, 7)
    own = Context(**domain.overrides())
    own.request_address()
    own.close()
    own.respond(origin, b"too late")
    assert own.counters()["responses_dropped"] == 1
    shared = Context(loop=loop, **domain.overrides())
    shared.request_address()
    shared.close()
    outcomes = []
    shared.respond(origin, b"too late", outcomes.append)
    wait_for(lambda: outcomes, 10, message="the dropped response's outcome")
    assert outcomes == [False]
    assert shared.counters()["responses_dropped"] == 1


def test_an_idle_response_connection_is_closed_after_the_deletion_timeout_and_counted(domain):
    """response_tcp_deletion_timeout (UM's default 2 s): a response connection with nothing left to
    send is closed, so a requester gone without a word holds no descriptor of the responder's for
    good; the next response opens a new one."""
    assert UMConfig().get("context", "response_tcp_deletion_timeout") == 2000
    requester = Context(**domain.overrides())
    responder_context = Context(**domain.overrides(), response_tcp_deletion_timeout=200)
    try:
        Responder(responder_context, "svc.idle")
        source = joined_source(requester, "svc.idle")
        for round_number in (1, 2):
            responses = []
            source.send_request(b"ask %d" % round_number, responses.append)
            wait_for(lambda: responses, 10, message=f"response {round_number}")
            wait_for(lambda: responder_context.counters()["response_connections_closed_idle"] == round_number, 10,
                     message=f"the idle response connection closed ({round_number})")
            assert responder_context.responder.connections == {}
            wait_for(lambda: not requester.request_port.connections, 10, message="the requester sees it end")
            assert [r.data for r in responses] == [b"re:ask %d" % round_number]
        counters = responder_context.counters()
        assert (counters["responses_sent"], counters["responses_dropped"]) == (2, 0), counters
        assert requester.counters()["response_connections"] == 2
    finally:
        responder_context.close()
        requester.close()


def test_no_free_request_port_is_a_clear_error_and_counted(domain):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    overrides = {**domain.overrides(), "request_tcp_port_low": port, "request_tcp_port_high": port}
    try:
        with Context(**overrides) as context:
            source = context.source("svc.none")
            with pytest.raises(RequestPortUnavailable, match=f"{port}..{port}"):
                source.send_request(b"anyone?")
            assert isinstance(RequestPortUnavailable("x"), OSError)
            counters = context.counters()
            assert counters["request_port_errors"] == 1 and counters["requests_sent"] == 0
            assert len(context.requests.live) == 0
    finally:
        taken.close()


def test_requests_over_lbt_ipc(pair):
    requester, responder_context = pair
    Responder(responder_context, "svc.ipc")
    source = joined_source(requester, "svc.ipc", transport="lbtipc")
    responses = []
    for n in range(5):
        source.send_request(b"ipc %d" % n, responses.append)
    wait_for(lambda: len(responses) == 5, 20, message="every LBT-IPC request answered")
    assert sorted(r.data for r in responses) == [b"re:ipc %d" % n for n in range(5)]


def test_tshark_decodes_the_request_header_and_the_response_stream(domain, tmp_path):
    pcap = tmp_path / "request.pcapng"
    with LiveCapture(capture_filter=f"tcp portrange {domain.tcp_low}-{domain.request_high}", path=pcap):
        requester, responder_context = Context(**domain.overrides()), Context(**domain.overrides())
        try:
            Responder(responder_context, "svc.oracle", answer=lambda r: b"re:" + r.data * 2)
            source = joined_source(requester, "svc.oracle")
            responses = []
            pending = [source.send_request(b"question %d" % n, responses.append) for n in range(3)]
            pending.append(source.send_request(b"x" * 100_000, responses.append))   # both fragmented
            wait_for(lambda: len(responses) == 4, 10, message="the responses")
            ipaddr, port = requester.request_address()
            source_port = source.transport_info.port
        finally:
            responder_context.close()
            requester.close()
    decode_as = [f"tcp.port=={source_port},lbttcp", f"tcp.port=={port},lbttcp"]
    prefs = [f"lbttcp.source_port_low:{domain.tcp_low}", f"lbttcp.source_port_high:{domain.tcp_high}",
             f"lbttcp.request_port_low:{domain.request_low}", f"lbttcp.request_port_high:{domain.request_high}",
             "lbmc.reassemble_fragments:TRUE"]
    assert_no_expert_info(pcap, decode_as, prefs, min_severity="warn")
    frames = decode(pcap, decode_as, prefs, fields=[
        "tcp.srcport", "tcp.dstport", "lbmc.tcp_request.qidx", "lbmc.tcp_request.port",
        "lbmc.tcp_request.ipaddr", "lbmc.tcp_request.transport", "lbmc.tidx", "lbmc.type"])
    asked = [(int(q), int(p), a) for f in frames
             for q, p, a in zip(f.get("lbmc.tcp_request.qidx", []), f.get("lbmc.tcp_request.port", []),
                                f.get("lbmc.tcp_request.ipaddr", []))]
    # Every piece of the fragmented request carries the REQUEST header (2 pieces at 65535 bytes).
    assert asked == [(p.qidx, port, ipaddr) for p in pending[:3]] + [(pending[3].qidx, port, ipaddr)] * 2
    answered = [int(tidx) for f in frames if f.get("tcp.dstport") == [str(port)] for tidx in f.get("lbmc.tidx", [])]
    assert answered == [p.qidx for p in pending[:3]] + [pending[3].qidx] * 4, \
        "the responses decode as LBMC on the request port (the 200 KB one in 4 pieces)"
