"""The proxy-request table: which request frames a read holds, how an egress portal rewrites them,
and what it remembers to send responses back (router/portals/proxy_requests.py)."""
import pytest

from router.portals.proxy_requests import ProxyRequest, ProxyRequestTable, count_requests
from router.um.requests import RequestOrigin, read_request
from router.um.wire.lbmc import LbmcMessage, encode_lbmc, split_lbmc_stream
from router.um.wire.lbmc_constants import LBMC_TYPE_MESSAGE
from router.um.wire.lbmc_headers import Frag, Request
from router.worker.records import RecordError


def request_frame(qidx: int, sqn: int, payload: bytes = b"ask", port: int = 14391, ip: str = "10.0.0.7",
                  frag: Frag | None = None) -> bytes:
    headers = [Request(0, qidx, port, ip)] + ([frag] if frag else [])
    return encode_lbmc(LbmcMessage(LBMC_TYPE_MESSAGE, headers, payload, tidx=3, sqn=sqn))


def data_frame(sqn: int, payload: bytes = b"data") -> bytes:
    return encode_lbmc(LbmcMessage(LBMC_TYPE_MESSAGE, [], payload, tidx=3, sqn=sqn))


def split(frames: bytes) -> list[LbmcMessage]:
    return split_lbmc_stream(frames)[0]


def test_requests_get_indexes_of_the_table_and_the_portals_address_data_is_untouched():
    frames = data_frame(1) + request_frame(7, 2) + data_frame(3) + request_frame(8, 4, port=14392)
    assert count_requests(frames) == (2, 2 * len(request_frame(7, 2)))
    table = ProxyRequestTable()
    rewritten, count, size = table.rewrite(frames, portal=2, ipaddr="127.0.0.9", port=15001)
    assert (count, size) == (2, 2 * len(request_frame(7, 2)))
    messages = split(bytes(rewritten))
    assert [m.sqn for m in messages] == [1, 2, 3, 4] and [m.payload for m in messages] == \
        [b"data", b"ask", b"data", b"ask"]
    asked = [m.headers[0] for m in messages if m.headers]
    assert [(h.ipaddr, h.port) for h in asked] == [("127.0.0.9", 15001)] * 2
    assert len({h.qidx for h in asked}) == 2
    assert [table.get(h.qidx) for h in asked] == [
        ProxyRequest(2, RequestOrigin("10.0.0.7", 14391, 7)), ProxyRequest(2, RequestOrigin("10.0.0.7", 14392, 8))]
    assert bytes(frames) == data_frame(1) + request_frame(7, 2) + data_frame(3) + request_frame(8, 4, port=14392)


def test_every_fragment_of_one_request_carries_one_proxy_index():
    table = ProxyRequestTable()
    pieces = b"".join(request_frame(5, 10 + n, b"x" * 100, frag=Frag(10, 100 * n, 300)) for n in range(3))
    rewritten, count, _ = table.rewrite(pieces, portal=1, ipaddr="127.0.0.1", port=15000)
    assert count == 3
    indexes = {m.headers[0].qidx for m in split(bytes(rewritten))}
    assert len(indexes) == 1 and len(table) == 1
    # The same requester's next request is a new proxy request; another portal's index 5 too.
    again, _, _ = table.rewrite(request_frame(6, 20), portal=1, ipaddr="127.0.0.1", port=15000)
    other, _, _ = table.rewrite(request_frame(5, 20), portal=0, ipaddr="127.0.0.1", port=15000)
    assert len({*indexes, read_request(again, 0).qidx, read_request(other, 0).qidx}) == 3


def test_the_oldest_requests_are_forgotten_beyond_the_capacity():
    table = ProxyRequestTable(capacity=3)
    indexes = [table.index_for(ProxyRequest(1, RequestOrigin("10.0.0.1", 14391, q))) for q in range(1, 6)]
    assert len(table) == 3 and table.evicted == 2
    assert table.get(indexes[0]) is None and table.get(indexes[1]) is None
    assert table.get(indexes[4]).origin.qidx == 5


def test_a_request_still_answered_outlives_idle_newer_ones():
    table = ProxyRequestTable(capacity=2)
    busy = table.index_for(ProxyRequest(1, RequestOrigin("10.0.0.1", 14391, 1)))
    idle = table.index_for(ProxyRequest(1, RequestOrigin("10.0.0.1", 14391, 2)))
    assert table.get(busy) is not None          # a response to the first request went back
    table.index_for(ProxyRequest(1, RequestOrigin("10.0.0.1", 14391, 3)))
    assert table.get(busy).origin.qidx == 1 and table.get(idle) is None and table.evicted == 1


def test_a_request_still_sending_fragments_outlives_idle_newer_ones():
    table = ProxyRequestTable(capacity=2)
    long_request = ProxyRequest(1, RequestOrigin("10.0.0.1", 14391, 1))
    first = table.index_for(long_request)
    idle = table.index_for(ProxyRequest(1, RequestOrigin("10.0.0.1", 14391, 2)))
    assert table.index_for(long_request) == first    # its next fragment
    table.index_for(ProxyRequest(1, RequestOrigin("10.0.0.1", 14391, 3)))
    assert table.index_for(long_request) == first and table.get(idle) is None


def test_indexes_wrap_without_zero():
    table = ProxyRequestTable()
    table.next_index = 0xFFFFFFFF
    first = table.index_for(ProxyRequest(1, RequestOrigin("10.0.0.1", 1, 1)))
    second = table.index_for(ProxyRequest(1, RequestOrigin("10.0.0.1", 1, 2)))
    assert (first, second) == (0xFFFFFFFF, 1)


def test_indexes_wrapping_onto_a_request_still_in_use_pass_it_by():
    table = ProxyRequestTable(capacity=3)
    busy = ProxyRequest(1, RequestOrigin("10.0.0.1", 1, 1))
    assert table.index_for(busy) == 1
    table.next_index = 0xFFFFFFFF
    table.index_for(ProxyRequest(1, RequestOrigin("10.0.0.1", 1, 2)))
    newest = table.index_for(ProxyRequest(1, RequestOrigin("10.0.0.1", 1, 3)))
    assert newest == 2 and table.get(1) == busy and table.index_for(busy) == 1


@pytest.mark.parametrize("frames", [b"\x00\x04\x00\x02", request_frame(1, 1)[:-3]])
def test_a_frame_whose_length_does_not_fit_is_an_error_not_a_crash(frames):
    with pytest.raises(RecordError):
        ProxyRequestTable().rewrite(frames, portal=1, ipaddr="127.0.0.1", port=1)
    assert count_requests(frames) == (0, 0)
