"""<rate-limit>: the token buckets, and use queries held back by them (pure logic)."""
from router.ipc import bus_messages as bm
from router.portals.interest import DomainInterest, UseQuerySettings
from router.portals.rate_limit import RateLimiter


def test_objects_per_second_allows_a_second_s_worth_then_refills():
    limit = RateLimiter(0, 10, now=0.0)
    assert [limit.take(50, 0.0) for _ in range(11)] == [True] * 10 + [False]
    assert abs(limit.wait(50, 0.0) - 0.1) < 1e-9
    assert [limit.take(50, 0.5) for _ in range(6)] == [True] * 5 + [False]


def test_bits_per_second_counts_bytes_and_an_oversized_object_waits_for_a_full_bucket():
    limit = RateLimiter(8000, 0, now=0.0)            # 1000 bytes a second
    assert limit.take(600, 0.0) and not limit.take(600, 0.0)
    assert abs(limit.wait(600, 0.0) - 0.2) < 1e-9
    assert limit.take(600, 0.2)
    big = RateLimiter(8000, 0, now=0.0)
    assert big.take(5000, 0.0)                        # bigger than a second's worth: goes when full,
    assert not big.take(5000, 4.9) and big.take(5000, 5.1)       # and its 5 s worth is paid back first


def test_zero_is_unlimited():
    limit = RateLimiter(0, 0, now=0.0)
    assert limit.unlimited and all(limit.take(10_000, 0.0) for _ in range(10_000)) and limit.wait(1, 0.0) == 0


def test_held_back_use_queries_are_neither_counted_unanswered_nor_dropped():
    interest = DomainInterest(UseQuerySettings(periodic_interval=10, timeout=1, max_unanswered=2))
    for n in range(100):
        interest.heard(bm.INTEREST_TOPIC, f"t{n}", now=0.0)
    allowed = iter([True] * 30 + [False] * 1000)
    queried, dropped = interest.tick(10.0, lambda kind, symbol: next(allowed))
    assert len(queried) == 30 and not dropped and interest.deferred == {bm.INTEREST_TOPIC}
    # Time passes with the limit closed: the 30 asked are due again, the 70 never asked still
    # due; none is counted unanswered for a query it was never sent, none dropped.
    for now in (11.5, 13.0, 16.0):
        queried, dropped = interest.tick(now, lambda kind, symbol: False)
        assert queried == [] and dropped == [] and len(interest.entries) == 100
    assert all(e.unanswered == 0 for e in interest.entries.values())
    queried, _ = interest.tick(17.0, lambda kind, symbol: True)
    assert len(queried) == 100 and not interest.deferred
    assert sorted(e.unanswered for e in interest.entries.values()) == [0] * 70 + [1] * 30


def test_interest_announcements_held_back_stay_due_and_keep_their_schedule():
    from router.portals.remote_interest import InterestAnnouncer
    announcer = InterestAnnouncer(min_interval=1.0, max_interval=60.0)
    items = {(bm.INTEREST_TOPIC, f"t{n}", 2) for n in range(10)}
    announcer.update(items, now=0.0)
    allowed = iter([True] * 4 + [False] * 100)
    send, first, _ = announcer.due(0.0, lambda item: next(allowed))
    assert len(send) == 4 and set(first) == set(send) and announcer.deferred == {bm.INTEREST_TOPIC}
    assert announcer.next_due(0.0) == 0.0                  # the six held back are still due
    send, first, _ = announcer.due(0.5, lambda item: True)
    assert len(send) == 6 and set(first) == set(send) and not announcer.deferred
