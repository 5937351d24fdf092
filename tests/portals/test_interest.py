"""Interest bookkeeping: TQRs refresh, use queries confirm, silence drops, leave checks at once."""
import pytest

from router.ipc import bus_messages as bm
from router.portals.interest import DomainInterest, InterestTable, UseQuerySettings

T = bm.INTEREST_TOPIC


def interest(periodic=10.0, timeout=1.0, max_unanswered=3):
    settings = UseQuerySettings(periodic, timeout, max_unanswered)
    return DomainInterest(settings, settings)


def test_tqr_adds_then_refreshes():
    domain = interest()
    assert domain.heard(T, "a", 0.0) is True
    assert domain.heard(T, "a", 5.0) is False
    assert domain.tick(12.0) == ([], [])           # refreshed at 5, not due before 15


def test_unanswered_use_queries_drop_the_interest():
    domain = interest()
    domain.heard(T, "a", 0.0)
    sent = []
    now = 10.0
    while "a" in domain.symbols(T):
        query, drop = domain.tick(now)
        sent += query
        now += 0.5
    assert sent == [(T, "a")] * 3
    assert now < 10.0 + 3 * 1.0 + 1.0


def test_a_response_keeps_it():
    domain = interest()
    domain.heard(T, "a", 0.0)
    assert domain.tick(10.0)[0] == [(T, "a")]
    domain.heard(T, "a", 10.2)                     # use-query response
    assert domain.tick(11.5) == ([], [])
    assert domain.symbols(T) == ["a"]


def test_leave_checks_at_once_and_drops_after_max_unanswered_queries():
    """A receiver left: the others, if any, are asked at once, then as always `max` queries
    `timeout` apart before the topic goes (spec/dro.md <topic-use-query>)."""
    domain = interest()
    domain.heard(T, "a", 0.0)
    domain.heard_leave(T, "a", 1.0)
    assert domain.tick(1.0)[0] == [(T, "a")]
    sent, now = [(T, "a")], 1.5
    while "a" in domain.symbols(T) and now < 60.0:
        query, drop = domain.tick(now)
        sent += query
        now += 0.5
    assert sent == [(T, "a")] * 3
    assert 1.0 + 3 * 1.0 <= now < 1.0 + 3 * 1.0 + 1.0


def test_after_a_leave_one_lost_response_does_not_drop_a_topic_others_still_use():
    domain = interest()
    domain.heard(T, "a", 0.0)
    domain.heard_leave(T, "a", 1.0)
    assert domain.tick(1.0)[0] == [(T, "a")]        # the remaining receiver's answer is lost
    assert domain.tick(2.1) == ([(T, "a")], [])
    domain.heard(T, "a", 2.2)                        # this one is answered
    assert domain.tick(3.5) == ([], []) and domain.symbols(T) == ["a"]


def test_a_leave_during_a_round_of_queries_neither_lengthens_nor_shortens_it():
    """Receivers leaving one after another while a query is out: its answer says whether any
    remain, and the topic goes after `max` unanswered queries, `timeout` apart, as always."""
    domain = interest()
    domain.heard(T, "a", 0.0)
    sent, now = [], 10.0
    while "a" in domain.symbols(T) and now < 60.0:
        domain.heard_leave(T, "a", now)
        query, drop = domain.tick(now)
        sent += query
        now += 0.25
    assert sent == [(T, "a")] * 3
    assert 10.0 + 3 * 1.0 <= now < 10.0 + 3 * 1.0 + 0.5


def test_table_portals_for_topic_and_pattern():
    table = InterestTable()
    assert table.apply(bm.Interest("LAN2", 2, T, "md.a", bm.OP_ADD))
    assert not table.apply(bm.Interest("LAN2", 2, T, "md.a", bm.OP_REFRESH))
    table.apply(bm.Interest("LAN3", 3, bm.INTEREST_PCRE, r"^md\.", bm.OP_ADD))
    assert table.portals_for("md.a") == {("LAN2", 2), ("LAN3", 3)}
    assert table.portals_for("md.b") == {("LAN3", 3)}
    assert table.portals_for("other") == set()
    # The same portal may want a topic for several destination domains (interest from other routers).
    assert table.apply(bm.Interest("LAN2", 7, T, "md.a", bm.OP_ADD))
    assert table.portals_for("md.a") == {("LAN2", 2), ("LAN2", 7), ("LAN3", 3)}
    table.apply(bm.Interest("LAN2", 2, T, "md.a", bm.OP_CANCEL))
    assert table.portals_for("md.a") == {("LAN2", 7), ("LAN3", 3)}
    assert table.drop_portal("LAN2")
    assert table.portals_for("md.a") == {("LAN3", 3)}


def test_a_burst_of_updates_is_followed_once_on_the_next_turn():
    from router.portals.once_per_turn import OncePerTurn
    from router.um.loop import EventLoop
    loop = EventLoop("interest")
    try:
        runs = []
        follow = OncePerTurn(loop, lambda: runs.append(len(runs)))
        for _ in range(1000):
            follow.request()
        assert runs == [] and follow.pending
        loop.run_once(0)
        assert runs == [0] and not follow.pending
        follow.request()
        follow.cancel()
        loop.run_once(0)
        assert runs == [0]
    finally:
        loop.close()


