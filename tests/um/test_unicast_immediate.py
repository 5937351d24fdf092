"""Unicast immediate messages in one domain (no router) and the pure parts: targets, frames, the
routers a context has heard of, a router's hop on a frame."""
import socket

import pytest

from router.um.context import Context
from router.um.unicast_immediate import (MAX_PAYLOAD, DomainRoutes, decode_uim, encode_uim, is_uim_frame,
                                         parse_target, routed_on, source_of)
from router.um.wire.errors import WireError
from router.um.wire.lbmc_headers import Destination

from tests.support.processes import wait_for


def test_targets_name_an_address_and_maybe_a_domain():
    assert parse_target("TCP:10.0.0.5:14391") == (None, "10.0.0.5", 14391)
    assert parse_target("tcp:7:10.0.0.5:14391") == (7, "10.0.0.5", 14391)
    assert str(parse_target("TCP:7:10.0.0.5:14391")) == "TCP:7:10.0.0.5:14391"
    for bad, why in (("UDP:10.0.0.5:1", "expected TCP:ip:port"), ("TCP:x:10.0.0.5:1", "domain id 'x'"),
                     ("TCP:10.0.0:1", "not an IPv4 address"), ("TCP:10.0.0.5:65536", "port '65536'"),
                     ("TCP:10.0.0.5:0", "port 0"), ("TCP:1:2:3:4:5", "expected")):
        with pytest.raises(ValueError, match=why):
            parse_target(bad)


def test_frames_round_trip_and_are_told_apart_from_responses():
    destination = Destination(7, "10.0.0.5", 14391, 0, 3, "10.0.0.9", 14392)
    for topic, dest in ((None, None), ("a.topic", None), ("a.topic", destination), (None, destination)):
        frame = encode_uim(9, topic, b"payload", dest)
        assert is_uim_frame(frame)
        uim = decode_uim(frame)
        assert (uim.topic, uim.data, uim.sqn, uim.destination) == (topic, b"payload", 9, dest)
    response = bytes(encode_uim(0, None, b"x"))
    response = response[:4] + (5).to_bytes(4, "big") + response[8:]      # a request index: a response
    assert not is_uim_frame(response)
    assert len(encode_uim(0, None, b"x" * MAX_PAYLOAD, destination)) == 65535
    with pytest.raises(ValueError, match="at most"):
        encode_uim(0, None, b"x" * (MAX_PAYLOAD + 1), destination)


def test_a_router_takes_one_hop_and_fills_in_the_origin():
    frame = encode_uim(0, "t", b"data", Destination(7, "10.0.0.5", 14391, 0, 0, "10.0.0.9", 14392))
    once = decode_uim(routed_on(frame, 3)).destination
    assert (once.hops_taken, once.orig_domain_id, once.domain_id, once.port) == (1, 3, 7, 14391)
    twice = decode_uim(routed_on(routed_on(frame, 3))).destination
    assert (twice.hops_taken, twice.orig_domain_id) == (2, 3)
    assert source_of(decode_uim(routed_on(frame, 3)), "TCP:127.0.0.1:5") == "TCP:3:10.0.0.9:14392"
    with pytest.raises(WireError):
        routed_on(encode_uim(0, "t", b"no destination"))


def test_domain_routes_pick_one_router_per_domain_and_forget_silent_ones():
    routes = DomainRoutes(timeout=5.0)
    routes.heard("10.0.0.2", 14391, [2, 3], now=100.0)
    routes.heard("10.0.0.1", 14391, [3], now=100.0)
    assert routes.router_for(2, now=101.0) == ("10.0.0.2", 14391)
    assert routes.router_for(3, now=101.0) == ("10.0.0.1", 14391)         # the same one every time
    assert routes.router_for(3, now=101.0, besides=("10.0.0.1", 14391)) == ("10.0.0.2", 14391)
    assert routes.router_for(4, now=101.0) is None
    assert routes.domains(now=101.0) == {2, 3}
    assert routes.router_for(2, now=106.0) is None and routes.domains(now=106.0) == set()


