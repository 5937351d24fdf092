"""Multicast immediate messages (MIM) across the router: flooded into every domain (seed §2.7).

MIMs have no source, no topic resolution and no interest: the DRO forwards every one it hears to
all topic resolution domains, and access control lists do not apply to them. A portal that hears
one (an endpoint in its domain, a peer over its link) writes it as an IMMEDIATE record to every
other portal of this router; each endpoint sends it into its domain as a MIM of its own context,
each peer over its link to the next router, which does the same.

What keeps a flood finite and each domain's copies few:
- the message keeps its originating context's instance (CTXINST) and sequence number on every hop,
  and a router puts the domain it first came from in an ODOMAIN header (spec/dro.md: "requires
  origin-domain header"). Both go first in the message's header chain, so a peer link can tell a
  MIM from stream data by its first header;
- every receiving context and every peer portal runs delivery control
  (router.um.immediate_delivery): a portal floods each message at most once, however many routers
  or paths bring it back;
- an endpoint never sends a message into the domain it originated in.

Receivers may still see a message more than once when several routers join their domain to the
same others (the DRO says so too); their own delivery control drops the copies.
"""
from __future__ import annotations

from router.eventlog import RateLimitedEvents
from router.um.immediate_delivery import ImmediateDeliveryControl
from router.um.wire.errors import WireError
from router.um.wire.lbmc import CtxInst, LbmcMessage, ODomain, TopicName, decode_lbmc, encode_lbmc
from router.um.wire.lbmc_constants import LBMC_TYPE_MESSAGE, NHDR_CTXINST

_DEFAULT_WINDOW = 8192          # UM's mim_sqn_window_size
_DEFAULT_IDLE = 30.0            # UM's mim_src_deletion_timeout, seconds


def is_immediate(message: LbmcMessage) -> bool:
    """A MIM as routers carry it: a MESSAGE whose chain starts with ODOMAIN."""
    return message.msg_type == LBMC_TYPE_MESSAGE and bool(message.headers) \
        and isinstance(message.headers[0], ODomain)


def with_origin(message: LbmcMessage, origin_domain: int, origin: bytes) -> bytes:
    """The message re-encoded with ODOMAIN and CTXINST first in its chain (whatever it had of either
    is replaced by these: the first router's view of where it came from is the one that counts)."""
    rest = [h for h in message.headers
            if not isinstance(h, ODomain) and not (isinstance(h, CtxInst) and h.header_type == NHDR_CTXINST)]
    head = [ODomain(origin_domain), CtxInst(origin, NHDR_CTXINST)]
    return encode_lbmc(LbmcMessage(LBMC_TYPE_MESSAGE, head + rest, message.payload, tidx=message.tidx,
                                   sqn=message.sqn))


def carried(frame: bytes) -> tuple[LbmcMessage, int, bytes, bool]:
    """(message, origin domain, origin context, has a topic) of a MIM as routers carry it;
    WireError if it is not one."""
    message, end = decode_lbmc(frame)
    if end != len(frame) or not is_immediate(message):
        raise WireError("an immediate message must be one LBMC MESSAGE starting with ODOMAIN")
    origin = next((h.ctxinst for h in message.headers
                   if isinstance(h, CtxInst) and h.header_type == NHDR_CTXINST), None)
    if origin is None:
        raise WireError("an immediate message from a router must carry its origin's CTXINST")
    has_topic = any(isinstance(h, TopicName) for h in message.headers)
    return message, message.headers[0].domain, origin, has_topic


class ImmediateFlood:
    """One portal's part in the flood: count what it hears and write it to every other portal;
    count what it sends, and log (at most one line per reason every 10 s) what it drops."""

    def __init__(self, portal_index: int, portal_indexes: dict[str, int], datapath, counters, log_event,
                 window: int = _DEFAULT_WINDOW, idle_timeout: float = _DEFAULT_IDLE):
        self.portal_index = portal_index
        self.portal_indexes = portal_indexes            # shared with the data path: portals up now
        self.datapath = datapath
        self.counters = counters
        self._log = RateLimitedEvents(log_event)
        self.delivery = ImmediateDeliveryControl(window, idle_timeout)

    def heard(self, origin_domain: int, origin: bytes, sqn: int, has_topic: bool, frame: bytes,
              check_duplicates: bool = True) -> None:
        """A MIM arrived at this portal (`frame` already carries its origin): flood it once."""
        kind = "topic" if has_topic else "topicless"
        self.counters.add_pair(f"immediate_{kind}_fragments_rcvd", f"immediate_{kind}_fragment_bytes_rcvd",
                               1, len(frame))
        if check_duplicates and not self.delivery.is_new(origin, sqn):
            self.counters.add_pair("immediate_fragments_dropped_dup", "immediate_fragment_bytes_dropped_dup",
                                   1, len(frame))
            return
        mask = 0
        for index in self.portal_indexes.values():
            if index != self.portal_index:
                mask |= 1 << index
        if mask:
            self.datapath.immediate(mask, origin_domain, has_topic, frame)
            self.counters.add_pair(f"immediate_{kind}_fragments_forwarded",
                                   f"immediate_{kind}_fragment_bytes_forwarded", 1, len(frame))

    def too_large(self, has_topic: bool, size: int, why) -> None:
        """A MIM that cannot be carried on with its origin headers added (over 64 KiB)."""
        kind = "topic" if has_topic else "topicless"
        self.counters.add_pair(f"immediate_{kind}_fragments_dropped_size_error",
                               f"immediate_{kind}_fragment_bytes_dropped_size_error", 1, size)
        self._log("drops-immediate-size-error", f"a {size}-byte {kind} immediate message dropped: {why}")

    def duplicate(self, size: int) -> None:
        self.counters.add_pair("immediate_fragments_dropped_dup", "immediate_fragment_bytes_dropped_dup", 1, size)

    def send(self, send, has_topic: bool, frame: bytes) -> bool:
        """Send one MIM on with `send(frame)`, counting the outcome; True if it went. `send` raises
        ValueError for a message too large for the egress, OSError when the socket refuses it, or
        returns False when it could not take it (a peer link down or full)."""
        kind = "topic" if has_topic else "topicless"
        try:
            went = send(frame)
            why = "the link could not take it"
        except ValueError as err:
            self.counters.add_pair(f"immediate_{kind}_fragments_dropped_size_error",
                                   f"immediate_{kind}_fragment_bytes_dropped_size_error", 1, len(frame))
            self._log("drops-immediate-size-error", f"a {len(frame)}-byte {kind} immediate message dropped: {err}")
            return False
        except OSError as err:
            went, why = False, str(err)
        if went is False:
            self.counters.add_pair(f"immediate_{kind}_fragments_dropped_error",
                                   f"immediate_{kind}_fragment_bytes_dropped_error", 1, len(frame))
            self._log("drops-immediate-error", f"a {kind} immediate message could not be sent ({why}); dropped")
            return False
        self.counters.add_pair(f"immediate_{kind}_fragments_sent", f"immediate_{kind}_fragment_bytes_sent",
                               1, len(frame))
        return True