def test_patterns_that_come_and_go_leave_nothing_behind():
    """Wildcard receivers with patterns of their own (one per client, say) come and go for months:
    the table keeps what it needs to match the patterns wanted now, nothing of those gone."""
    table = InterestTable()
    for n in range(2000):
        pattern = rf"^reply\.client{n}\."
        table.apply(bm.Interest("E2", 2, bm.INTEREST_PCRE, pattern, bm.OP_ADD))
        assert table.portals_for(f"reply.client{n}.x") == {("E2", 2)}      # streams are re-masked
        table.apply(bm.Interest("E2", 2, bm.INTEREST_PCRE, pattern, bm.OP_CANCEL))
        assert table.portals_for(f"reply.client{n}.x") == set()
    table.apply(bm.Interest("E2", 2, bm.INTEREST_PCRE, r"^kept\.", bm.OP_ADD))
    table.apply(bm.Interest("E3", 3, bm.INTEREST_REGEX, r"^gone\.", bm.OP_ADD))
    assert table.drop_portal("E3")
    assert table.portals_for("kept.1") == {("E2", 2)} and table.portals_for("gone.1") == set()
    assert len(table._compiled) == 1, len(table._compiled)


class _CountedPasses(dict):
    """Entries that count the passes made over all of them."""
    passes = 0

    def items(self):
        type(self).passes += 1
        return super().items()

    def __iter__(self):
        type(self).passes += 1
        return super().__iter__()


def test_a_burst_of_new_topics_never_walks_the_whole_interest_list():
    """A domain's receivers coming up together: each new topic asks when the next check is due.
    Answered by a pass over every topic, a burst of N topics cost N² steps (20,000 topics: over
    ten seconds of a worker's loop); it takes one pass however many topics come."""
    domain = interest(periodic=300.0, timeout=3.0, max_unanswered=5)
    domain.entries = _CountedPasses()
    assert domain.next_due(0.0) == 60.0
    for n in range(5000):
        assert domain.heard(T, f"t{n}", n / 1000)
        assert domain.next_due(n / 1000) == pytest.approx(300.0 - n / 1000)
        assert domain.count(T) == n + 1 and domain.count(bm.INTEREST_PCRE) == 0    # the portal's counters
    assert _CountedPasses.passes <= 1
    domain.heard(T, "t0", 6.0)                       # refreshed: t1 is the first due now
    assert domain.tick(300.0) == ([], [])
    assert domain.next_due(300.0) == pytest.approx(0.001)
    domain.heard_leave(T, "t4999", 301.0)            # a leave: checked at once
    assert domain.next_due(301.0) == 0.0
    query, drop = domain.tick(301.0)                 # t4999, and t1..t1000 whose turn came
    assert set(query) == {(T, f"t{n}") for n in [*range(1, 1001), 4999]} and drop == []
    assert domain.next_due(301.0) == pytest.approx(0.001)     # t1001's turn


def test_topics_whose_checks_fall_due_one_by_one_are_not_walked_at_each():
    """In steady state a domain's topics fall due one after another (a round of use queries is
    rate-limited, so the answers, and the next round, are spread out): a check that walked every
    topic each time one fell due cost N² steps a period, a worker's loop busy all the time with a
    few ten thousand topics. Each check looks only at the topics due."""
    topics = 2000
    domain = interest(periodic=300.0, timeout=3.0, max_unanswered=5)
    domain.entries = _CountedPasses()
    _CountedPasses.passes = 0
    for n in range(topics):
        domain.heard(T, f"t{n}", n * 0.002)           # answers 2 ms apart (500 queries/s)
    queried, now, checks = [], topics * 0.002, 0
    while (now := now + max(domain.next_due(now), 0.001)) < 310.0:
        query, drop = domain.tick(now)
        checks += 1
        assert drop == []
        for kind, symbol in query:                    # every receiver answers at once
            domain.heard(kind, symbol, now)
        queried += query
    assert sorted(symbol for _, symbol in queried) == sorted(f"t{n}" for n in range(topics))
    assert checks >= topics // 2                      # the checks came one by one, as due
    assert _CountedPasses.passes <= 2, _CountedPasses.passes


def test_the_counts_by_kind_follow_interest_heard_and_dropped():
    domain = interest(periodic=10.0, timeout=1.0, max_unanswered=1)
    for symbol in ("a", "b"):
        domain.heard(T, symbol, 0.0)
    domain.heard(bm.INTEREST_PCRE, "^md\\.", 0.0)
    domain.heard(T, "a", 5.0)                         # heard again: counted once
    assert (domain.count(T), domain.count(bm.INTEREST_PCRE), domain.count(bm.INTEREST_REGEX)) == (2, 1, 0)
    assert sorted(domain.tick(10.0)[0]) == [(T, "b"), (bm.INTEREST_PCRE, "^md\\.")]   # asked once ...
    assert sorted(domain.tick(11.0)[1]) == [(T, "b"), (bm.INTEREST_PCRE, "^md\\.")]   # ... unanswered: gone
    assert (domain.count(T), domain.count(bm.INTEREST_PCRE)) == (1, 0)
    assert domain.count(T) == len(domain.symbols(T))
