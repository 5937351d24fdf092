"""The proxy source table re-pointed to a new path, and interest that flaps between two messages."""
import pytest

from router.ipc import bus_messages as bm
from router.monitor.counters import PortalCounters
from router.portals.proxy_sources import ProxySourceTable
from router.portals.remote_interest import InterestAnnouncer
from router.um.context import Context
from router.um.wire.lbmr import CostOption
from router.um.wire.otid import tcp_otid
from router.worker.records import StreamAdvert

T = bm.INTEREST_TOPIC


def hop_and_cost(source) -> tuple[int, int]:
    [option] = [o for o in source.current_tir().options if isinstance(o, CostOption)]
    return option.hop_count, option.cost


@pytest.mark.integration
def test_a_proxy_source_re_pointed_to_a_new_path_advertises_that_paths_cost_and_hops(domain):
    """A reroute: the stream of one origin (one OTID) now comes from another portal, by a path
    of another cost and hop count. The proxy source is kept, but what it advertises, and what
    `routerctl topics` shows (its `advert`), must be the new path's."""
    context = Context(**domain.overrides())
    call = context.loop.call_and_wait
    table = ProxySourceTable(context, 1, 2, 1_000_000, 60.0, PortalCounters(), lambda *_: None)
    try:
        otid = tcp_otid("127.0.0.1", 14391, 1)
        old = StreamAdvert(1, "moved", otid, 2, 1, 1, "TCP:10.1.1.1:14391:1[1]", "TO_X", 1)
        new = StreamAdvert(7, "moved", otid, 6, 3, 1, "TCP:10.1.1.1:14391:1[1]", "TO_Y", 1)
        proxy = call(table.advertise, 0, old)
        assert hop_and_cost(proxy.source) == (2, 3)
        call(table.end_stream, 0, 1)                 # the old path's stream ended...
        assert call(table.advertise, 3, new) is proxy   # ...and the new one took the proxy source over
        assert hop_and_cost(proxy.source) == (4, 7)
        assert (proxy.advert.cost, proxy.advert.hop_count) == (6, 3)
        call(table.set_cost, 5)                      # a later cost reload starts from the new path too
        assert hop_and_cost(proxy.source) == (4, 11)
    finally:
        call(table.close)
        context.close()


def test_interest_withdrawn_and_wanted_again_before_the_next_message_is_not_cancelled():
    """An item that goes and comes back between two interest messages is still wanted: the next
    message must not carry a CANCEL for it (records are read in order, so a CANCEL after its
    refresh would withdraw the interest from the other routers)."""
    announcer = InterestAnnouncer(1.0, 60.0)
    item = (T, "flap", 3)
    announcer.update({item}, 0.0)
    assert announcer.due(0.0) == ([item], [item], [])
    announcer.update(set(), 0.5)
    announcer.update({item}, 0.5)
    send, first, cancels = announcer.due(0.5)
    assert item not in cancels
    assert announcer.items.keys() == {item}
