"""Responses larger than a request port takes: the responder refuses one at once with an error
naming the limit (the requester would drop it after it crossed the network), and a request port
that is sent one anyway counts it apart from malformed streams."""
import socket

import pytest

from router.um.request_port import MAX_PARTIAL_BYTES, RequestPort
from router.um.requests import RequestOrigin, message_frames


def test_a_response_larger_than_a_request_port_takes_is_refused_at_once(contexts):
    context = contexts()
    origin = RequestOrigin("127.0.0.1", 1, 7)
    with pytest.raises(ValueError, match=f"at most {MAX_PARTIAL_BYTES} bytes"):
        context.respond(origin, bytes(MAX_PARTIAL_BYTES + 1))
    assert context.counters()["responses_sent"] == 0


@pytest.mark.integration
def test_a_response_claiming_more_than_a_request_port_takes_is_counted_as_too_large(domain, loop):
    port = loop.call_and_wait(lambda: RequestPort(loop, "127.0.0.1", domain.request_low, domain.request_high,
                                                  lambda qidx, data, source: None))
    headers, piece = next(message_frames(5, 0, bytes(MAX_PARTIAL_BYTES + 1), 65535))
    client = socket.create_connection(port.address, timeout=10)
    try:
        client.sendall(headers + bytes(piece))
        assert client.recv(10) == b"", "the connection is closed"
        counters = loop.call_and_wait(lambda: dict(port.counters))
        assert (counters["responses_too_large"], counters["responses_malformed"]) == (1, 0)
    finally:
        client.close()
        loop.call_and_wait(port.close)
