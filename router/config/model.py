"""The router's configuration as plain dataclasses, with the DRO's defaults (spec/dro.md §1).

Units are the DRO's: milliseconds unless a name says otherwise (`context_query.timeout` is in
seconds, `log.size` in millions of bytes). Paths are absolute, resolved against the configuration
file's directory.

`line` and `locations` say where a thing was written (for error messages); they are excluded from
equality, so two configurations that differ only in layout compare equal (reload relies on it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from router.um.config import UMConfig

Location = tuple[str, int | None]           # (file, line)


def _where() -> dict[str, Location]:
    return field(default_factory=dict, compare=False, repr=False)


# ------------------------------------------------------------------------------------ daemon

@dataclass
class LogConfig:
    type: str = "console"                   # file | syslog | console
    path: Path | None = None                # the log file when type == "file"
    frequency: str = "disable"              # disable | daily | hourly | test
    size: int = 0                           # roll at this many millions of bytes; 0 = never


@dataclass
class HashMapConfig:
    hash_function: str = "murmur2"
    size: int = 131111


@dataclass
class MonitorConfig:
    interval: int = 0                       # seconds; 0 = disabled
    transport_module: str = "lbm"
    transport_options: dict[str, str] = field(default_factory=dict)
    format_module: str = "csv"
    format_options: dict[str, str] = field(default_factory=dict)


@dataclass
class WebMonitorConfig:
    host: str                               # "0.0.0.0" when the file says "*"
    port: int


@dataclass
class RouteInfo:
    propagation_interval: int = 1000
    check_interval: int = 750
    timeout: int = 4000
    max_hop_count: int = 100


@dataclass
class RouteRecalculation:
    backoff_interval: int = 5000
    warning_interval: int = 10000


@dataclass
class WorkerGroup:
    """<worker-group>: portals that share one worker process."""
    portals: tuple[str, ...]
    where: dict[str, Location] = field(default_factory=dict, compare=False)   # portal name -> its <portal-name>


@dataclass
class DaemonConfig:
    name: str = ""                          # defaults to the configuration file's stem
    log: LogConfig = field(default_factory=LogConfig)
    uid: int | None = None
    gid: int | None = None
    pidfile: Path | None = None
    lbm_license_file: Path | None = None
    topicmap: HashMapConfig = field(default_factory=HashMapConfig)
    patternmap: HashMapConfig = field(default_factory=HashMapConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    web_monitor: WebMonitorConfig | None = None
    admin: str | None = None                # ZeroMQ endpoint overriding ipc://RUNTIME/NAME.admin
    xml_config: Path | None = None
    xml_config_digest: str = ""             # content hash, so an edited file counts as a change
    route_info: RouteInfo = field(default_factory=RouteInfo)
    route_recalculation: RouteRecalculation = field(default_factory=RouteRecalculation)
    worker_scheduling: str = "adaptive"     # router.worker.scheduling: adaptive | normal
    cpu_latency_limit: int | None = None    # µs; router.cpu_latency (None: no limit asked for)
    worker_groups: list[WorkerGroup] = field(default_factory=list)
    line: int | None = field(default=None, compare=False)
    locations: dict[str, Location] = _where()


# ------------------------------------------------------------------------------ access control

@dataclass
class Condition:
    """One ACE condition: `kind` is the element name (topic, pcre-pattern, transport, source-ip ...)."""
    kind: str
    value: str
    comparison: str | None = None           # eq | ne | lt | le | gt | ge (long spellings normalised)


@dataclass
class Ace:
    match: str                              # accept | reject
    conditions: list[Condition] = field(default_factory=list)


@dataclass
class Acl:
    inbound: list[Ace] = field(default_factory=list)
    outbound: list[Ace] = field(default_factory=list)


# ------------------------------------------------------------------------ endpoint tuning

@dataclass
class RateLimit:
    bps: int
    objects_per_second: int


@dataclass
class UseQuery:
    periodic_interval: int = 300000
    timeout: int = 3000
    max: int = 5
    rate_limit: RateLimit = field(default_factory=lambda: RateLimit(500000, 500))


@dataclass
class IntervalBounds:
    min_interval: int
    max_interval: int
    rate_limit: RateLimit


def _interest() -> IntervalBounds:
    return IntervalBounds(1000, 60000, RateLimit(500000, 0))


@dataclass
class InitialRequest:
    periodic_interval: int = 1000
    duration: int = 10


@dataclass
class TopicResolutionConfig:
    initial_request: InitialRequest = field(default_factory=InitialRequest)
    topic_use_query: UseQuery = field(default_factory=UseQuery)
    pattern_use_query: UseQuery = field(default_factory=UseQuery)
    remote_topic_interest: IntervalBounds = field(default_factory=_interest)
    remote_pattern_interest: IntervalBounds = field(default_factory=_interest)
    domain_route: IntervalBounds = field(default_factory=lambda: IntervalBounds(100, 1000, RateLimit(0, 50)))


@dataclass
class RemoteTopic:
    check_interval: int = 90000
    max_topics: int = 100
    timeout: int = 300000


@dataclass
class RemotePattern:
    check_interval: int = 90000
    max_patterns: int = 100
    timeout: int = 300000


@dataclass
class SqnWindow:
    size: int = 16384
    increment: int = 2048


@dataclass
class ContextQuery:
    periodic_interval: int = 300000
    max_contexts: int = 20
    interval: int = 200
    timeout: int = 900                      # seconds


# ------------------------------------------------------------------------------- peer links

@dataclass
class Initiator:
    address: str
    port: int
    reconnect_interval: int = 5000


@dataclass
class Acceptor:
    listen_port: int
    where: Location | None = field(default=None, compare=False, repr=False)    # its <listen-port>


@dataclass
class TlsConfig:
    certificate: Path
    certificate_key: Path
    certificate_key_password: str | None = None
    trusted_certificates: Path | None = None
    cipher_suites: str | None = None
    # The files' contents (router.config.validate), so a reload sees a certificate rotated in place
    # and restarts the peer, whose worker reads them once.
    digest: str = field(default="", repr=False)


@dataclass
class SingleTcpLink:
    """The TCP link of a peer portal: exactly one of `initiator` / `acceptor` for <single-tcp>.

    `dual` marks the eliminated <tcp> form (seed 001 §2.9): this side listens on
    `acceptor.listen_port` AND connects to its companion (`initiator`), one connection per
    direction: data is sent on the connection this side opened and received on the one it
    accepted. Both are set in that case.
    """
    initiator: Initiator | None = None
    acceptor: Acceptor | None = None
    interface: str | None = None
    receive_buffer: int = 0                 # 0 = OS autotuning
    send_buffer: int = 0
    keepalive: bool = False                 # SO_KEEPALIVE
    nodelay: bool = False                   # TCP_NODELAY
    compression: str | None = None          # "lz4" or None
    tls: TlsConfig | None = None
    dual: bool = False


@dataclass
class UdpLink:
    port: int
    receive_buffer: int = 8388608
    send_buffer: int = 1048576
    multiple_receive_max_datagrams: int = 0
    coalesce_threshold: int = 15
    transmission_window_size: int = 25165824
    transmission_window_limit: int = 0
    rate_limit_data: int = 10000000         # bits/s
    rate_limit_retransmit: int = 5000000    # bits/s
    rate_limit_interval: int = 100
    nak_initial_backoff_interval: int = 0
    nak_backoff_interval: int = 200
    nak_suppress_interval: int = 1000
    nak_generation_interval: int = 10000
    send_naks: bool = True
    nak_ignore_interval: int = 100
    session_min_interval: int = 200
    session_max_interval: int = 10000
    session_activity_timeout: int = 60000
    connect_attempt_interval: int = 200
    connect_max_attempts: int = 10
    where: Location | None = field(default=None, compare=False, repr=False)    # its <port>


@dataclass
class GatewayKeepalive:
    interval: int = 5000                    # 0 = no keepalives
    timeout: int = 15000
    idle: bool = True                       # only when nothing was sent or received in `interval`


@dataclass
class Batching:
    min_length: int = 8192
    batch_interval: int = 200


# ---------------------------------------------------------------------------------- portals

@dataclass(kw_only=True)
class PortalConfig:
    """What endpoints and peers share (spec/dro.md §1.4)."""
    name: str
    cost: int = 1
    source_deletion_delay: int = 1000
    max_queue: int = 1000000                # bytes
    smart_batch: bool = False
    lbm_config: Path | None = None
    # (scope, name, value), in the file's order. Not compared: their effect is, in source_um and
    # receiver_um below, so options written in another order restart no portal.
    lbm_attributes: list[tuple[str, str, str]] = field(default_factory=list, compare=False)
    acl: Acl | None = None                  # None = forward everything
    source_context_name: str | None = None
    receiver_context_name: str | None = None
    sqn_window: SqnWindow = field(default_factory=SqnWindow)
    context_query: ContextQuery = field(default_factory=ContextQuery)
    # The effective UM options of the portal's two contexts (lbm-config, lbm-attributes, xml-config),
    # filled in by validation; part of equality so that an edited lbm-config file is a change.
    source_um: UMConfig | None = field(default=None, repr=False)
    receiver_um: UMConfig | None = field(default=None, repr=False)
    topic_um: object | None = field(default=None, repr=False)     # portal_um.TopicOptions (once validated)
    line: int | None = field(default=None, compare=False)
    locations: dict[str, Location] = _where()

    kind = "portal"

    def where(self, element: str) -> Location:
        """(file, line) of a child element, else of the portal itself."""
        return self.locations.get(element) or self.locations.get(self.kind) or ("<config>", self.line)


@dataclass(kw_only=True)
class EndpointConfig(PortalConfig):
    """A portal attached to one topic resolution domain (spec/dro.md §1.5)."""
    domain_id: int
    hotlink_index: int = 0
    topic_resolution: TopicResolutionConfig = field(default_factory=TopicResolutionConfig)
    remote_topic: RemoteTopic = field(default_factory=RemoteTopic)
    remote_pattern: RemotePattern = field(default_factory=RemotePattern)
    # The eliminated <late-join provide=... forward=...> (seed 001 §5.2.2): "always" / "never" set
    # the portal's proxy sources' late_join option; None (or "source") leaves it to the UM options.
    # Proxy sources that keep nothing relay requests to an origin that offers late join (the DRO's
    # way; not with "never"); `forward` makes those that retain relay what they no longer have.
    late_join_provide: str | None = None
    late_join_forward: bool = True

    kind = "endpoint"


@dataclass(kw_only=True)
class PeerConfig(PortalConfig):
    """A portal linked to a companion peer portal on another router (spec/dro.md §1.6)."""
    link: SingleTcpLink
    udp: UdpLink | None = None
    sourcemap_size: int = 131072
    max_datagram: int = 65500
    batching: Batching = field(default_factory=Batching)
    gateway_keepalive: GatewayKeepalive = field(default_factory=GatewayKeepalive)

    kind = "peer"

    @property
    def udp_path(self) -> UdpLink | None:
        """The <udp> data path the link uses: none with <tls> or <compression> (this router has
        neither DTLS nor compression on UDP, so such a link keeps its data on TCP, warned at load)."""
        link = self.link
        return None if link.tls is not None or link.compression is not None else self.udp


@dataclass
class GatewayConfig:
    daemon: DaemonConfig
    portals: list[EndpointConfig | PeerConfig]
    path: Path
    text: str | None = field(default=None, repr=False, compare=False)    # the file as read: what runs

    @property
    def endpoints(self) -> list[EndpointConfig]:
        return [p for p in self.portals if isinstance(p, EndpointConfig)]

    @property
    def peers(self) -> list[PeerConfig]:
        return [p for p in self.portals if isinstance(p, PeerConfig)]

    def portal(self, name: str) -> EndpointConfig | PeerConfig:
        for portal in self.portals:
            if portal.name == name:
                return portal
        raise KeyError(name)
