"""Checks that need more than one element: names, domains, files on disk, the UM options of portals.

Values inside one element were range-checked while the model was built (build_*.py); what remains
here is what the DRO rejects across the file (spec/dro.md §1.5, §2.5): duplicate portal names, two
endpoints on one domain, two domain-ids for one domain, one domain-id for two domains, and every UM
configuration file a portal names. Each failure is a ConfigError naming file, line and element.
"""
from __future__ import annotations

import hashlib
import ipaddress
import logging
from pathlib import Path

from router.config.model import DaemonConfig, EndpointConfig, GatewayConfig, PeerConfig
from router.config.portal_um import describe_resolver, portal_um_configs, same_domain
from router.portals.peer_stream import tls_context
from router.um.config import ConfigError
from router.um.xml_config import check_xml_config, content_digest

Portal = EndpointConfig | PeerConfig
log = logging.getLogger("router.config")


def validate_gateway(config: GatewayConfig) -> None:
    """Raise the first cross-element mistake; fill in each portal's effective UM options."""
    _check_portal_count(config)
    _check_unique_names(config)
    _check_worker_groups(config)
    for peer in config.peers:
        _check_link(peer)
    _check_listening_ports(config.peers)
    _check_xml_config(config.daemon)
    for portal in config.portals:
        portal.source_um, portal.receiver_um = portal_um_configs(portal, config.daemon)
    _check_domains(config.endpoints)


# Each portal has a consumer slot in every other portal's ring (router.worker.datapath).
MAX_PORTALS = 16


def _check_portal_count(config: GatewayConfig) -> None:
    if len(config.portals) < 2:
        log.warning("%s: only one portal; a router forwards between two or more", config.path)
    if len(config.portals) > MAX_PORTALS:
        extra = config.portals[MAX_PORTALS]
        raise ConfigError(f"{len(config.portals)} portals: a router has at most {MAX_PORTALS} (the "
                          f"{MAX_PORTALS + 1}th is {extra.kind} '{extra.name}')", *extra.where(extra.kind), extra.kind)


def _check_unique_names(config: GatewayConfig) -> None:
    seen: dict[str, Portal] = {}
    for portal in config.portals:
        first = seen.get(portal.name)
        if first is not None:
            raise ConfigError(f"portal name '{portal.name}' is already used by the {first.kind} "
                              f"at {_at(first, portal, 'name')}; portal names must be unique",
                              *portal.where("name"), "name")
        seen[portal.name] = portal


def _check_worker_groups(config: GatewayConfig) -> None:
    names = {portal.name for portal in config.portals}
    for group in config.daemon.worker_groups:
        for name, (path, line) in group.where.items():
            if name not in names:
                raise ConfigError(f"worker group names '{name}', which is not a portal of this router "
                                  f"(portals: {', '.join(sorted(names))})", path, line, "portal-name")


def _check_link(peer: PeerConfig) -> None:
    link = peer.link
    if link.initiator is None and link.acceptor is None:
        raise ConfigError(f"peer '{peer.name}' needs an <initiator> or an <acceptor>",
                          *peer.where("single-tcp"), "single-tcp")
    if link.tls is not None:
        where = peer.where("single-tcp" if not link.dual else "tcp")
        for path in (link.tls.certificate, link.tls.certificate_key, link.tls.trusted_certificates):
            if path is not None and not path.is_file():
                raise ConfigError(f"peer '{peer.name}': TLS file '{path}' does not exist", *where, "tls")
        try:
            link.tls.digest = _digest(p for p in (link.tls.certificate, link.tls.certificate_key,
                                                   link.tls.trusted_certificates) if p is not None)
        except OSError as err:
            raise ConfigError(f"peer '{peer.name}': cannot read TLS file '{err.filename}': {err.strerror}",
                              *where, "tls") from None
        # The side this router takes does not change what can be wrong with the files: a key
        # that does not match, a wrong password, a cipher list OpenSSL cannot use.
        try:
            tls_context(link.tls, server_side=link.initiator is None)
        except ValueError as err:
            raise ConfigError(f"peer '{peer.name}': {err}", *where, "tls") from None
    if peer.udp is not None:
        _check_udp(peer)


def _digest(paths) -> str:
    sha = hashlib.sha256()
    for path in paths:
        sha.update(Path(path).read_bytes())
    return sha.hexdigest()


