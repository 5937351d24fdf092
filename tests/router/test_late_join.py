"""Late join through the router: a domain whose configuration gives its sources `late_join` (the
router's proxy sources there too) lets a receiver that starts late get, from the proxy source,
what the proxy forwarded before it came, then the live messages, in order and once each. Where the
proxy sources keep nothing (the DRO's way), a late receiver's requests are relayed to the
originating source, if it offers late join, and its answers back (router.portals.late_join_relay)."""
import pytest

from tests.support.routers import endpoint_xml

pytestmark = pytest.mark.integration


def _first_run(tools, lan1, lan2, count: int, topic: str) -> dict:
    """`count` messages from a source in LAN1 to a receiver in LAN2 (its JSON). The source stays
    (--linger) after them, so its proxy source in LAN2 stays too: for as long as late receivers'
    timeouts allow (a loaded machine takes minutes over a test's late joins); the test's end stops it."""
    early = tools.umrcv("-c", lan2.config_path, "--json", "-C", count, "--timeout", 120, topic)
    source = tools.umsrc("-c", lan1.config_path, "--json", "-M", count, "-P", 10000, "-L", 180, "--start-on-stdin",
                         topic)
    early.wait_for_stderr("Beginning of Transport Session", 30)
    source.send_line()
    return early.result(120)


def test_a_late_receiver_gets_what_the_proxy_source_forwarded_before_it(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain("source late_join 1")
    routers.start(endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path)).wait_ready()
    first, later = 3000, 1000
    got = _first_run(tools, lan1, lan2, first, "lj.routed")
    assert (got["received"], got["gaps"], got["duplicates"], got["retransmitted"]) == (first, 0, 0, 0), got

    # A receiver that starts now gets the first messages again, from the proxy's retention.
    late = tools.umrcv("-c", lan2.config_path, "--json", "-C", first, "--timeout", 120, "lj.routed")
    got = late.result(120)
    assert (got["received"], got["retransmitted"], got["gaps"], got["duplicates"]) == (first, first, 0, 0), got
    per_source = next(iter(got["per_source"].values()))
    assert (per_source["first_seq"], per_source["last_seq"]) == (0, first - 1)

    # Live data after a late join goes on from there: a second source run on the same topic.
    more = tools.umrcv("-c", lan2.config_path, "--json", "-C", first + later, "--timeout", 120, "lj.routed")
    more.wait_for_stderr("Beginning of Transport Session", 30)
    second = tools.umsrc("-c", lan1.config_path, "--json", "-M", later, "-P", 10000, "lj.routed")
    assert second.result(120)["sent"] == later
    got = more.result(120)
    # The first source's messages are all retransmissions; of the second's, those its proxy source
    # forwarded before this receiver joined it are too (the second source sends as soon as the
    # router's proxy receiver joins it, which may be before this receiver joins the new proxy
    # source: some, none or all of them): every one arrives, once, in order.
    assert got["received"] == first + later and first <= got["retransmitted"] <= first + later, got
    assert (got["gaps"], got["duplicates"], got["out_of_order"]) == (0, 0, 0), got


def test_a_late_receiver_gets_from_the_originating_source_what_came_before_through_a_relay(routers, tools,
                                                                                           make_domain):
    lan1, lan2 = make_domain("source late_join 1"), make_domain()     # only the origin retains
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) +
                           endpoint_xml("LAN2", 2, lan2.config_path)).wait_ready()
    first = 2000
    got = _first_run(tools, lan1, lan2, first, "lj.relayed")
    # The origin answers for where it is, ahead of the proxy: what it sent before this receiver's
    # first live message came may come as retransmissions (each message once all the same).
    assert (got["received"], got["gaps"], got["duplicates"]) == (first, 0, 0), got

    # The proxy source in LAN2 kept nothing: the late receiver's requests go to the origin in LAN1.
    late = tools.umrcv("-c", lan2.config_path, "--json", "-C", first, "--timeout", 120, "lj.relayed")
    got = late.result(120)
    assert (got["received"], got["retransmitted"], got["gaps"], got["duplicates"]) == (first, first, 0, 0), got
    per_source = next(iter(got["per_source"].values()))
    assert (per_source["first_seq"], per_source["last_seq"]) == (0, first - 1)
    lan1_counters, lan2_counters = router.counters()[0], router.counters()[1]
    assert lan2_counters["late_join_requests_rcvd"] > 0 and lan2_counters["late_join_answers_sent"] > 0
    assert lan1_counters["late_join_requests_relayed"] > 0 and lan1_counters["late_join_answers_rcvd"] > 0
    assert lan1_counters["late_join_requests_not_relayed"] == lan2_counters["late_join_requests_not_relayed"] == 0


