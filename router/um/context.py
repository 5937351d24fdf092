"""The UM context: configuration, one topic resolution channel, transports, sources and receivers.

    ctx = Context("lan1.cfg")                       # or Context(resolver_multicast_port=13000)
    src = ctx.source("md.prices")
    rcv = ctx.receiver("md.prices", on_message)
    wrc = ctx.wildcard_receiver(r"^md\\.", on_message)
    src.send(b"...")
    ctx.send_immediate("md.prices", b"...")         # a multicast immediate message (no source)
    ctx.immediate_receiver(on_message)              # topicless immediate messages
    pending = src.send_request(b"?", on_response)   # answered by a receiver's message.respond(...)
    ctx.close()

By default a context runs its own loop on a background thread (UM's context thread) and
callbacks run there. A router worker passes its own `loop` and runs it itself.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

from router.log_rate import LogRate
from router.um.config import UMConfig, from_overrides, load_file
from router.um import monitoring
from router.um.expiry_timer import ExpiryTimer
from router.um.hot_failover import HfReceiver, HfSource, HfWildcardReceiver
from router.um.hotlinks import HotlinkReceiver
from router.um.immediate import ImmediateChannel, ImmediateMessage
from router.um.lbmr_channel import LbmrChannel, new_src_id
from router.um.loop import EventLoop
from router.um.messages import Message, RequestMessage
from router.um.netif import resolve_interface
from router.um.receiver import Accept, OnBatch, OnEvent, OnMessage, Receiver, WildcardReceiver
from router.um.request_port import RequestPort
from router.um.requests import (MAX_RESPONSE_BYTES, PendingRequest, RequestIndexes, RequestOrigin,
                                RequestPortUnavailable, Response, ResponseTooLarge)
from router.um.responder import ResponseSender
from router.um.retention import Retention
from router.um.source import Source
from router.um.source_cache import Candidate
from router.um.unicast_immediate import (NoRouteToDomain, Uim, UimReassembly, decode_uim, is_uim_frame,
                                         parse_target, source_of, uim_frames)
from router.um.wire.lbmc_headers import Destination, Request
from router.lbtipc.receiver import LbtipcSessionClient, UnreadableSession
from router.lbtipc.source import LbtipcSourceSession
from router.um.late_join import LateJoinClient, LateJoinServer, LateJoinSettings
from router.um.otr import OtrRecovery, OtrSettings
from router.um.sequence_info import SequenceInfo
from router.um.lbtrm_receive_window import ReceiveWindow
from router.um.lbtrm_receiver import LbtrmGroup, LbtrmSessionClient
from router.um.lbtrm_source import LbtrmSourceSession
from router.um.lbtru_receiver import LbtruPort, LbtruSessionClient
from router.um.lbtru_source import LbtruSourceSession
from router.um.tcp_receiver import TcpSessionClient
from router.um.tcp_source import TcpSourceSession
from router.um.topic_resolver import TopicResolver
from router.um.wire.errors import WireError
from router.um.wire.lbmc import LBMC_TYPE_CONTROL, LBMC_TYPE_RETRANS, MESSAGE_HEADER, UmeLjInfo, decode_lbmc
from router.um.wire.lbmr import LbtipcInfo, LbtrmInfo, LbtruInfo, TcpInfo

log = logging.getLogger(__name__)



def _repairing_options(config: UMConfig, transport: str) -> dict:
    """What LBT-RM and LBT-RU sessions both take (router.um.repairing_source), from the options
    UM names alike for the two: transport_lbtrm_* or transport_lbtru_*."""
    def get(scope: str, name: str):
        return config.get(scope, f"transport_{transport}_{name}")
    return {"datagram_max_size": get("context", "datagram_max_size"),
            "data_rate_limit": get("context", "data_rate_limit"),
            "retransmit_rate_limit": get("context", "retransmit_rate_limit"),
            "rate_interval": get("context", "rate_interval") / 1000,
            "window_size": get("source", "transmission_window_size"),
            "window_limit": get("source", "transmission_window_limit"),
            "ignore_interval": get("source", "ignore_interval") / 1000,
            "sm_minimum_interval": get("source", "sm_minimum_interval") / 1000,
            "sm_maximum_interval": get("source", "sm_maximum_interval") / 1000}

# A response routed to another domain waits this long for a router here to say it reaches that
# domain (s), looking again every ROUTE_RETRY: a context that has just started hears them within a
# propagation interval (1 s by default).
ROUTE_WAIT = 5.0
ROUTE_RETRY = 0.05
# How long closing a context waits for its sources' final advertisements (a series of up to
# resolver_send_final_advertisements, 100 ms apart) to go out.
FINALS_WAIT = 5.0
BAD_UIM_LOG_INTERVAL = 10.0      # s: malformed unicast immediate messages are logged at most this often


class Context:
    def __init__(self, config_file: str | Path | None = None, *, config: UMConfig | None = None,
                 loop: EventLoop | None = None, packet_options: Callable[[], list] | None = None,
                 source_cost_evaluation_function: Callable | None = None, **overrides: Any):
        merged = config.copy() if config is not None else UMConfig()
        if config_file is not None:
            merged = load_file(config_file, into=merged)
        if overrides:
            merged = from_overrides(overrides, into=merged)
        merged.check_ranges()         # as UM does when a context is made: an empty port range fails here
        self.config = merged
        self.name = merged.get("context", "context_name") or f"ctx-{os.getpid()}"
        monitor_settings = self._monitor_settings()        # a bad setting fails before anything opens
        self.src_id = new_src_id()
        self.context_id = int.from_bytes(self.src_id[:4], "big")
        self.own_loop = loop is None
        self.loop = loop or EventLoop(f"um-{self.name}")
        self.resolver = TopicResolver(self, merged)
        self.resolver.cost_function = source_cost_evaluation_function
        channel = None
        try:
            channel = LbmrChannel(merged, self.loop, self.resolver.on_packet, self.src_id, packet_options)
            tcp_interface = resolve_interface(merged.get("context", "transport_tcp_interface") or channel.interface)
        except BaseException:
            # A context that cannot open (an interface this host lacks) keeps nothing open: an
            # application that tries again until the interface comes up must not run out of
            # descriptors meanwhile.
            if channel is not None:
                channel.close()
            self.resolver.close()
            if self.own_loop:
                self.loop.close()
            raise
        self.channel, self.tcp_interface = channel, tcp_interface
        self.sessions: dict[tuple, object] = {}                # (transport, fixed port, overflow) -> session
        self.session_users: dict[TcpSourceSession, int] = {}
        self.session_indexes: dict[object, set[int]] = {}       # topic indexes in use per session
        self.next_topic_index = 1
        self.clients: dict[tuple, object] = {}                 # session key -> TCP / LBT-IPC / LBT-RM stream
        self.lbtrm_groups: dict[tuple[str, int], LbtrmGroup] = {}   # LBT-RM receive sockets
        self.lbtrm_group_cursor: int | None = None
        self.lbtru_port: LbtruPort | None = None           # the LBT-RU receive socket
        # Request/response (router.um.requests): our requests by index, the request port their
        # responses come to (opened on first use), and the connections our responses go out on.
        self.requests = RequestIndexes()
        self.request_port: RequestPort | None = None
        self.responder = ResponseSender(self.loop, merged.get("context", "transport_tcp_datagram_max_size"),
                                        idle_timeout=merged.get("context", "response_tcp_deletion_timeout") / 1000)
        # (qidx, data, source) -> True if taken: responses to no request of ours (a router's proxy requests).
        self.response_handler: Callable[[int, bytes, str], bool] | None = None
        self.request_counters = {"requests_sent": 0, "responses_received": 0, "responses_unmatched": 0,
                                 "request_port_errors": 0}
        # Late join (router.um.late_join): what our late-join sources retain, and our receivers'
        # requests for what theirs do, by request index.
        self.late_join_server = LateJoinServer(self)
        self.late_join_clients: dict[int, LateJoinClient] = {}
        self.late_join_counters = {"lj_info_unanswered": 0, "lj_retransmissions_requested": 0,
                                   "lj_retransmissions_given_up": 0, "lj_messages_delivered": 0,
                                   "lj_messages_incomplete": 0, "lj_properties_malformed": 0, "lj_held_overflows": 0,
                                   "uim_frames_unknown": 0}
        self.next_transport_index = 1
        # Off-transport recovery (router.um.otr): our receivers' recoveries by the topic index they
        # recover (RETRANS frames carry no more than it and the sequence number).
        self.otr_recoveries: dict[int, list[OtrRecovery]] = {}
        self.otr_counters = {"otr_messages_missing": 0, "otr_requests_sent": 0, "otr_frames_recovered": 0,
                             "otr_messages_recovered": 0, "otr_messages_unrecovered": 0,
                             "otr_messages_incomplete": 0, "otr_properties_malformed": 0,
                             "otr_cache_overflows": 0}
        self.loss_counters = {"unrecoverable_loss_events": 0, "unrecoverable_loss_messages": 0}
        # Every transport stream's malformed frames, the streams that ended included.
        self.stream_counters = {"transport_malformed": 0}
        # A router's hook for the answers to late-join requests it relayed (router.portals.late_join_relay):
        # frame -> True if taken.
        self.uim_relay: Callable[[bytes, object], bool] | None = None
        # Unicast immediate messages (router.um.unicast_immediate). A router's portal takes those
        # that carry a DESTINATION (uim, the connection's "TCP:ip:port") instead of delivering them.
        self.uim_router: Callable[[Uim, str], None] | None = None
        # What to do with a unicast immediate message that does not parse ("from", why), besides
        # counting it: a router's portal counts and logs it its way; else logged, at most every 10 s.
        self.on_bad_uim: Callable[[str, str], None] | None = None
        self._bad_uim_said = LogRate(BAD_UIM_LOG_INTERVAL)
        self.uim_counters = {"uim_sent": 0, "uim_received": 0, "uim_no_route": 0, "uim_malformed": 0,
                             "uim_incomplete": 0}
        self.uim_pieces = UimReassembly(self.uim_counters)
        self._uim_pieces_expiry = ExpiryTimer(self.loop, self.uim_pieces)
        # Multicast immediate messaging (router.um.immediate): opened on first use.
        self.immediate: ImmediateChannel | None = None
        self.immediate_callbacks: list[OnMessage] = []           # topicless messages
        self.immediate_listeners: list[Callable[[ImmediateMessage], None]] = []   # every one (routers)
        self.closed = False
        if self.own_loop:
            self.loop.start_thread()
        self.monitor = None
        if monitor_settings is not None:
            self.monitor = self._call(monitoring.StatisticsPublisher, self, monitor_settings)

    # -- public API --------------------------------------------------------------------------------
    def source(self, topic: str, *, transport: str | None = None, otid: bytes | None = None,
               cost: int | None = None, hop_count: int = 0, domain_id: int | None = None,
               overflow: str = "block", final_advertisements: int | None = None,
               max_queue: int | None = None, index: int | None = None, hold_for_receiver: float = 0.0,
               options: UMConfig | None = None, hot_failover: bool = False) -> Source:
        """A source on `topic` (`hot_failover`: an HfSource, see hf_source). `otid`, `cost`,
        `hop_count`, `domain_id` are for proxy sources: they make the advertisement say where the
        data really comes from; `index` asks for a topic index (a router keeps the origin's, so
        forwarded frames need no rewriting); `hold_for_receiver` (seconds) keeps what is sent while no receiver is connected (LBT-IPC:
        until the first attaches) for the first one to connect (router.um.tcp_source,
        router.lbtipc.source). `options`: this source's own options (a UM XML configuration's
        per-topic ones) instead of the context's; sources share a transport session only when
        their transport options are the same. Those are checked as the context's were when it
        was made (ConfigError: an empty range, a minimum above its maximum)."""
        config = options if options is not None else self.config
        if options is not None:
            options.check_ranges()
        transport = (transport or config.get("source", "transport")).replace("-", "")
        finals = config.get("source", "resolver_send_final_advertisements") \
            if final_advertisements is None else final_advertisements

        def create() -> Source:
            session = self._session_for(transport, overflow, max_queue, hold_for_receiver, config)
            used = self.session_indexes.setdefault(session, set())
            chosen = index if index is not None and index not in used and index > 0 else None
            while chosen is None:
                candidate, self.next_topic_index = self.next_topic_index, self.next_topic_index + 1
                if candidate not in used:
                    chosen = candidate
            used.add(chosen)
            kind = HfSource if hot_failover else Source
            source = kind(self, topic, session, chosen, otid=otid, cost=cost, hop_count=hop_count,
                          domain_id=domain_id, final_advertisements=finals)
            if config.get("source", "late_join"):
                self._offer_late_join(source, config)
            self._sequence_info(session, config).add(chosen, source)
            self.resolver.add_source(source)
            return source
        return self._call(create)

    def hf_source(self, topic: str, *, transport: str | None = None, **options) -> HfSource:
        """A hot failover source (UM's lbm_hf_src_create): its application gives each message's
        sequence number, `send(data, sequence_number)` (router.um.hot_failover)."""
        return self.source(topic, transport=transport, hot_failover=True, **options)

    def hf_receiver(self, topic: str, on_message: OnMessage | None = None, on_event: OnEvent | None = None,
                    *, on_batch: OnBatch | None = None) -> HfReceiver:
        """A hot failover receiver (UM's lbm_hf_rcv_create): every source of `topic` joined, each
        sequence number delivered once, in order (router.um.hot_failover)."""
        return HfReceiver(self, topic, on_message, on_event, on_batch)

    def hf_wildcard_receiver(self, pattern: str, on_message: OnMessage | None = None,
                             on_event: OnEvent | None = None, kind: str = "pcre", *,
                             on_batch: OnBatch | None = None) -> HfWildcardReceiver:
        """A hot failover wildcard receiver (UM's lbm_hf_wildcard_rcv_create): every topic the
        pattern matches merged as hf_receiver merges one (router.um.hot_failover)."""
        return HfWildcardReceiver(self, pattern, on_message, on_event, kind, on_batch)

    def receiver(self, topic: str, on_message: OnMessage | None = None, on_event: OnEvent | None = None,
                 *, on_batch: OnBatch | None = None, raw: bool = False, accept: Accept | None = None,
                 use_hotlink: bool | None = None) -> Receiver | HotlinkReceiver:
        """A receiver on `topic`: `on_message(message)` per message, or `on_batch(messages)` per
        batch read from the transport (cheaper at high rates). `raw` is for routers: each joined
        source's frames go to its `forward` callable, fragments as they came. `accept(candidate)`,
        if given, decides whether a source is joined at all. Requests arrive as RequestMessage
        (`isinstance(message, RequestMessage)`; `message.respond(data)` answers), in sequence.
        `use_hotlink` (default: the receiver option use_hotlink) joins every path redundant
        routers forward a source by and delivers the first copy of each message
        (router.um.hotlinks.HotlinkReceiver); a router's raw receivers forward what they join as it is."""
        if use_hotlink is None:
            use_hotlink = self.config.get("receiver", "use_hotlink")
        if use_hotlink and not raw:
            return HotlinkReceiver(self, topic, on_message, on_event, on_batch)
        return self._add_receiver(Receiver(self, topic, on_message, on_event, on_batch=on_batch, raw=raw,
                                           accept=accept))

    def _add_receiver(self, receiver: Receiver) -> Receiver:
        self._call(self.resolver.add_receiver, receiver)
        if not receiver.raw:
            self._call(self._listen_immediate)      # immediate messages to the topic come to it too
        return receiver

    def wildcard_receiver(self, pattern: str, on_message: OnMessage | None = None,
                          on_event: OnEvent | None = None, kind: str = "pcre", *,
                          on_batch: OnBatch | None = None, raw: bool = False,
                          accept: Accept | None = None) -> WildcardReceiver:
        wildcard = WildcardReceiver(self, pattern, on_message, on_event, kind, on_batch, raw, accept)
        self._call(self.resolver.add_wildcard, wildcard)
        if not raw:
            self._call(self._listen_immediate)
        return wildcard

    def send_immediate(self, topic: str | None, data) -> int:
        """A multicast immediate message to `topic` (None: topicless), sent at once, from any thread;
        returns its sequence number. Every receiver of the topic in the domain gets it, and routers
        flood it into every other domain (router.um.immediate)."""
        channel = self.immediate or self._call(self._immediate_channel)
        return channel.send(topic, data)

    def send_unicast_immediate(self, target: str, topic: str | None, data) -> None:
        """A unicast immediate message (lbm_unicast_immediate_message) to the context at `target`,
        `TCP:ip:port` in this domain or `TCP:domain:ip:port` anywhere a router reaches; `topic`
        None for a topicless one (router.um.unicast_immediate). From any thread; it is queued on a
        TCP connection to the target (or to the router that takes it there) and sent in order with
        this context's other messages to that address; one larger than a frame goes in pieces.
        ValueError for a bad target or a message above 64 MB; NoRouteToDomain if no router in this
        domain reaches the domain."""
        where = parse_target(target)
        address, destination = self._unicast_route(where.domain, where.ipaddr, where.port, target)
        frames, first_sqn_at = uim_frames(topic, data, destination)
        self.uim_counters["uim_sent"] += 1
        self.responder.send_unicast(address, frames, first_sqn_at)

    def send_unicast_immediate_request(self, target: str, topic: str | None, data,
                                       on_response: Callable[[Response], None] | None = None) -> PendingRequest:
        """A unicast immediate request (lbm_unicast_immediate_request): a message to `target` as
        send_unicast_immediate sends it, which its receiver may answer; the responses come to
        `on_response` on the context's thread, through the routers when the target is in another
        domain, until the returned PendingRequest is closed."""
        where = parse_target(target)
        address, destination = self._unicast_route(where.domain, where.ipaddr, where.port, target)
        ipaddr, port = self.request_address()
        pending = self.requests.open(on_response)
        try:
            frames, first_sqn_at = uim_frames(topic, data, destination, Request(0, pending.qidx, port, ipaddr))
        except ValueError:
            pending.close()
            raise
        self.uim_counters["uim_sent"] += 1
        self._request_sent()
        self.responder.send_unicast(address, frames, first_sqn_at)
        return pending

    def _unicast_route(self, domain: int | None, ipaddr: str, port: int, what: str):
        """Where a message for (domain, ipaddr, port) goes, and the DESTINATION it carries: the
        target itself in this domain (no DESTINATION), else the router here that reaches the
        domain. NoRouteToDomain if none does."""
        own = self.resolver.domain_id
        if domain is None or domain == own:
            return (ipaddr, port), None
        router = self.resolver.domain_routes.router_for(domain)
        if router is None:
            self.uim_counters["uim_no_route"] += 1
            known = sorted(self.resolver.domain_routes.domains())
            raise NoRouteToDomain(f"unicast immediate message to {what}: no router in this domain reaches "
                                  f"domain {domain} (domains reached: {known or 'none heard'})")
        orig_ip, orig_port = self.request_address()        # where an answer to it comes
        return router, Destination(domain, ipaddr, port, 0, own or 0, orig_ip, orig_port)

    def immediate_receiver(self, on_message: OnMessage) -> None:
        """Deliver topicless immediate messages to `on_message` (topic ones go to the topic's receivers).
        Unicast immediate messages are delivered the same way."""
        def add() -> None:
            self.immediate_callbacks.append(on_message)
            self._listen_immediate()
        self._call(add)

    def add_immediate_listener(self, listener: Callable[[ImmediateMessage], None]) -> None:
        """Every immediate message heard in the domain, frame by frame (fragments as they came:
        routers flood them)."""
        def add() -> None:
            self.immediate_listeners.append(listener)
            self._listen_immediate()
        self._call(add)

    def add_lbmr_listener(self, listener: Callable) -> None:
        """Every LBMR packet heard in the domain, decoded (routers learn interest this way)."""
        self._call(self.resolver.listeners.append, listener)

    @property
    def domain_id(self) -> int | None:
        return self.resolver.domain_id

    def counters(self) -> dict[str, int]:
        found = {f"lbmr_{k}": v for k, v in self.channel.counters.items()}
        if self.immediate is not None:
            found.update(self.immediate.counters)
            found.update(self.immediate.reassembly.counters)
        found.update(self.resolver.counters)
        found.update(self.request_counters)
        found.update(self.uim_counters)
        found.update(self.responder.counters)
        found.update(self.late_join_server.counters)
        found.update(self.late_join_counters)
        found.update(self.otr_counters)
        found.update(self.loss_counters)
        found.update(self.stream_counters)
        if self.request_port is not None:
            found.update(self.request_port.counters)
        return found

    def _monitor_settings(self) -> "monitoring.MonitorSettings | None":
        """UM's automatic monitoring (router.um.monitoring) from the monitor_* options; ValueError
        naming the context for settings it cannot honour."""
        get = self.config.get
        if get("context", "monitor_interval") <= 0:
            return None
        try:
            return monitoring.settings(get("context", "monitor_interval"), get("context", "monitor_appid") or self.name,
                                       get("context", "monitor_transport"), get("context", "monitor_transport_opts"),
                                       get("context", "monitor_format"), get("context", "monitor_format_opts"))
        except monitoring.MonitoringError as err:
            raise ValueError(f"context {self.name}: {err}") from None

    # -- immediate messages (on the loop thread) ---------------------------------------------------
    def _immediate_channel(self) -> ImmediateChannel:
        if self.immediate is None:
            if self.closed:
                raise RuntimeError(f"context {self.name} is closed")
            self.immediate = ImmediateChannel(self.config, self.loop, self.channel.interface, self.src_id,
                                              self._immediate_in, self._immediate_frame)
        return self.immediate

    def _listen_immediate(self) -> None:
        channel = self._immediate_channel()
        try:
            channel.listen()
        except OSError as err:
            # Receivers still get their sources' data; only immediate messages are missed.
            if not channel.counters["mim_listen_errors"]:
                log.warning("context %s cannot receive immediate messages on %s:%d: %s", self.name,
                            *channel.incoming, err)
            channel.counters["mim_listen_errors"] += 1

    def _immediate_frame(self, message: ImmediateMessage) -> None:
        for listener in self.immediate_listeners:
            listener(message)

    def _immediate_in(self, message: ImmediateMessage) -> None:
        self._deliver_immediate(message.topic, Message(message.topic or "", message.source, message.sqn, message.data))

    def _deliver_immediate(self, topic: str | None, delivered: Message) -> None:
        """An immediate message (multicast or unicast): to the topic's receivers, or a topicless
        one to the immediate-message callbacks."""
        if topic is None:
            for callback in self.immediate_callbacks:
                callback(delivered)
            return
        for receiver in self.resolver.receivers.get(topic, ()):
            if receiver.query and not receiver.raw:          # not a wildcard's own per-topic receiver
                _hand(receiver, delivered)
        for wildcard in self.resolver.wildcards:
            if not wildcard.raw and wildcard.matches(topic):
                _hand(wildcard, delivered)

    # -- request/response --------------------------------------------------------------------------
    def request_address(self) -> tuple[str, int]:
        """(ipaddr, port) of this context's request port, where responses to its requests come;
        opened on first use. RequestPortUnavailable (an OSError) if no port of the range is free."""
        port = self.request_port
        if port is None:
            port = self._call(self._open_request_port)
        return port.address

    def _open_request_port(self) -> RequestPort:
        if self.request_port is None:
            if self.closed:
                raise RuntimeError(f"context {self.name} is closed")
            get = self.config.get
            interface = resolve_interface(get("context", "request_tcp_interface") or self.tcp_interface)
            try:
                self.request_port = RequestPort(self.loop, interface, get("context", "request_tcp_port_low"),
                                                get("context", "request_tcp_port_high"), self._response_in,
                                                self._uim_frame)
            except RequestPortUnavailable:
                self.request_counters["request_port_errors"] += 1
                raise
        return self.request_port

    # -- late join -------------------------------------------------------------------------------------
    def _offer_late_join(self, source: Source, config: UMConfig) -> None:
        """Keep what `source` sends, and say so in its advertisements (loop thread)."""
        try:
            address = self._open_request_port().address
        except RequestPortUnavailable as err:
            log.warning("source %s: late join not offered: %s", source.topic, err)
            return
        session = source.session
        if not hasattr(session, "transport_index"):
            session.transport_index = self.next_transport_index
            self.next_transport_index += 1
        get = config.get
        retention = Retention(get("source", "retransmit_retention_size_limit"),
                              get("source", "retransmit_retention_age_threshold"))
        session.retain(source.index, retention)
        self.late_join_server.add(session.transport_index, source.index, retention)
        source.late_join = (address, session.transport_index, retention)

    def offer_relayed_late_join(self, source: Source, relay) -> bool:
        """A router's proxy source that keeps nothing offers late join all the same: requests for
        it go to `relay(message)`, which asks the originating source (router.portals.late_join_relay);
        one that retains relays what it no longer has. Loop thread; False if there is no request
        port to name."""
        if source.late_join is not None:      # it retains: what it no longer has is asked of the origin
            self.late_join_server.relay(source.late_join[1], source.index, relay)
            return True
        try:
            address = self._open_request_port().address
        except RequestPortUnavailable as err:
            log.warning("source %s: late join not relayed: %s", source.topic, err)
            return False
        session = source.session
        if not hasattr(session, "transport_index"):
            session.transport_index = self.next_transport_index
            self.next_transport_index += 1
        self.late_join_server.relay(session.transport_index, source.index, relay)
        source.late_join = (address, session.transport_index, None)
        self.resolver.readvertise(source)
        return True

    def _withdraw_late_join(self, source: Source) -> None:
        if source.late_join is not None:
            self.late_join_server.remove(source.late_join[1], source.index)
            self.late_join_server.relayed.pop((source.late_join[1], source.index), None)
            source.session.retain(source.index, None)

    def _reply_address(self, what: str, candidate: Candidate) -> tuple[str, int] | None:
        """Where a source answers our receivers (our request port), None if it cannot be opened."""
        try:
            return self._open_request_port().address
        except RequestPortUnavailable as err:
            log.warning("%s %s not used: %s", what, candidate.source_string, err)
            return None

    def _late_join_start(self, candidate: Candidate, joined) -> None:
        """A receiver joined a source that offers late join: fetch what came before (loop thread)."""
        settings = LateJoinSettings.from_config(self.config)
        if not settings.enabled:
            return
        reply_to = self._reply_address("late join to", candidate)
        if reply_to is None:
            return
        client = LateJoinClient(self, joined, candidate.late_join, settings, reply_to)
        if not client.done:
            joined.late_join = client
            self.late_join_clients[client.request_idx] = client

    def _otr_start(self, candidate: Candidate, joined) -> None:
        """A receiver joined a source that retains: what its transport loses can be asked of it."""
        settings = OtrSettings.from_config(self.config)
        if not settings.enabled:
            return
        reply_to = self._reply_address("off-transport recovery from", candidate)
        if reply_to is None:
            return
        joined.otr = OtrRecovery(self, joined, candidate.late_join, settings, reply_to)
        self.otr_recoveries.setdefault(candidate.index, []).append(joined.otr)
        self.late_join_clients[joined.otr.request_idx] = joined.otr      # its LJ_INFO answers bind it

    def _otr_end(self, joined) -> None:
        recovery = joined.otr
        if recovery is None:
            return
        recovery.close()
        self.late_join_clients.pop(recovery.request_idx, None)
        recoveries = self.otr_recoveries.get(recovery.topic_idx, [])
        if recovery in recoveries:
            recoveries.remove(recovery)
        if not recoveries:
            self.otr_recoveries.pop(recovery.topic_idx, None)

    def _late_join_end(self, joined) -> None:
        client = joined.late_join
        if client is not None:
            joined.late_join = None
            client.close()
        for request_idx in [i for i, c in self.late_join_clients.items() if c.done]:
            del self.late_join_clients[request_idx]

    def _uim_frame(self, frame: bytes, connection) -> None:
        """A frame on a UIM connection to our request port that is not a response: a unicast
        immediate message, or late join's requests (we are the source) and answers (we are the
        receiver)."""
        kind = frame[0]
        if is_uim_frame(frame):
            self._unicast_in(frame, connection)
            return
        if self.uim_relay is not None and self.uim_relay(frame, connection):
            return                            # an answer to a request a router relayed
        if kind == LBMC_TYPE_RETRANS and len(frame) >= MESSAGE_HEADER.size:
            tidx = int.from_bytes(frame[4:8], "big")
            if any(client.retransmission(frame) for client in connection.late_join.get(tidx, ())):
                return
            # An OTR recovery whose source has not answered its LJI_REQ yet (the answer binds
            # its connection): the first one that waits for this sequence number.
            if any(recovery.retransmission(frame) for recovery in self.otr_recoveries.get(tidx, ())
                   if not recovery.bound):
                return
        elif kind == LBMC_TYPE_CONTROL:
            try:
                message, _ = decode_lbmc(frame, 0)
            except WireError:
                message = None
            if message is not None and self.late_join_server.control(message):
                return
            infos = [h for h in (message.headers if message is not None else ()) if isinstance(h, UmeLjInfo)]
            known = 0
            for info in infos:
                client = self.late_join_clients.get(info.qidx)
                if client is not None:
                    known += 1
                    clients = connection.late_join.setdefault(client.topic_idx, [])
                    # Bound once: an OTR recovery asks again with each retry, for as long as it lives.
                    clients[:] = [c for c in clients if not c.done and c is not client] + [client]
                    client.info(info)
            if known:
                return
        self.late_join_counters["uim_frames_unknown"] += 1

    def _unicast_in(self, frame: bytes, connection) -> None:
        """A unicast immediate message at our request port (loop thread)."""
        try:
            uim = decode_uim(frame)
        except WireError as err:
            self.uim_counters["uim_malformed"] += 1
            if self.on_bad_uim is not None:
                self.on_bad_uim(connection.source, str(err))
            elif self._bad_uim_said.due() is not None:
                log.warning("context %s: a malformed unicast immediate message from %s dropped: %s (%d so far)",
                            self.name, connection.source, err, self.uim_counters["uim_malformed"])
            return
        if uim.destination is not None and self.uim_router is not None:
            self.uim_router(uim, connection.source)       # a router forwards pieces as they are
            return
        if uim.fragment is not None:
            d = uim.destination
            whole = self.uim_pieces.add(connection if d is None else (d.orig_domain_id, d.orig_ipaddr, d.orig_port),
                                        uim)
            if whole is None:
                self._uim_pieces_expiry.arm()
                return
            uim.data = whole
        source = source_of(uim, connection.source)
        if uim.tidx:                          # a response to one of our requests, from another domain
            self._response_in(uim.tidx, uim.data, source)
            return
        self.uim_counters["uim_received"] += 1
        if uim.request is None:
            delivered = Message(uim.topic or "", source, uim.sqn, uim.data)
        else:
            domain = uim.destination.orig_domain_id if uim.destination is not None else None
            request = uim.request
            delivered = RequestMessage(uim.topic or "", source, uim.sqn, uim.data,
                                       RequestOrigin(request.ipaddr, request.port, request.qidx, domain), self)
        self._deliver_immediate(uim.topic, delivered)

    def _request_sent(self) -> None:
        with self.requests.lock:           # applications may send requests from several threads
            self.request_counters["requests_sent"] += 1

    def _response_in(self, qidx: int, data: bytes, source: str) -> None:
        """A whole response at our request port (on the loop thread)."""
        self.request_counters["responses_received"] += 1
        pending = self.requests.get(qidx)
        if pending is not None and not pending.closed:
            pending.deliver(Response(qidx, data, source))
            return
        handler = self.response_handler
        if handler is not None and handler(qidx, data, source):
            return
        self.request_counters["responses_unmatched"] += 1
        log.debug("response from %s to request %d, which is not open here; dropped", source, qidx)

    def respond(self, origin: RequestOrigin, data, outcome: Callable[[bool], None] | None = None) -> None:
        """Answer a request (RequestMessage.respond calls this). From any thread; never blocks:
        what cannot be sent yet is queued, and what cannot be sent at all is counted
        (responses_dropped) and logged with the requester's address. `outcome(sent)` hears which
        (router.um.responder). ResponseTooLarge, at once, for more than MAX_RESPONSE_BYTES: the
        requester's request port would refuse it."""
        size = memoryview(data).nbytes
        if size > MAX_RESPONSE_BYTES:
            raise ResponseTooLarge(f"a response of {size} bytes; a request port takes at most "
                                   f"{MAX_RESPONSE_BYTES} bytes")
        if origin.domain is None or origin.domain == self.resolver.domain_id:
            self.responder.respond(origin, data, outcome)
        elif self.closed:            # its loop may be closed too: nothing may wake it
            self.responder.drop((origin.ipaddr, origin.port), 1, "the context is closed", outcome)
        elif self.loop.in_loop_thread():
            self._respond_routed(origin, bytes(data), time.monotonic() + ROUTE_WAIT, outcome)
        else:
            self.loop.call_soon_threadsafe(self._respond_routed, origin, bytes(data), time.monotonic() + ROUTE_WAIT,
                                           outcome)

    def _respond_routed(self, origin: RequestOrigin, data: bytes, deadline: float,
                        outcome: Callable[[bool], None] | None = None) -> None:
        """A response to a unicast immediate request from another domain, back through the routers
        (loop thread). A context that has just started may not have heard yet which router here
        reaches that domain (each says so every propagation interval): it waits for one up to
        ROUTE_WAIT, then the response is dropped, counted and logged."""
        requester = (origin.ipaddr, origin.port)
        if self.closed:              # closed while this waited its turn (a router's loop goes on)
            self.responder.drop(requester, 1, "the context is closed", outcome)
            return
        router = self.resolver.domain_routes.router_for(origin.domain)
        if router is None:
            if time.monotonic() < deadline:
                self.loop.call_later(ROUTE_RETRY, self._respond_routed, origin, data, deadline, outcome)
            else:
                self.responder.drop(requester, 1, f"no router in this domain reaches domain {origin.domain} "
                                                  f"(waited {ROUTE_WAIT:g} s)", outcome)
            return
        try:
            address, destination = self._unicast_route(origin.domain, origin.ipaddr, origin.port,
                                                       f"TCP:{origin.domain}:{origin.ipaddr}:{origin.port}")
            frames, first_sqn_at = uim_frames(None, data, destination, tidx=origin.qidx)
        except (OSError, ValueError, RuntimeError) as err:     # RuntimeError: closed meanwhile
            self.responder.drop(requester, 1, str(err), outcome)
            return
        self.responder.send_unicast(address, frames, first_sqn_at, response=True, outcome=outcome)

    # -- transports --------------------------------------------------------------------------------
    @staticmethod
    def _sequence_info(session, config: UMConfig) -> SequenceInfo:
        """The session's TSNI (router.um.sequence_info), started with its first source's options."""
        if session.sequence_info is None:
            get = config.get
            session.sequence_info = SequenceInfo(
                session, get("source", "transport_topic_sequence_number_info_interval") / 1000,
                get("source", "transport_topic_sequence_number_info_active_threshold"))
        return session.sequence_info

    def _session_for(self, transport: str, overflow: str, max_queue: int | None, hold_for_receiver: float = 0.0,
                     config: UMConfig | None = None):
        if transport not in ("tcp", "lbtipc", "lbtrm", "lbtru"):
            raise ValueError(f"source transport {transport} is not supported here (tcp, lbtrm, lbtru and lbtipc are)")
        config = config or self.config
        # Sources share a session when everything that shapes it is the same: its transport's
        # options (a topic's own, from a UM XML file, may differ from the context's).
        shaping = tuple(sorted((name, value) for (_, name), value in config.values.items()
                               if name.startswith(f"transport_{transport}") or name.startswith("implicit_batching")))
        # A multicast session has no receivers to hold for: what it sends before they join is
        # theirs only if it is still being repaired.
        hold = 0.0 if transport == "lbtrm" else hold_for_receiver
        key = (transport, overflow, hold, shaping)
        session = self.sessions.get(key)
        if session is None or session.closed:
            session = self.sessions[key] = self._new_session(transport, overflow, max_queue, hold, config)
        self.session_users[session] = self.session_users.get(session, 0) + 1
        return session

    def _new_session(self, transport: str, overflow: str, max_queue: int | None,
                     hold_for_receiver: float, config: UMConfig):
        get = config.get
        batching = {"batching_minimum_length": get("source", "implicit_batching_minimum_length"),
                    "batching_interval": get("source", "implicit_batching_interval") / 1000,
                    "overflow": overflow, "max_queue": max_queue or 8 * 1024 * 1024}
        if transport == "lbtipc":
            return LbtipcSourceSession(
                self.loop, id_low=get("context", "transport_lbtipc_id_low"),
                id_high=get("context", "transport_lbtipc_id_high"),
                window=get("source", "transport_lbtipc_transmission_window_size"),
                datagram_max_size=get("context", "transport_lbtipc_datagram_max_size"),
                sm_interval=get("source", "transport_lbtipc_sm_interval") / 1000,
                hold_for_receiver=hold_for_receiver, **batching)
        if transport == "lbtrm":
            return LbtrmSourceSession(
                self.loop, self.channel.interface, get("source", "transport_lbtrm_multicast_address") or self._next_lbtrm_group(config),
                get("context", "transport_lbtrm_destination_port"),
                get("context", "transport_lbtrm_source_port_low"), get("context", "transport_lbtrm_source_port_high"),
                ttl=get("context", "resolver_multicast_ttl"), **_repairing_options(config, "lbtrm"), **batching)
        if transport == "lbtru":
            return LbtruSourceSession(
                self.loop, resolve_interface(get("source", "transport_lbtru_interface")
                                             or get("context", "transport_lbtru_interface") or self.channel.interface),
                get("context", "transport_lbtru_port_low"), get("context", "transport_lbtru_port_high"),
                **_repairing_options(config, "lbtru"),
                client_activity_timeout=get("source", "transport_lbtru_client_activity_timeout") / 1000,
                hold_for_receiver=hold_for_receiver, **batching)
        return TcpSourceSession(
            self.loop, self.tcp_interface, get("context", "transport_tcp_port_low"),
            get("context", "transport_tcp_port_high"), fixed_port=get("source", "transport_tcp_port"),
            datagram_max_size=get("context", "transport_tcp_datagram_max_size"),
            nodelay=get("source", "transport_tcp_nodelay"), hold_for_receiver=hold_for_receiver,
            send_buffer=get("source", "transport_tcp_sender_socket_buffer"), **batching)

    def _next_lbtrm_group(self, config: UMConfig) -> str:
        """The group of a new LBT-RM session: the next of transport_lbtrm_multicast_address_low..high,
        from a place of this context's own (so contexts spread their sessions over the range)."""
        low = int(ipaddress.IPv4Address(config.get("context", "transport_lbtrm_multicast_address_low")))
        high = int(ipaddress.IPv4Address(config.get("context", "transport_lbtrm_multicast_address_high")))
        span = max(1, high - low + 1)
        if self.lbtrm_group_cursor is None:
            self.lbtrm_group_cursor = self.context_id % span
        chosen = low + self.lbtrm_group_cursor % span
        self.lbtrm_group_cursor += 1
        return str(ipaddress.IPv4Address(chosen))

    def _lbtrm_group(self, info: LbtrmInfo) -> LbtrmGroup:
        """The socket of an LBT-RM group and port, opened on first use and closed with its last session."""
        key = (info.mcast_addr, info.udp_dest_port)
        group = self.lbtrm_groups.get(key)
        if group is None or group.sock is None:
            group = self.lbtrm_groups[key] = LbtrmGroup(
                self.loop, self.channel.interface, info.mcast_addr, info.udp_dest_port,
                self.config.get("context", "transport_lbtrm_receiver_socket_buffer"),
                lambda closed: self.lbtrm_groups.pop(key, None) if self.lbtrm_groups.get(key) is closed else None)
        return group

    def _lbtrm_client(self, info: LbtrmInfo) -> LbtrmSessionClient:
        get = self.config.get
        window = ReceiveWindow(
            nak_initial_backoff=get("receiver", "transport_lbtrm_nak_initial_backoff_interval") / 1000,
            nak_backoff=get("receiver", "transport_lbtrm_nak_backoff_interval") / 1000,
            nak_suppress=get("receiver", "transport_lbtrm_nak_suppress_interval") / 1000,
            nak_generation=get("receiver", "transport_lbtrm_nak_generation_interval") / 1000,
            send_naks=get("receiver", "transport_lbtrm_send_naks"))
        return LbtrmSessionClient(self.loop, self._lbtrm_group(info), info.src_addr, info.src_ucast_port,
                                  info.session_id, self._client_closed,
                                  activity_timeout=get("receiver", "transport_lbtrm_activity_timeout") / 1000,
                                  window=window)

    def _lbtru_port(self) -> LbtruPort:
        """The context's LBT-RU receiving socket, opened on first use and closed with its last session."""
        port = self.lbtru_port
        if port is None or port.sock is None:
            get = self.config.get
            port = self.lbtru_port = LbtruPort(
                self.loop, resolve_interface(get("receiver", "transport_lbtru_interface")
                                             or get("context", "transport_lbtru_interface") or self.channel.interface),
                get("receiver", "transport_lbtru_port_low"), get("receiver", "transport_lbtru_port_high"),
                get("context", "transport_lbtru_receiver_socket_buffer"),
                lambda closed: setattr(self, "lbtru_port", None) if self.lbtru_port is closed else None)
        return port

    def _lbtru_client(self, info: LbtruInfo) -> LbtruSessionClient:
        get = self.config.get
        window = ReceiveWindow(
            nak_initial_backoff=0.0,            # unicast: no other receiver's NAK to wait for
            nak_backoff=get("receiver", "transport_lbtru_nak_backoff_interval") / 1000,
            nak_suppress=get("receiver", "transport_lbtru_nak_suppress_interval") / 1000,
            nak_generation=get("receiver", "transport_lbtru_nak_generation_interval") / 1000,
            send_naks=get("receiver", "transport_lbtru_send_naks"))
        return LbtruSessionClient(
            self.loop, self._lbtru_port(), info.ip, info.port, info.session_id or 0, self._client_closed,
            activity_timeout=get("receiver", "transport_lbtru_activity_timeout") / 1000,
            connect_interval=get("receiver", "transport_lbtru_connect_interval") / 1000,
            maximum_connect_attempts=get("receiver", "transport_lbtru_maximum_connect_attempts"),
            acknowledgement_interval=get("receiver", "transport_lbtru_acknowledgement_interval") / 1000,
            window=window)

    def _attach(self, candidate: Candidate, joined) -> bool:
        """Join a source: one stream per transport session, shared by this context's receivers."""
        info = candidate.transport
        key = candidate.session_key
        client = self.clients.get(key)
        if client is not None and client.closed:
            # Its last subscriber left and closed it (quietly): a new receiver needs a new stream.
            del self.clients[key]
            client = None
        if client is None:
            try:
                if isinstance(info, TcpInfo):
                    client = TcpSessionClient(self.loop, info.ip, info.port, info.session_id or 0,
                                              self._client_closed, receive_buffer=self.config.get(
                                                  "receiver", "transport_tcp_receiver_socket_buffer"))
                    client.loss_recovery_timeout = self.config.get(
                        "receiver", "transport_tcp_dro_loss_recovery_timeout") / 1000
                elif isinstance(info, LbtipcInfo):
                    client = LbtipcSessionClient(self.loop, info.host_id, info.session_id, info.xport_id,
                                                 self._client_closed, activity_timeout=self.config.get(
                                                     "receiver", "transport_lbtipc_activity_timeout") / 1000)
                    client.loss_recovery_timeout = self.config.get(
                        "receiver", "transport_lbtipc_dro_loss_recovery_timeout") / 1000
                elif isinstance(info, LbtrmInfo):
                    client = self._lbtrm_client(info)
                elif isinstance(info, LbtruInfo):
                    client = self._lbtru_client(info)
                else:
                    log.info("cannot join %s: transport not supported here", candidate.source_string)
                    return False
            except OSError as err:
                log.info("cannot join %s: %s", candidate.source_string, err)
                if isinstance(err, UnreadableSession):
                    self.stream_counters["transport_malformed"] += 1
                return False
            client.context_counters = self.stream_counters
            self.clients[key] = client
        client.subscribe(candidate.index, joined)
        joined.client = client
        if candidate.late_join is not None and not joined.raw:
            self._late_join_start(candidate, joined)
            self._otr_start(candidate, joined)
        return True

    def _detach(self, joined) -> None:
        self._late_join_end(joined)
        self._otr_end(joined)
        candidate = joined.candidate
        client = self.clients.get(candidate.session_key)
        if client is not None:
            client.unsubscribe(candidate.index, joined)

    def _client_closed(self, client: TcpSessionClient) -> None:
        if self.clients.get(client.key) is client:
            del self.clients[client.key]

    def _source_ended(self, receiver: Receiver, joined) -> None:
        self._late_join_end(joined)
        self._otr_end(joined)
        self.resolver.source_ended(receiver, joined)

    # -- closing -----------------------------------------------------------------------------------
    def _readvertise(self, source: Source) -> None:
        self._call(self.resolver.readvertise, source)

    def _close_source(self, source: Source, final_advertisements: int) -> None:
        session = source.session
        session.flush()
        self._call(self._withdraw_late_join, source)
        if session.sequence_info is not None:
            self._call(session.sequence_info.remove, source.index)
        self._call(self.resolver.remove_source, source, final_advertisements)
        self.session_indexes.get(session, set()).discard(source.index)
        users = self.session_users.get(session, 1) - 1
        self.session_users[session] = users
        if users <= 0:
            self.session_users.pop(session, None)
            self.session_indexes.pop(session, None)
            session.close()

    def _close_receiver(self, receiver: Receiver) -> None:
        def close() -> None:
            receiver.closed = True
            for joined in list(receiver.joined.values()):
                self._detach(joined)
            receiver.joined.clear()
            self.resolver.remove_receiver(receiver)
        self._call(close)

    def _close_wildcard(self, wildcard: WildcardReceiver) -> None:
        def close() -> None:
            wildcard.closed = True
            for receiver in wildcard.topics.values():
                receiver.closed = True
                for joined in list(receiver.joined.values()):
                    self._detach(joined)
                self.resolver.remove_receiver(receiver)
            self.resolver.remove_wildcard(wildcard)
        self._call(close)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.monitor is not None:
            self._call(self.monitor.close)
        for source in [s for sources in self.resolver.sources.values() for s in sources]:
            source.close()
        for receivers in list(self.resolver.receivers.values()):
            for receiver in list(receivers):
                receiver.close()
        for wildcard in list(self.resolver.wildcards):
            wildcard.close()

        if self.own_loop and not self.loop.in_loop_thread():
            self.responder.wait_sent(5.0)     # answers given just before closing still go out
            # The sources' final advertisements, spaced out, go out before the loop stops.
            finals_sent = threading.Event()
            self._call(self.resolver.after_final_advertisements, finals_sent.set)
            finals_sent.wait(FINALS_WAIT)

        def shutdown() -> None:
            for client in list(self.clients.values()):
                client.close(notify=False)
            self.resolver.close()
            self.channel.stop_receiving()
            if self.own_loop:
                self.channel.close()
            else:
                # A shared loop (a router's) goes on: the resolver socket stays open until the
                # last final advertisement went out on it.
                self.resolver.after_final_advertisements(self.channel.close)
            if self.immediate is not None:
                self.immediate.close()
            self.responder.close()
            if self.request_port is not None:
                self.request_port.close()
            self._uim_pieces_expiry.close()
        self._call(shutdown)
        self.requests.close_all()
        for session in list(self.session_users):
            session.close()
        if self.own_loop:
            self.loop.close()

    def _call(self, callback: Callable, *args):
        """Run on the context's loop thread (where all resolver state lives)."""
        return self.loop.call_and_wait(callback, *args)

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _hand(receiver, message: Message) -> None:
    """An immediate message to a (wildcard) receiver, the way it takes its messages."""
    if receiver.on_batch is not None:
        receiver.on_batch([message])
    elif receiver.on_message is not None:
        receiver.on_message(message)
