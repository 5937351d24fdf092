"""Proxy requests: how a request and its responses cross the router.

The seed (section 2.6): "the gateway appears as the responder from the perspective of the
requester, and as the requester from the perspective of the responder", keeping a map between
the original requester and the proxy request it creates.

A request crosses the router as data of its topic (the requester's source, a proxy receiver, a
proxy source), in order with that source's other messages. The egress portal that sends it into
the responders' domain rewrites its REQUEST header: the request index becomes one of its own and
the address becomes its context's request port, and it remembers (the portal the request came in
by, the requester's ip, port and index). A response arriving at that port with that index goes
back as a RESPONSE ring record to the portal the request came in by, which sends it to the
requester from its own context. So each domain only ever talks to the router's portal in it, as
with data.

A request has no end on the wire (a requester may take many responses, until it deletes the
request), so an entry lives until MAX_PROXY_REQUESTS other requests push it out, the least
recently used first: a fragment or a response keeps its request, which may be answered for
long after many newer ones went quiet. A response for it after that is counted as having no
forwarding information.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

from router.um.requests import REQUEST_FRAME_MIN, RequestOrigin, read_request, rewrite_request
from router.um.wire.lbmc_constants import LBMC_TYPE_MESSAGE, NHDR_REQUEST
from router.worker.records import RecordError

MAX_PROXY_REQUESTS = 65_536


class ProxyRequest(NamedTuple):
    portal: int                       # the portal (ring) the request came in by
    origin: RequestOrigin             # the requester, as its REQUEST header named it


def _request_frames(frames):
    """(offset, length) of every request frame in `frames` (whole LBMC frames)."""
    offset, end = 0, len(frames)
    while offset + 4 <= end:
        length = (frames[offset + 2] << 8) | frames[offset + 3]
        if length < 4 or offset + length > end:
            raise RecordError(f"frame of length {length} at offset {offset} of {end} bytes")
        if frames[offset] == LBMC_TYPE_MESSAGE and frames[offset + 1] == NHDR_REQUEST \
                and length >= REQUEST_FRAME_MIN:
            yield offset, length
        offset += length


def count_requests(frames) -> tuple[int, int]:
    """How many request frames `frames` holds, and their bytes (for the receive counters)."""
    count = size = 0
    try:
        for _, length in _request_frames(frames):
            count += 1
            size += length
    except RecordError:
        pass                          # the egress reports it; counting stays best effort
    return count, size


class ProxyRequestTable:
    """One egress portal's proxy requests, by the request index it put in their headers."""

    def __init__(self, capacity: int = MAX_PROXY_REQUESTS):
        self.capacity = capacity
        self.by_index: OrderedDict[int, ProxyRequest] = OrderedDict()
        self.index_of: dict[ProxyRequest, int] = {}       # every fragment of a request: one index
        self.next_index = 1
        self.evicted = 0

    def __len__(self) -> int:
        return len(self.by_index)

    def index_for(self, request: ProxyRequest) -> int:
        index = self.index_of.get(request)
        if index is not None:
            self.by_index.move_to_end(index)
            return index
        index = self._unused_index()
        self.by_index[index] = request
        self.index_of[request] = index
        while len(self.by_index) > self.capacity:
            _, least_used = self.by_index.popitem(last=False)
            self.index_of.pop(least_used, None)
            self.evicted += 1
        return index

    def _unused_index(self) -> int:
        """The next index (1 .. 2**32-1, never 0) no kept request has: once they wrap, a request
        in use since then keeps its own and is still answered."""
        while True:
            index = self.next_index
            self.next_index = index % 0xFFFFFFFF + 1
            if index not in self.by_index:
                return index

    def get(self, index: int) -> ProxyRequest | None:
        request = self.by_index.get(index)
        if request is not None:
            self.by_index.move_to_end(index)
        return request

    def rewrite(self, frames, portal: int, ipaddr: str | None = None,
                port: int | None = None) -> tuple[bytearray, int, int]:
        """A copy of `frames` whose requests carry indexes of this table and ask for responses at
        (ipaddr, port) — or, left None, where they asked before (a peer link: the responses come
        back over the link, by index); also the number of request frames and their bytes."""
        data = bytearray(frames)
        count = size = 0
        for offset, length in _request_frames(data):
            origin = read_request(data, offset)
            rewrite_request(data, offset, self.index_for(ProxyRequest(portal, origin)),
                            origin.port if port is None else port, origin.ipaddr if ipaddr is None else ipaddr)
            count += 1
            size += length
        return data, count, size


def forward_response(requests: ProxyRequestTable, qidx: int, data: bytes, datapath, counters) -> bool:
    """A response to proxy request `qidx` of `requests`: to the portal its request came in by, as a
    RESPONSE record naming the original requester. False (counted as "unknown forwarding info",
    for the caller to log) if no such proxy request is kept: never handed out, or evicted."""
    counters.add_pair("unicast_data_msgs_rcvd", "unicast_data_msg_bytes_rcvd", 1, len(data))
    request = requests.get(qidx)
    if request is None:
        counters.add_pair("unicast_data_msgs_rcvd_unknown_fwd", "unicast_data_msg_bytes_rcvd_unknown_fwd",
                          1, len(data))
        return False
    origin = request.origin
    datapath.response(request.portal, origin.ipaddr, origin.port, origin.qidx, data)
    counters.add_pair("unicast_data_msgs_forwarded", "unicast_data_msg_bytes_forwarded", 1, len(data))
    return True