def test_contexts_in_one_domain_exchange_messages_by_address(make_domain):
    domain = make_domain()
    sender, target = Context(**domain.overrides()), Context(**domain.overrides())
    try:
        topicless, on_topic = [], []
        target.immediate_receiver(topicless.append)
        target.receiver("prices", on_topic.append)
        ip, port = target.request_address()
        for n in range(50):
            sender.send_unicast_immediate(f"TCP:{ip}:{port}", None, b"%d" % n)
        sender.send_unicast_immediate(f"TCP:{ip}:{port}", "prices", b"on a topic")
        sender.send_unicast_immediate(f"TCP:{ip}:{port}", "nobody.listens", b"dropped quietly")
        wait_for(lambda: len(topicless) == 50 and len(on_topic) == 1, 10, message="every message arrived")
        assert [m.data for m in topicless] == [b"%d" % n for n in range(50)]
        assert [m.sequence_number for m in topicless] == list(range(50))            # the connection's own numbers
        assert on_topic[0].topic == "prices" and on_topic[0].data == b"on a topic"
        assert topicless[0].source.startswith("TCP:127.0.0.1:")
        wait_for(lambda: target.counters()["uim_received"] == 52, 10, message="all three kinds counted")
        assert sender.counters()["uim_sent"] == 52

        # Garbage on the request port: counted and logged, the port keeps working.
        with socket.create_connection((ip, port)) as stray:
            bad = bytearray(encode_uim(0, "t", b"x"))
            bad[12] = 0x64                     # TOPICNAME claims to be followed by DESTINATION
            stray.sendall(bytes(bad))
            wait_for(lambda: target.counters()["uim_malformed"] == 1, 10, message="the bad message is counted")
        sender.send_unicast_immediate(f"TCP:{ip}:{port}", None, b"still works")
        wait_for(lambda: topicless[-1].data == b"still works", 10, message="the port still delivers")
    finally:
        sender.close()
        target.close()


def test_an_unreachable_target_is_counted_not_raised(make_domain):
    domain = make_domain()
    sender = Context(**domain.overrides())
    try:
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        closed.close()                     # nothing listens there
        sender.send_unicast_immediate(f"TCP:127.0.0.1:{port}", None, b"to no one")
        wait_for(lambda: sender.counters()["uim_frames_dropped"] == 1, 10, message="the drop is counted")
        with pytest.raises(ValueError, match="not an IPv4 address"):
            sender.send_unicast_immediate("TCP:localhost:1", None, b"")
    finally:
        sender.close()


def test_a_unicast_request_is_answered_at_the_requesters_port(make_domain):
    domain = make_domain()
    requester, target = Context(**domain.overrides()), Context(**domain.overrides())
    try:
        asked, answers = [], []
        target.immediate_receiver(asked.append)
        ip, port = target.request_address()
        with requester.send_unicast_immediate_request(f"TCP:{ip}:{port}", None, b"how much?", answers.append):
            wait_for(lambda: len(asked) == 1, 10, message="the request arrived")
            request = asked[0]
            assert request.data == b"how much?" and request.origin.domain is None
            request.respond(b"42")
            request.respond(b"43")
            wait_for(lambda: len(answers) == 2, 10, message="both responses came back")
        assert [a.data for a in answers] == [b"42", b"43"]
        assert requester.counters()["responses_received"] == 2
    finally:
        requester.close()
        target.close()


def test_request_and_routed_response_frames():
    from router.um.wire.lbmc_headers import Request
    destination = Destination(7, "10.0.0.5", 14391, 0, 3, "10.0.0.9", 14392)
    frame = encode_uim(0, "svc", b"ask", destination, Request(0, 5, 14392, "10.0.0.9"))
    uim = decode_uim(frame)
    assert (uim.topic, uim.request.qidx, uim.request.port, uim.tidx) == ("svc", 5, 14392, 0)
    response = encode_uim(0, None, b"answer", Destination(3, "10.0.0.9", 14392, 0, 7, "10.0.0.5", 14391), tidx=5)
    assert is_uim_frame(response)
    assert (decode_uim(response).tidx, decode_uim(response).data) == (5, b"answer")
    with pytest.raises(WireError, match="without its DESTINATION"):
        decode_uim(encode_uim(0, None, b"x", tidx=5))