def _check_udp(peer: PeerConfig) -> None:
    """What the UDP data path (router.portals.peer_udp) cannot do, refused rather than done badly."""
    link, where = peer.link, peer.where("udp")
    if link.dual:
        raise ConfigError(f"peer '{peer.name}': <udp> needs a <single-tcp> link (the eliminated <tcp> form has "
                          f"two connections; the UDP path belongs to one)", *where, "udp")


def _check_listening_ports(peers: list[PeerConfig]) -> None:
    """Two peers binding one port (TCP listen-port, or UDP port) on addresses that can be the same:
    the second could never open its socket and would fail again at every retry."""
    bound: list[tuple[str, int, str | None, PeerConfig, tuple]] = []
    for peer in peers:
        link, wanted = peer.link, []
        if link.acceptor is not None:
            wanted.append(("TCP", link.acceptor.listen_port, "listen-port", link.acceptor.where))
        if peer.udp is not None:
            wanted.append(("UDP", peer.udp.port, "port", peer.udp.where))
        for protocol, port, element, where in wanted:
            where = where or peer.where(peer.kind)
            for other_protocol, other_port, other_interface, other, other_where in bound:
                if (other_protocol, other_port) == (protocol, port) \
                        and _may_share_address(other_interface, link.interface):
                    place = f"line {other_where[1]}" if other_where[0] == where[0] else f"{other_where[0]}:{other_where[1]}"
                    raise ConfigError(f"peer '{peer.name}': {protocol} port {port} is already bound by peer "
                                      f"'{other.name}' ({place}) on the same address; each needs a port of its own",
                                      *where, element)
            bound.append((protocol, port, link.interface, peer, where))


def _may_share_address(a: str | None, b: str | None) -> bool:
    """No <interface> is every address; two interfaces are one address when their networks overlap."""
    if a is None or b is None:
        return True
    return ipaddress.IPv4Network(a, strict=False).overlaps(ipaddress.IPv4Network(b, strict=False))


def _check_xml_config(daemon: DaemonConfig) -> None:
    if daemon.xml_config is None:
        return
    where = daemon.locations.get("xml-config", (None, daemon.line))
    if not daemon.xml_config.is_file():
        problem = "no such file" if not daemon.xml_config.exists() else "not a regular file"
        raise ConfigError(f"cannot read xml-config file '{daemon.xml_config}': {problem}",
                          *where, "xml-config")
    check_xml_config(daemon.xml_config)
    daemon.xml_config_digest = content_digest([daemon.xml_config])


def _check_domains(endpoints: list[EndpointConfig]) -> None:
    """One router, one endpoint per domain; one domain, one domain-id (spec/dro.md §1.5, §2.5)."""
    for index, endpoint in enumerate(endpoints):
        for other in endpoints[:index]:
            shared = same_domain(other.receiver_um, endpoint.receiver_um)
            if not shared and other.domain_id != endpoint.domain_id:
                continue
            raise ConfigError(_domain_conflict(other, endpoint, shared),
                              *endpoint.where("domain-id"), "domain-id")


def _domain_conflict(first: EndpointConfig, second: EndpointConfig, shared: bool) -> str:
    where = _at(first, second, "endpoint")
    mine, theirs = describe_resolver(second.receiver_um), describe_resolver(first.receiver_um)
    if shared and first.domain_id == second.domain_id:
        return (f"endpoints '{first.name}' ({where}) and '{second.name}' are both on domain "
                f"{second.domain_id} ({mine}); a router may have only one endpoint per topic "
                f"resolution domain")
    if shared:
        return (f"domain-id {second.domain_id} differs from domain-id {first.domain_id} of endpoint "
                f"'{first.name}' ({where}), which is on the same topic resolution domain ({mine}); "
                f"one domain has one domain-id")
    return (f"domain-id {second.domain_id} is already used by endpoint '{first.name}' ({where}) for "
            f"another topic resolution domain ({theirs}, here {mine}); each domain needs its own "
            f"domain-id")


def _at(first: Portal, second: Portal, element: str) -> str:
    """'line 12', or 'file.xml:12' when the two come from different (included) files."""
    path, line = first.where(element)
    return f"line {line}" if path == second.where(element)[0] else f"{path}:{line}"
