"""Retries held back while their answers are on the way (router.portals.late_join_retries), and
the egress relay that uses it (router.portals.late_join_relay), with the ring replaced by a
recorder and the clock by the test."""
from types import SimpleNamespace

from router.monitor.counters import PortalCounters
from router.portals.late_join_relay import LateJoinRelay
from router.portals.late_join_retries import MAX_WAIT, MIN_WAIT, RetryPacing
from router.um.config import UMConfig
from router.um.wire.lbmc import decode_lbmc
from router.um.wire.lbmc_late_join import LjiRequest, UmeRxReq
from tests.portals.test_late_join_relay import retrans_frame

REQUESTER = ("10.3.3.3", 14393)


def retrans(tidx: int, sqn: int) -> bytes:
    return retrans_frame(tidx, sqn, b"x")


def test_a_retry_goes_only_once_the_request_before_it_had_the_round_trip_to_be_answered():
    pacing = RetryPacing(forget_after=10.0)
    assert pacing.admit(*REQUESTER, 3, 42, 1, now=0.0)
    assert not pacing.admit(*REQUESTER, 3, 42, 1, now=0.1)            # within MIN_WAIT: on its way
    assert pacing.admit(*REQUESTER, 3, 42, 1, now=MIN_WAIT)           # past it: may have been lost
    assert pacing.admit(*REQUESTER, 3, 43, 1, now=MIN_WAIT)           # another message: its first request
    assert pacing.admit(*REQUESTER, 3, 43, 2, now=MIN_WAIT)           # another receiver of the context


def test_the_wait_follows_the_measured_round_trip_and_stays_within_its_bounds():
    pacing = RetryPacing(forget_after=60.0)
    assert pacing.wait() == MIN_WAIT                                   # nothing measured yet
    for sqn in range(50):                                              # answers take 1 s
        pacing.admit(*REQUESTER, 3, sqn, 1, now=float(sqn))
        pacing.answered(*REQUESTER, retrans(3, sqn), now=sqn + 1.0)
    assert 1.0 <= pacing.wait() < 1.5
    pacing.admit(*REQUESTER, 3, 100, 1, now=100.0)
    assert not pacing.admit(*REQUESTER, 3, 100, 1, now=100.5)          # a requester retrying every 500 ms
    assert pacing.admit(*REQUESTER, 3, 100, 1, now=100.001 + pacing.wait())
    for sqn in range(200, 260):                                        # answers take 10 s
        pacing.admit(*REQUESTER, 3, sqn, 1, now=float(sqn))
        pacing.answered(*REQUESTER, retrans(3, sqn), now=sqn + 10.0)
    assert pacing.wait() == MAX_WAIT                                   # asked again before the requester gives up


def test_an_answer_to_a_retried_request_is_no_sample_of_the_round_trip():
    """Karn's rule: which of the two requests it answers is unknown."""
    pacing = RetryPacing(forget_after=60.0)
    pacing.admit(*REQUESTER, 3, 1, 1, now=0.0)
    pacing.admit(*REQUESTER, 3, 1, 1, now=5.0)
    pacing.answered(*REQUESTER, retrans(3, 1), now=5.01)
    assert pacing.round_trip is None and not pacing.on_its_way


def test_each_retry_that_goes_doubles_the_next_wait_of_its_message_up_to_the_most():
    """No answer has come to measure by (on a loaded host every request may be asked again before
    its answer comes, and none is a sample): a requester retrying every 500 ms is let through at
    0.5, 1, 2 and 4 s, then every 3 s: 6 times in its first 10 s, not 20."""
    pacing = RetryPacing(forget_after=60.0)
    went = [t / 2 for t in range(20) if pacing.admit(*REQUESTER, 3, 1, 1, now=t / 2)]
    assert went == [0.0, 0.5, 1.0, 2.0, 4.0, 7.0]


def test_what_a_requester_no_longer_waits_for_is_forgotten():
    pacing = RetryPacing(forget_after=10.0)
    pacing.admit(*REQUESTER, 3, 1, 1, now=0.0)                         # never answered
    pacing.admit(*REQUESTER, 3, 2, 1, now=10.5)
    assert list(pacing.on_its_way) == [(*REQUESTER, 3, 2)]


def test_the_egress_relay_holds_a_retry_back_counted_and_sends_the_rest(monkeypatch):
    import router.portals.late_join_relay as module
    now = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    sent = []
    datapath = SimpleNamespace(late_join=lambda ring, stream_id, message: sent.append(bytes(message)))
    context = SimpleNamespace(config=UMConfig(), uim_relay=None,
                              responder=SimpleNamespace(send_frames=lambda address, frames: None))
    counters = PortalCounters()
    lj = LateJoinRelay("LAN2", context, datapath, SimpleNamespace(streams={}), counters)
    proxy = SimpleNamespace(streams={(1, 5): None})

    def ask(*sqns):
        lj._request_out(proxy, [UmeRxReq(1, 1, 3, sqn, REQUESTER[1], REQUESTER[0]) for sqn in sqns])
    ask(1, 2)
    now[0] += 0.1
    ask(1, 2, 3)                                                       # 1 and 2 again, 3 for the first time
    assert [[h.seqnum for h in decode_lbmc(m)[0].headers] for m in sent] == [[1, 2], [3]]
    assert counters.get("late_join_retries_held") == 2
    lj.answer_out(*REQUESTER, retrans(3, 1))                           # 1 came back, after 0.1 s; 2 did not
    assert abs(lj.retries.wait() - 0.3) < 1e-9                                 # 0.1 s and twice 0.05 s of variation
    now[0] += 0.3
    ask(1, 2)                                                          # 1 anew; 2 sent 0.4 s ago: again
    assert [h.seqnum for h in decode_lbmc(sent[-1])[0].headers] == [1, 2]
    lj._request_out(proxy, [LjiRequest(1, 1, 3, *REQUESTER, 0, 0, 200, 4)])    # an LJI_REQ always goes
    assert isinstance(decode_lbmc(sent[-1])[0].headers[0], LjiRequest)
