"""RateLimiter: the token bucket behind LBT-RM's data and retransmission rate limits.

Every call gets an explicit `now`, so nothing here depends on the machine's speed. Checked:
a rate of 0 means unlimited; the bucket holds one `transport_lbtrm_rate_interval` worth of bytes
but never less than one datagram (or a full-size datagram could never go); take() and wait()
agree on the arithmetic; refill is capped at the capacity (an idle source gets no burst larger
than one slice); and, as a property, a sender that waits as wait() says and then takes never
puts more than rate*T + capacity bytes on the wire in any T seconds.
Rates are binary fractions (1024 bytes a second) where exact float results are asserted.
"""
from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from router.um.rate_limiter import RateLimiter

BYTES_PER_SECOND = 1024
BPS = BYTES_PER_SECOND * 8


def limiter(interval: float = 1.0, largest: int = 256, now: float = 0.0) -> RateLimiter:
    """1024 bytes a second; with a 1 s interval the bucket holds 1024 bytes."""
    return RateLimiter(BPS, interval, largest, now=now)


# -- unlimited ------------------------------------------------------------------------------------

def test_a_rate_of_zero_is_unlimited():
    bucket = RateLimiter(0, 0.1, 1500, now=0.0)
    assert bucket.unlimited
    for _ in range(1000):
        assert bucket.take(1 << 20, now=0.0)
    assert bucket.wait(1 << 30, now=0.0) == 0.0


def test_a_positive_rate_is_limited():
    assert not limiter().unlimited


# -- capacity -------------------------------------------------------------------------------------

def test_capacity_is_one_rate_interval_worth_of_bytes():
    bucket = RateLimiter(8_000_000, 0.05, 1500, now=0.0)   # 1 MB/s for 50 ms
    assert bucket.rate == 1_000_000
    assert bucket.capacity == 50_000


def test_capacity_is_never_below_one_datagram():
    bucket = RateLimiter(8000, 0.01, 8192, now=0.0)        # a slice is 10 bytes
    assert bucket.capacity == 8192
    assert bucket.take(8192, now=0.0)                     # a full datagram can go


def test_a_new_bucket_starts_full():
    bucket = limiter()
    assert bucket.tokens == bucket.capacity == 1024
    assert bucket.wait(1024, now=0.0) == 0.0
    assert bucket.take(1024, now=0.0)


# -- take and wait --------------------------------------------------------------------------------

def test_take_spends_tokens_and_refuses_what_the_bucket_does_not_hold():
    bucket = limiter()
    assert bucket.take(600, now=0.0)
    assert bucket.tokens == 424
    assert not bucket.take(600, now=0.0)
    assert bucket.tokens == 424                           # a refusal spends nothing
    assert bucket.take(424, now=0.0)
    assert bucket.tokens == 0


def test_wait_is_the_time_the_missing_bytes_take_to_refill():
    bucket = limiter()
    bucket.take(1024, now=0.0)
    assert bucket.wait(512, now=0.0) == 0.5
    assert bucket.wait(512, now=0.25) == 0.25
    assert bucket.wait(256, now=0.25) == 0.0
    assert not bucket.take(512, now=0.25)
    assert bucket.take(512, now=0.5)
    assert bucket.tokens == 0


def test_wait_does_not_spend_tokens():
    bucket = limiter()
    for _ in range(10):
        assert bucket.wait(1000, now=0.0) == 0.0
    assert bucket.tokens == 1024


def test_refill_is_continuous():
    bucket = limiter()
    bucket.take(1024, now=0.0)
    assert bucket.take(1, now=1 / 1024)
    assert not bucket.take(1, now=1 / 1024)
    assert bucket.take(64, now=1 / 1024 + 1 / 16)