def test_a_response_to_another_domain_waits_for_a_router_to_be_heard(make_domain, monkeypatch):
    """A context that has just started may answer a request from another domain before it has
    heard the router here say it reaches that domain: the response waits for the router (up to
    ROUTE_WAIT), then goes; one for a domain no router reaches is dropped and counted."""
    import router.um.context as context_module
    monkeypatch.setattr(context_module, "ROUTE_WAIT", 1.0)
    domain = make_domain()
    responder = Context(**domain.overrides())
    router = socket.socket()                  # stands in for a router's request port
    router.bind(("127.0.0.1", 0))
    router.listen(1)
    router.settimeout(10)
    try:
        from router.um.requests import RequestOrigin
        responder.respond(RequestOrigin("10.9.9.9", 14391, 5, 7), b"late but there")
        responder.respond(RequestOrigin("10.9.9.9", 14391, 6, 8), b"nowhere to go")
        assert responder.counters()["responses_dropped"] == 0          # both wait for a router
        responder.resolver.domain_routes.heard("127.0.0.1", router.getsockname()[1], [7])
        connection, _ = router.accept()
        with connection:
            connection.settimeout(10)
            data = b""
            while len(data) < 4 or len(data) < int.from_bytes(data[2:4], "big"):
                data += connection.recv(65536)
        routed = decode_uim(data)
        assert (routed.tidx, routed.data, routed.destination.domain_id, routed.destination.port) == (
            5, b"late but there", 7, 14391)
        wait_for(lambda: responder.counters()["responses_dropped"] == 1, 10,
                 message="the response for domain 8 is dropped after the wait")
    finally:
        router.close()
        responder.close()


def test_a_message_larger_than_a_frame_goes_in_pieces_and_comes_back_whole(make_domain):
    from router.um.unicast_immediate import uim_frames
    big = bytes(range(256)) * 1000                       # 256,000 bytes: four pieces
    frames, first_sqn_at = uim_frames("bulk", big, Destination(7, "10.0.0.5", 14391, 0, 3, "10.0.0.9", 14392))
    assert len(frames) == 4 and first_sqn_at and all(len(f) <= 65000 for f in frames)    # each fits a UDP datagram
    pieces = [decode_uim(f) for f in frames]
    assert [p.fragment.offset for p in pieces] == [0, 64935, 129870, 194805]     # 65000 less 65 bytes of headers
    assert all(p.topic == "bulk" and p.fragment.length == len(big) for p in pieces)
    domain = make_domain()
    sender, target = Context(**domain.overrides()), Context(**domain.overrides())
    try:
        got, topicless = [], []
        target.receiver("bulk", got.append)
        target.immediate_receiver(topicless.append)
        ip, port = target.request_address()
        sender.send_unicast_immediate(f"TCP:{ip}:{port}", "bulk", big)
        sender.send_unicast_immediate(f"TCP:{ip}:{port}", None, b"small, after it")
        sender.send_unicast_immediate(f"TCP:{ip}:{port}", None, big[::-1])
        wait_for(lambda: len(got) == 1 and len(topicless) == 2, 10, message="all three arrived whole")
        assert got[0].data == big and [m.data for m in topicless] == [b"small, after it", big[::-1]]
        with pytest.raises(ValueError, match="at most"):
            sender.send_unicast_immediate(f"TCP:{ip}:{port}", None, b"x" * (64 * 1024 * 1024 + 1))
    finally:
        sender.close()
        target.close()


def test_reassembly_gives_up_the_oldest_message_when_too_much_waits():
    from router.um.unicast_immediate import UimReassembly, uim_frames
    counters = {"uim_incomplete": 0}
    pieces = UimReassembly(counters, limit=300_000)
    first = [decode_uim(f) for f in uim_frames(None, b"a" * 200_000)[0]]
    second = [decode_uim(f) for f in uim_frames(None, b"b" * 200_000)[0]]
    for uim in second:
        uim.fragment.first_sqn = 9                      # another message from the same sender
    assert pieces.add("sender", first[0]) is None       # 200,000 bytes wait
    assert pieces.add("sender", second[0]) is None      # 400,000 would: the first is given up
    assert counters["uim_incomplete"] == 1
    for uim in second[1:-1]:
        assert pieces.add("sender", uim) is None
    assert pieces.add("sender", second[-1]) == b"b" * 200_000 and pieces.waiting == 0


