"""How a response to a proxy request travels back over a peer link.

A request crosses a link as data, its request index replaced by one of the sending peer portal's
proxy requests (router.portals.proxy_requests). The far router makes its own proxy request of it
and, when a responder answers, sends the response back over the link as a unicast data message:

    MESSAGE(tidx = the request index the link carried, sqn = per link) -> DESTINATION -> DATA

DESTINATION (0x64, "UIM routing across domains", spec/wire.md §3 b) names the requester the
request carried (ip, port) and one hop taken; the index alone finds the proxy request, the rest
is there for someone reading the link in Wireshark.

A unicast immediate message crosses a link the same way, with topic index 0 (a request index is
never 0) and its DESTINATION as its sender made it; so does a response routed back to a unicast
immediate request, with its request index and a DESTINATION that names where it came from.
"""
from __future__ import annotations

from router.um.wire.lbmc import LbmcMessage
from router.um.wire.lbmc_constants import LBMC_TYPE_MESSAGE
from router.um.wire.lbmc_headers import Destination


def response_message(qidx: int, sqn: int, ipaddr: str, port: int, data: bytes) -> LbmcMessage:
    return LbmcMessage(LBMC_TYPE_MESSAGE, [Destination(0, ipaddr, port, 1, 0, "0.0.0.0", 0)], data,
                       tidx=qidx, sqn=sqn)


def is_unicast(message: LbmcMessage) -> bool:
    """A unicast message on the link: a response, or a unicast immediate message on its way to
    another domain (router.portals.unicast_routing), whose topic index is 0."""
    return message.msg_type == LBMC_TYPE_MESSAGE and bool(message.headers) \
        and isinstance(message.headers[0], Destination)


def is_response(message: LbmcMessage) -> bool:
    """A response to one of our proxy requests. One routed by its DESTINATION (a response to a
    unicast immediate request from another domain) names where it came from (orig_port); these
    name no origin."""
    return is_unicast(message) and message.tidx != 0 and not message.headers[0].orig_port
