"""A requester's retries of retransmissions still on their way, held back where they enter the router.

A receiver asks again for each retransmission that has not come after its
`retransmit_request_interval` (500 ms by default), a whole window of them at once
(`retransmit_request_outstanding_maximum`, 200). Through routers on a loaded host the round trip
can take longer than that: each retry then went all the way to the origin, which answered it too,
and the copies, which found nobody waiting (late_join_answers_unknown), took the place of answers
on every hop. The round trip grew, and the retries with it, until receivers gave up: four late
receivers across two links on a host loaded four times over needed 20,000 retransmissions; in
90 s the origin was asked for 30,000 and 4,000 were delivered.

So the egress portal, which sees a requester's requests go out and the answers come back to it,
measures the round trip as TCP does (RFC 6298: a smoothed time and its variation, sampled only
from retransmissions asked for once, Karn's rule), and lets a requester's retry through only once
the request before it has been on its way for longer than the time plus four variations: at
least MIN_WAIT (a requester's own interval is longer: an idle router holds back nothing), at
most MAX_WAIT (a requester gives up after `retransmit_request_message_timeout`, 10 s by default:
an answer lost on the way is asked for again well before). A retry held back is counted
(late_join_retries_held). Each retry of one message that goes doubles its next wait, up to
MAX_WAIT, as TCP backs off: with no answer yet to measure the round trip by (every one asked again
before it came, so none is a sample), retries still thin out. A request of another receiver of the
same context (its own request index) always goes: each gets its own answer.
"""
from __future__ import annotations

from collections import OrderedDict

from router.um.wire.lbmc import LBMC_TYPE_RETRANS, MESSAGE_HEADER

MIN_WAIT = 0.2
MAX_WAIT = 3.0
MAX_TRACKED = 262_144            # retransmissions on their way remembered at once (oldest forgotten)


class _OnItsWay:
    __slots__ = ("sent_at", "sends", "request_indexes")

    def __init__(self, now: float, request_idx: int):
        self.sent_at = now
        self.sends = 1
        self.request_indexes = {request_idx}


class RetryPacing:
    """One egress portal's retransmission requests on their way, by (requester ip, port, its
    topic index, sequence number): the key its answer comes back with."""

    def __init__(self, forget_after: float):
        self.forget_after = forget_after           # the longest a requester waits for an answer (s)
        self.on_its_way: OrderedDict[tuple, _OnItsWay] = OrderedDict()   # the one sent longest ago first
        self.round_trip: float | None = None
        self.variation = 0.0

    def wait(self) -> float:
        """How long a request is given before a retry of it goes too."""
        if self.round_trip is None:
            return MIN_WAIT
        return min(MAX_WAIT, max(MIN_WAIT, self.round_trip + 4 * self.variation))

    def admit(self, rx_ip: str, rx_port: int, topic_idx: int, sqn: int, request_idx: int, now: float) -> bool:
        """May this UME_RXREQ go on? False for a retry while the request before it is on its way."""
        self._forget_given_up(now)
        key = (rx_ip, rx_port, topic_idx, sqn)
        sent = self.on_its_way.get(key)
        if sent is None:
            self.on_its_way[key] = _OnItsWay(now, request_idx)
            while len(self.on_its_way) > MAX_TRACKED:
                self.on_its_way.popitem(last=False)
            return True
        if request_idx not in sent.request_indexes:
            sent.request_indexes.add(request_idx)
            return True
        if now - sent.sent_at < min(MAX_WAIT, self.wait() * (1 << min(sent.sends - 1, 5))):
            return False
        sent.sent_at = now
        sent.sends += 1
        self.on_its_way.move_to_end(key)
        return True

    def answered(self, ip: str, port: int, frames, now: float) -> None:
        """Answers going back to a requester: what they answer is no longer on its way."""
        offset = 0
        while offset + MESSAGE_HEADER.size <= len(frames) and frames[offset] == LBMC_TYPE_RETRANS:
            _, _, length, topic_idx, sqn = MESSAGE_HEADER.unpack_from(frames, offset)
            sent = self.on_its_way.pop((ip, port, topic_idx, sqn), None)
            if sent is not None and sent.sends == 1:
                self._sample(now - sent.sent_at)
            if length < MESSAGE_HEADER.size:
                break
            offset += length

    def _sample(self, round_trip: float) -> None:
        if self.round_trip is None:
            self.round_trip, self.variation = round_trip, round_trip / 2
        else:
            self.variation += (abs(self.round_trip - round_trip) - self.variation) / 4
            self.round_trip += (round_trip - self.round_trip) / 8

    def _forget_given_up(self, now: float) -> None:
        """What its requester no longer waits for (its answer was lost, or nobody had it)."""
        given_up = now - self.forget_after
        while self.on_its_way and next(iter(self.on_its_way.values())).sent_at <= given_up:
            self.on_its_way.popitem(last=False)