def test_pieces_that_stop_coming_are_given_up_and_silent_routers_forgotten():
    from router.um.unicast_immediate import UimReassembly, uim_frames
    counters = {"uim_incomplete": 0}
    pieces = UimReassembly(counters, timeout=30.0)
    stalled = [decode_uim(f) for f in uim_frames(None, b"s" * 100_000)[0]]
    fresh = [decode_uim(f) for f in uim_frames(None, b"f" * 100_000)[0]]
    assert pieces.add("gone", stalled[0], now=0.0) is None
    assert pieces.add("alive", fresh[0], now=31.0) is None          # the stalled one is given up
    assert counters["uim_incomplete"] == 1 and pieces.waiting == 100_000
    assert pieces.add("alive", fresh[1], now=31.5) == b"f" * 100_000
    routes = DomainRoutes(timeout=5.0)
    for n in range(100):                                             # routers come and go
        routes.heard(f"10.0.{n}.1", 14391, [2], now=float(n * 10))
    assert len(routes.routers) <= 65 and routes.router_for(2, now=990.0) == ("10.0.99.1", 14391)


def test_a_router_reads_the_destination_in_place():
    from router.um.unicast_immediate import destination_of
    from router.um.wire.lbmc_headers import Request
    destination = Destination(2, "10.0.0.5", 14391, 3, 1, "10.0.0.9", 14392)
    assert destination_of(encode_uim(4, "t", b"x" * 64, destination, Request(0, 5, 14392, "10.0.0.9"))) == destination
    assert destination_of(encode_uim(4, "t", b"x")) is None
    wrong = bytearray(encode_uim(4, None, b"x", destination))
    wrong[13] = 8
    assert destination_of(bytes(wrong)) is None


def test_a_message_is_whole_only_when_every_byte_of_it_came():
    from router.um.unicast_immediate import UimReassembly, uim_frames
    counters = {"uim_incomplete": 0}
    pieces = UimReassembly(counters)
    body = bytes(range(256)) * 500                                   # 128,000 bytes: two pieces
    first, last = [decode_uim(f) for f in uim_frames(None, body)[0]]
    assert pieces.add("sender", first) is None
    assert pieces.add("sender", first) is None                       # the same piece again
    assert pieces.add("sender", last) == body and pieces.waiting == 0 and not pieces.partial


def test_a_sender_numbering_again_from_the_start_gives_way_to_its_new_message():
    # A sender that restarted (same request port), or whose connection to the router was made
    # again, numbers from 0 again: a piece of its new message may share the key of a message
    # its old connection never finished, with another length.
    from router.um.unicast_immediate import UimReassembly, uim_frames
    counters = {"uim_incomplete": 0}
    pieces = UimReassembly(counters)
    stale = [decode_uim(f) for f in uim_frames(None, b"o" * 100_000)[0]]
    fresh_body = bytes(range(256)) * 800                             # 204,800 bytes: four pieces
    fresh = [decode_uim(f) for f in uim_frames(None, fresh_body)[0]]
    assert stale[0].fragment.first_sqn == fresh[0].fragment.first_sqn == 0
    assert pieces.add("sender", stale[0]) is None                    # its other piece was lost
    got = [pieces.add("sender", uim) for uim in fresh]
    assert got[:-1] == [None] * (len(fresh) - 1) and got[-1] == fresh_body
    assert counters["uim_incomplete"] == 1 and pieces.waiting == 0 and not pieces.partial


def test_a_message_whose_pieces_stop_coming_is_given_up_with_nothing_more_arriving(make_domain):
    # Its sender failed after the first piece: nothing else ever comes to this context. The
    # message is given up (counted, its buffer freed) when it has waited, not when another
    # message in pieces happens to arrive, maybe never.
    from router.um.unicast_immediate import uim_frames
    domain = make_domain()
    target = Context(**domain.overrides())
    try:
        target.immediate_receiver(lambda message: None)
        target.uim_pieces.timeout = 0.3
        first_piece = uim_frames(None, b"z" * 200_000)[0][0]
        with socket.create_connection(target.request_address(), timeout=10) as failing:
            failing.sendall(first_piece)
            wait_for(lambda: target.loop.call_and_wait(lambda: len(target.uim_pieces.partial)) == 1, 10,
                     message="the first piece waits")
        wait_for(lambda: target.counters()["uim_incomplete"] == 1, 10, message="the message given up once it waited")
        assert target.loop.call_and_wait(lambda: (len(target.uim_pieces.partial), target.uim_pieces.waiting)) == (0, 0)
    finally:
        target.close()
