"""<endpoint> / <peer> → EndpointConfig / PeerConfig, every value range-checked at its element."""
from __future__ import annotations

from lxml import etree

from router.config.build_acl import build_acl
from router.config.build_daemon import build_name
from router.config.build_link import build_batching, build_keepalive, build_link, build_udp
from router.config.model import (ContextQuery, EndpointConfig, InitialRequest, IntervalBounds, PeerConfig,
                                 RateLimit, RemotePattern, RemoteTopic, SqnWindow, TopicResolutionConfig,
                                 UseQuery)
from router.config.reader import INT32_MAX, UINT32_MAX, ElementReader
from router.um.config import ConfigError, UMConfig
from router.um.unicast_immediate import ROUTE_TIMEOUT
from router.um.xml_config import children

# Accepted by the DTD for old configurations, without effect (spec/dro.md §1.4, §1.5).
DEPRECATED_NO_OPS = ("topic-purge", "topic-interest-generate", "topic-domain-activity",
                     "pattern-purge", "pattern-interest-generate", "pattern-domain-activity",
                     "topic-use-check", "pattern-use-check", "publishing-interval")
MAX_MAX_DATAGRAM = 65500
DEFAULT_SOURCEMAP = 131072


def build_endpoint(reader: ElementReader, element: etree._Element) -> EndpointConfig:
    child = reader.child
    return EndpointConfig(
        **_common(reader, element),
        domain_id=reader.child_int(element, "domain-id", 0, 0, UINT32_MAX),
        hotlink_index=reader.child_int(element, "hotlink-index", 0, 0, 65535),
        topic_resolution=_topic_resolution(reader, child(element, "topic-resolution")),
        remote_topic=_remote_topic(reader, child(element, "remote-topic")),
        remote_pattern=_remote_pattern(reader, child(element, "remote-pattern")),
        **_late_join(reader, child(element, "late-join")))


def _late_join(reader: ElementReader, element: etree._Element | None) -> dict:
    """The seed's <late-join>: UM's DRO eliminated it (its proxy sources keep nothing and relay
    requests to the origin, as this router's do by default); this router can also retain at its
    proxy sources, so `provide` and `forward` still mean what the seed says."""
    if element is None:
        return {}
    provide = element.get("provide", "source")
    forward = element.get("forward", "yes") == "yes"
    applied = {"always": "this portal's proxy sources keep what they send for late join (source option "
                         "late_join 1)",
               "never": "this portal's proxy sources offer no late join (source option late_join 0)",
               "source": "its proxy sources offer late join where the origin does"}[provide]
    if provide != "never":
        applied += ("; forward=\"yes\": what a proxy source does not keep is asked of the origin" if forward
                    else "; forward=\"no\": a proxy source that keeps what it sends asks the origin for nothing")
    reader.warn(element, f"element has been deprecated; provide=\"{provide}\": {applied}")
    return {"late_join_provide": None if provide == "source" else provide, "late_join_forward": forward}


def build_peer(reader: ElementReader, element: etree._Element) -> PeerConfig:
    child = reader.child
    peer = PeerConfig(
        **_common(reader, element),
        link=build_link(reader, element),
        udp=build_udp(reader, child(element, "udp")),
        sourcemap_size=_sourcemap(reader, child(element, "sourcemap")),
        max_datagram=reader.child_int(element, "max-datagram", MAX_MAX_DATAGRAM, 1, MAX_MAX_DATAGRAM),
        batching=build_batching(reader, child(element, "batching")),
        gateway_keepalive=build_keepalive(reader, child(element, "gateway-keepalive")))
    if peer.udp is not None and peer.udp_path is None:
        what = "<tls>" if peer.link.tls is not None else "<compression>"
        reader.warn(child(element, "udp"), f"with {what} the data stays on the TCP link: this router's UDP path "
                                           f"has no DTLS and no compression")
    return peer


def _common(reader: ElementReader, element: etree._Element) -> dict:
    name = build_name(reader, reader.child(element, "name"), "")
    for tag in DEPRECATED_NO_OPS:
        for old in children(element, tag):
            reader.warn(old, "element has been deprecated and will be ignored")
    return dict(
        name=name,
        cost=reader.child_int(element, "cost", 1, 1, INT32_MAX),
        source_deletion_delay=reader.child_int(element, "source-deletion-delay", 1000),
        max_queue=reader.child_int(element, "max-queue", 1000000),
        smart_batch=reader.child_flag(element, "smart-batch"),
        lbm_config=reader.child_path(element, "lbm-config"),
        lbm_attributes=_lbm_attributes(reader, reader.child(element, "lbm-attributes"), name),
        acl=build_acl(reader, reader.child(element, "acl")),
        source_context_name=reader.child_text(element, "source-context-name"),
        receiver_context_name=reader.child_text(element, "receiver-context-name"),
        sqn_window=_sqn_window(reader, reader.child(element, "sqn-window")),
        context_query=_context_query(reader, reader.child(element, "context-query")),
        line=element.sourceline,
        locations=reader.locations(element))


