"""<domain-route> min-interval / max-interval: when an endpoint says which domains it reaches."""
from router.portals.unicast_routing import DomainRouteAnnouncements


def announce_times(schedule: DomainRouteAnnouncements, start: float, until: float) -> list[float]:
    """When announcements go, from `start` to `until`, sending each as soon as it is due."""
    now, sent = start, []
    while True:
        wait = schedule.next_due(now)
        if wait is None or now + wait > until:
            return sent
        now += wait
        schedule.sent(now)
        sent.append(round(now, 3))


def test_at_once_on_a_change_then_doubling_up_to_the_maximum():
    schedule = DomainRouteAnnouncements(0.1, 1.0)
    assert schedule.next_due(0.0) is None                      # no domain reached: nothing to say
    schedule.update([3, 2], 5.0)
    assert schedule.domains == (2, 3)
    assert announce_times(schedule, 5.0, 9.0) == [5.0, 5.1, 5.3, 5.7, 6.5, 7.5, 8.5]


def test_the_same_set_again_keeps_the_pace_a_new_one_starts_over():
    schedule = DomainRouteAnnouncements(0.1, 1.0)
    schedule.update([2], 0.0)
    announce_times(schedule, 0.0, 3.0)                          # at the maximum by now
    schedule.update([2], 3.0)                                   # routes recomputed, same domains
    assert schedule.next_due(3.0) > 0.1
    schedule.update([2, 4], 3.2)                                # a domain more: said at once
    assert schedule.next_due(3.2) == 0.0
    assert announce_times(schedule, 3.2, 3.9) == [3.2, 3.3, 3.5]
    schedule.update([], 4.0)                                    # none left: said once, then nothing
    assert schedule.next_due(4.0) == 0.0
    schedule.sent(4.0)
    assert schedule.next_due(4.0) is None


def test_bounds_that_make_no_sense_are_kept_sane():
    schedule = DomainRouteAnnouncements(0.0, 0.0)               # min 0: not a busy loop
    schedule.update([2], 0.0)
    assert announce_times(schedule, 0.0, 0.0105)[:3] == [0.0, 0.001, 0.002]


def test_the_last_domain_gone_is_said_once_then_nothing():
    """An empty announcement withdraws the claim at once (the domain's contexts would otherwise
    keep sending to this router until the claim timed out), and is not repeated."""
    schedule = DomainRouteAnnouncements(0.1, 1.0)
    schedule.update([2, 3], 0.0)
    announce_times(schedule, 0.0, 2.0)
    schedule.update([], 2.5)
    assert schedule.withdrawing and schedule.next_due(2.5) == 0.0
    schedule.sent(2.5)
    assert schedule.next_due(2.6) is None and not schedule.withdrawing
    schedule.update([], 3.0)                                    # still none: nothing more
    assert schedule.next_due(3.0) is None
