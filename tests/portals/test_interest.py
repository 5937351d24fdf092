"""Interest bookkeeping: TQRs refresh, use queries confirm, silence drops, leave checks at once."""
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


def test_leave_checks_at_once_and_drops_after_one_timeout():
    domain = interest()
    domain.heard(T, "a", 0.0)
    domain.heard_leave(T, "a", 1.0)
    assert domain.tick(1.0)[0] == [(T, "a")]
    assert domain.tick(2.1) == ([], [(T, "a")])


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