def _lbm_attributes(reader: ElementReader, element: etree._Element | None,
                    portal: str) -> list[tuple[str, str, str]]:
    """Each option is checked against the UM option catalogue here, at its own line."""
    options = []
    for option in children(element, "option") if element is not None else ():
        scope, name, value = option.get("scope"), option.get("name"), option.get("value")
        try:
            UMConfig().set(scope, name, value)
        except ConfigError as err:
            reason = err.reason if name in err.reason else f"option '{name}': {err.reason}"
            reader.fail(option, f"{reason} (lbm-attributes of portal '{portal}')")
        options.append((scope, name, value))
    return options


def _sqn_window(reader: ElementReader, element: etree._Element | None) -> SqnWindow:
    window = SqnWindow(reader.attr_int(element, "size", 16384, 8),
                       reader.attr_int(element, "increment", 2048, 8))
    if element is None:
        return window
    if window.size % 8 or window.increment % 8:
        reader.fail(element, f"size ({window.size}) and increment ({window.increment}) must be multiples of 8")
    if window.increment >= window.size or window.size % window.increment:
        reader.fail(element, f"increment ({window.increment}) must be smaller than size ({window.size}) "
                             "and divide it")
    return window


def _context_query(reader: ElementReader, element: etree._Element | None) -> ContextQuery:
    return ContextQuery(reader.attr_int(element, "periodic-interval", 300000, 1),
                        reader.attr_int(element, "max-contexts", 20, 1),
                        reader.attr_int(element, "interval", 200, 1),
                        reader.attr_int(element, "timeout", 900, 1))


def _remote_topic(reader: ElementReader, element: etree._Element | None) -> RemoteTopic:
    return RemoteTopic(reader.attr_int(element, "check-interval", 90000, 1),
                       reader.attr_int(element, "max-topics", 100, 1),
                       reader.attr_int(element, "timeout", 300000, 1))


def _remote_pattern(reader: ElementReader, element: etree._Element | None) -> RemotePattern:
    return RemotePattern(reader.attr_int(element, "check-interval", 90000, 1),
                         reader.attr_int(element, "max-patterns", 100, 1),
                         reader.attr_int(element, "timeout", 300000, 1))


def _topic_resolution(reader: ElementReader, element: etree._Element | None) -> TopicResolutionConfig:
    result = TopicResolutionConfig()
    if element is None:
        return result
    request = reader.child(element, "initial-request")
    result.initial_request = InitialRequest(reader.attr_int(request, "periodic-interval", 1000, 1),
                                            reader.attr_int(request, "duration", 10, 0))
    result.topic_use_query = _use_query(reader, reader.child(element, "topic-use-query"))
    result.pattern_use_query = _use_query(reader, reader.child(element, "pattern-use-query"))
    for tag in ("remote-topic-interest", "remote-pattern-interest", "domain-route"):
        attribute = tag.replace("-", "_")
        default = getattr(result, attribute)
        setattr(result, attribute, _bounds(reader, reader.child(element, tag), default))
    route = reader.child(element, "domain-route")
    if route is not None and result.domain_route.max_interval >= ROUTE_TIMEOUT * 1000:
        reader.warn(route, f"max-interval {result.domain_route.max_interval} ms: applications forget a router's "
                           f"domain routes {ROUTE_TIMEOUT:g} s after they last heard them, so unicast immediate "
                           "messages to other domains fail between announcements")
    return result


def _use_query(reader: ElementReader, element: etree._Element | None) -> UseQuery:
    default = UseQuery()
    return UseQuery(reader.attr_int(element, "periodic-interval", default.periodic_interval, 1),
                    reader.attr_int(element, "timeout", default.timeout, 1),
                    reader.attr_int(element, "max", default.max, 1),
                    _rate_limit(reader, element, default.rate_limit))


def _bounds(reader: ElementReader, element: etree._Element | None, default: IntervalBounds) -> IntervalBounds:
    bounds = IntervalBounds(reader.attr_int(element, "min-interval", default.min_interval, 1),
                            reader.attr_int(element, "max-interval", default.max_interval, 1),
                            _rate_limit(reader, element, default.rate_limit))
    reader.min_below_max(element, bounds.min_interval, bounds.max_interval)
    return bounds


def _rate_limit(reader: ElementReader, parent: etree._Element | None, default: RateLimit) -> RateLimit:
    element = reader.child(parent, "rate-limit")
    return RateLimit(reader.attr_int(element, "bps", default.bps),
                     reader.attr_int(element, "objects-per-second", default.objects_per_second))


def _sourcemap(reader: ElementReader, element: etree._Element | None) -> int:
    """0 means the default; other sizes round up to a power of two, as the DRO does (Gwd-5975-8/9)."""
    size = reader.attr_int(element, "size", DEFAULT_SOURCEMAP)
    if size == 0:
        return DEFAULT_SOURCEMAP
    rounded = 1 << (size - 1).bit_length()
    if rounded != size:
        reader.warn(element, f"sourcemap size {size} is not a power of two; using {rounded}")
    return rounded
