"""Hot failover across contexts (HfxReceiver, UM's HFX): one topic received in two domains, each by
a context of its own, merged into one stream. Real contexts on loopback multicast domains."""
import pytest

from router.um.context import Context
from router.um.hot_failover import HfxReceiver
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration

COUNT = 3000
TOPIC = "hfx.prices"


def test_two_domains_fill_each_others_gaps_and_each_number_comes_once(make_domain):
    """The HF publisher in each domain skips numbers the other sends (a network that lost them):
    the HFX receiver, a context in each domain, delivers every number once and in order."""
    first, second = make_domain(), make_domain()
    contexts = [Context(**domain.overrides()) for domain in (first, second, first, second)]
    publisher_1, publisher_2, receiving_1, receiving_2 = contexts
    got = []
    hfx = HfxReceiver([receiving_1, receiving_2], TOPIC, on_message=got.append)
    try:
        sources = [publisher_1.hf_source(TOPIC), publisher_2.hf_source(TOPIC)]
        wait_for(lambda: len(hfx.sources) == 2 and all(s.receiver_count == 1 for s in sources), 30,
                 message="each domain's context joins its domain's publisher")
        for number in range(COUNT):
            for skipped, source in ((1, sources[0]), (2, sources[1])):
                if number % 3 != skipped:
                    source.send(b"price %d" % number, number, flush=number >= COUNT - 3)
        wait_for(lambda: len(got) >= COUNT, 60, message="every number")
        assert [message.sequence_number for message in got] == list(range(COUNT))
        assert all(bytes(message.data) == b"price %d" % message.sequence_number for message in got)
        counters = hfx.counters
        assert counters["messages_lost"] == 0 and counters["loss_events"] == 0, counters
        assert counters["duplicates_discarded"] == COUNT // 3, counters     # the numbers both sent
    finally:
        hfx.close()
        for context in contexts:
            context.close()


def test_a_context_added_as_it_runs_takes_over_when_the_first_domains_publisher_goes(make_domain):
    first, second = make_domain(), make_domain()
    contexts = [Context(**domain.overrides()) for domain in (first, second, first, second)]
    publisher_1, publisher_2, receiving_1, receiving_2 = contexts
    got = []
    hfx = HfxReceiver([receiving_1], TOPIC, on_message=got.append)
    try:
        source_1, source_2 = publisher_1.hf_source(TOPIC), publisher_2.hf_source(TOPIC)
        wait_for(lambda: source_1.receiver_count == 1, 30, message="the first domain's context joins")
        hfx.add_context(receiving_2)
        wait_for(lambda: source_2.receiver_count == 1 and len(hfx.sources) == 2, 30,
                 message="the context added joins the second domain's publisher")
        for number in range(COUNT):
            if number < COUNT // 2:
                source_1.send(b"x", number, flush=number == COUNT // 2 - 1)
            source_2.send(b"x", number, flush=number == COUNT - 1)
        source_1.close()                       # the first domain's publisher stops halfway
        wait_for(lambda: len(got) >= COUNT, 60, message="every number")
        assert [message.sequence_number for message in got] == list(range(COUNT))
        assert hfx.counters["messages_lost"] == 0
        with pytest.raises(ValueError):
            hfx.add_context(receiving_2)
        hfx.remove_context(receiving_1)
        assert len(hfx.receivers) == 1
    finally:
        hfx.close()
        for context in contexts:
            context.close()
