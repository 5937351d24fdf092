"""A receiver leaves a domain where another still uses the topic: the router asks at once, and a
lost answer (UDP topic resolution) does not drop the topic, it asks again `timeout` later, up to
`max` times (spec/dro.md <topic-use-query>). The remaining receiver is played on the wire here,
so which answer is lost is chosen."""
from __future__ import annotations

import socket
import time

import pytest

from router.um.wire.errors import WireError
from router.um.wire.lbmr import (TMR_FLAG_RESPONSE, TMR_LEAVE_TOPIC, TMR_TOPIC_USE, LbmrPacket, Tmr,
                                 TopicManagement, TopicResolution, decode_lbmr, encode_lbmr)
from tests.router.test_endpoints import start_router
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration

TOPIC = "still.used"
TIMEOUT_S, MAX_QUERIES = 0.5, 3
# Only a leave makes the router ask (the periodic queries are ten minutes apart); one start-up
# request, which the played receiver does not answer.
QUERIES = ('      <topic-resolution>\n'
           f'        <topic-use-query periodic-interval="600000" timeout="{int(TIMEOUT_S * 1000)}" '
           f'max="{MAX_QUERIES}"/>\n'
           '        <initial-request periodic-interval="1000" duration="1"/>\n'
           '      </topic-resolution>\n')


class PlayedReceiver:
    """Topic resolution of a receiver in `domain`, byte by byte: what it sends, and the router's
    use queries for TOPIC as they come."""

    def __init__(self, domain):
        self.address = (domain.group, domain.port)
        self.out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.out.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
        self.out.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        self.out.bind(("127.0.0.1", 0))
        self.listen = domain.resolver_listener()
        self.queries: list[float] = []          # when each use query for TOPIC was heard

    def send(self, body) -> None:
        self.out.sendto(encode_lbmr(LbmrPacket(body)), self.address)

    def poll(self) -> int:
        """Read what is there; the number of use queries heard so far."""
        while True:
            try:
                packet = decode_lbmr(self.listen.recv(65536))
            except BlockingIOError:
                return len(self.queries)
            except WireError:
                continue
            for tmr in getattr(packet.body, "tmrs", ()):
                if tmr.name == TOPIC and tmr.tmr_type == TMR_TOPIC_USE and not tmr.flags & TMR_FLAG_RESPONSE:
                    self.queries.append(time.monotonic())

    def close(self) -> None:
        self.out.close()
        self.listen.close()


def test_one_lost_answer_after_a_leave_does_not_drop_a_topic_still_used(routers, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = start_router(routers, [lan1, lan2], after_config=QUERIES)
    receiver = PlayedReceiver(lan2)
    try:
        def interest() -> int:
            return router.counters()[1]["local_interest_topics"]

        def asking() -> bool:          # a TQR, again until the router has heard one
            receiver.send(TopicResolution([TOPIC], []))
            return interest() == 1
        wait_for(asking, 20, message="the router learns the receiver's interest")

        receiver.send(TopicManagement([Tmr(TMR_LEAVE_TOPIC, 0, TOPIC)]))     # another receiver left
        wait_for(lambda: receiver.poll() >= 1, 10, message="a use query at once after the leave")
        # Its answer is lost: the router must ask again rather than drop the topic.
        wait_for(lambda: receiver.poll() >= 2 or interest() == 0, 10, message="the second use query")
        assert interest() == 1 and len(receiver.queries) == 2, "the topic was dropped after one unanswered query"
        assert receiver.queries[1] - receiver.queries[0] >= TIMEOUT_S * 0.9
        receiver.send(TopicManagement([Tmr(TMR_TOPIC_USE, TMR_FLAG_RESPONSE, TOPIC)]))

        # Answered: no more queries, and the interest stays, past when the round would have ended.
        end_of_round = receiver.queries[1] + MAX_QUERIES * TIMEOUT_S + 1.0
        wait_for(lambda: receiver.poll() > 2 or interest() == 0 or time.monotonic() > end_of_round, 10,
                 message="the end of the round of queries")
        assert interest() == 1 and len(receiver.queries) == 2, receiver.queries
    finally:
        receiver.close()