def test_two_origins_with_the_same_topic_index_each_answer_only_their_own_late_receivers(routers, tools,
                                                                                        make_domain):
    """Two sources, each the only one of its context (so both topic index 1 on their sessions),
    relayed for two late receivers at once: a RETRANS names only a topic index and a sequence
    number, so the relay tells the origins apart by the connection their answers come on."""
    lan1, lan2 = make_domain("source late_join 1"), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) +
                           endpoint_xml("LAN2", 2, lan2.config_path)).wait_ready()
    first = 20000            # enough that the two late joins overlap
    early = [tools.umrcv("-c", lan2.config_path, "--json", "-C", first, "--timeout", 120, f"lj.two.{n}")
             for n in (1, 2)]
    sources = [tools.umsrc("-c", lan1.config_path, "--json", "-M", first, "-P", 40000, "-L", 180,
                           "--start-on-stdin", f"lj.two.{n}") for n in (1, 2)]
    for receiver in early:
        receiver.wait_for_stderr("Beginning of Transport Session", 30)
    for source in sources:
        source.send_line()
    ids = []
    for receiver in early:
        got = receiver.result(120)
        assert (got["received"], got["gaps"], got["duplicates"]) == (first, 0, 0), got
        ids.append(set(got["per_source"]))
    assert len(ids[0] | ids[1]) == 2

    late = [tools.umrcv("-c", lan2.config_path, "--json", "-C", first, "--timeout", 120, f"lj.two.{n}")
            for n in (1, 2)]
    for n, receiver in enumerate(late):
        got = receiver.result(120)
        assert set(got["per_source"]) == ids[n], got            # only its own source's messages
        assert (got["received"], got["retransmitted"], got["gaps"], got["duplicates"]) == \
            (first, first, 0, 0), got
    ingress = router.counters()[0]      # only answers to a request its requester repeated before they came
    assert ingress["late_join_answers_unknown"] <= ingress["late_join_requests_reasked"], ingress


def test_two_late_receivers_of_one_context_each_get_what_came_before_through_a_relay(routers, tools, make_domain):
    """Two receivers of one topic in one context late-join at once through the relay: they share
    the context's request port and the source's topic index, and only their request indexes tell
    their requests apart. Each gets every message from one request each: their retries are an hour
    away, so a receiver whose request the relay took for the other's retry (the origin's one answer
    went to the other) would get nothing."""
    from router.um.context import Context
    from tests.support.processes import wait_for
    lan1, lan2 = make_domain("source late_join 1"), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) +
                           endpoint_xml("LAN2", 2, lan2.config_path)).wait_ready()
    first = 2000
    got = _first_run(tools, lan1, lan2, first, "lj.one.context")
    assert (got["received"], got["gaps"], got["duplicates"]) == (first, 0, 0), got

    got = ([], [])
    with Context(**lan2.overrides(), retransmit_request_interval=3_600_000,
                 retransmit_request_message_timeout=7_200_000) as late:
        for messages in got:
            late.receiver("lj.one.context", on_batch=messages.extend)
        wait_for(lambda: all(len(messages) >= first for messages in got), 60,
                 message="both late receivers have every message")
        counters = late.counters()
    for messages in got:
        assert [m.sequence_number for m in messages] == list(range(first))
        assert all(m.retransmit for m in messages)
    assert counters["lj_retransmissions_given_up"] == 0, counters
    ingress = router.counters()[0]
    assert ingress["late_join_answers_unknown"] == ingress["late_join_requests_unanswered"] == 0, ingress