def test_an_earlier_now_neither_refills_nor_moves_the_clock_back():
    bucket = limiter(now=10.0)
    bucket.take(1024, now=10.0)
    assert not bucket.take(1, now=5.0)
    assert bucket.stamp == 10.0 and bucket.tokens == 0
    assert bucket.wait(512, now=5.0) == 0.5               # measured from the latest now
    assert bucket.take(512, now=10.5)


def test_wait_for_more_than_the_capacity_is_the_time_to_fill_the_bucket():
    bucket = limiter()
    bucket.take(1024, now=0.0)
    assert bucket.wait(5000, now=0.0) == 1.0


# -- refill cap -----------------------------------------------------------------------------------

def test_refill_is_capped_at_the_capacity():
    bucket = limiter()
    bucket.take(1024, now=0.0)
    assert bucket.wait(1, now=1000.0) == 0.0
    assert bucket.tokens == 1024                          # not 1000 seconds' worth
    assert bucket.take(1024, now=1000.0)
    assert not bucket.take(1, now=1000.0)


def test_a_partly_spent_bucket_refills_only_up_to_the_capacity():
    bucket = limiter()
    bucket.take(100, now=0.0)
    bucket.take(0, now=0.5)
    assert bucket.tokens == 1024


# -- the property ---------------------------------------------------------------------------------

def send_all(bucket: RateLimiter, start: float, plan) -> list[tuple[float, int]]:
    """A sender: for each (idle, size), idle a while, then wait as long as wait() says (again,
    while it says more) and take. Returns (time sent, size) for every datagram."""
    now = start
    sent = []
    for idle, size in plan:
        now += idle
        while (delay := bucket.wait(size, now)) > 0:
            # The float sum can round back to `now` for a tiny delay: then step one ulp.
            now = max(now + delay, math.nextafter(now, math.inf))
        assert bucket.take(size, now), "wait() said 0 but take() refused"
        sent.append((now, size))
    return sent


@settings(max_examples=300, deadline=None)
@given(
    bits_per_second=st.sampled_from([8_000, 1_000_000, 10_000_000, 100_000_000, 12_345_678]),
    interval=st.sampled_from([0.001, 0.01, 0.05, 0.5]),
    largest=st.sampled_from([64, 1500, 8192, 65536]),
    start=st.sampled_from([0.0, 12_345.678, 1e6]),
    data=st.data(),
)
def test_bytes_sent_in_any_window_never_exceed_rate_times_window_plus_capacity(
        bits_per_second, interval, largest, start, data):
    bucket = RateLimiter(bits_per_second, interval, largest, now=start)
    steps = data.draw(st.lists(st.tuples(
        st.one_of(st.just(0.0), st.floats(0.0, 2 * interval)),
        st.integers(1, largest)), min_size=1, max_size=80))
    sent = send_all(bucket, start, steps)
    times = [t for t, _ in sent]
    assert times == sorted(times)
    prefix = [0]
    for _, size in sent:
        prefix.append(prefix[-1] + size)
    slack = 4 * math.ulp(times[-1]) * bucket.rate + 1e-6      # float rounding of the timestamps
    for i in range(len(sent)):
        for j in range(i, len(sent)):
            window = times[j] - times[i]
            assert prefix[j + 1] - prefix[i] <= bucket.rate * window + bucket.capacity + slack, (
                f"{prefix[j + 1] - prefix[i]} bytes in {window} s")


def test_more_than_the_capacity_goes_once_the_bucket_is_full_and_is_paid_back():
    """A cost above the capacity (an LBT-RU datagram charged once per receiver) can never find
    that many tokens: it goes when the bucket is full, and the next sends wait until the bucket
    has earned it back."""
    bucket = limiter()                                    # 1024 bytes a second, 1024 held
    assert bucket.wait(3000, now=0.0) == 0.0
    assert bucket.take(3000, now=0.0)
    assert bucket.wait(1, now=0.0) == (3000 - 1024 + 1) / 1024
    assert not bucket.take(1, now=1.0)
    assert bucket.take(1024, now=3000 / 1024)             # the debt, then a full bucket's worth
