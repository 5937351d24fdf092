"""The UM options a portal's two contexts run with, and which topic resolution domain that puts them in.

Layers, later winning (spec/dro.md §1.3, §1.4; seed 001 §4.1):
  1. the portal's <lbm-config> when it is a plain-text file;
  2. the portal's <lbm-attributes>;
  3. the daemon's <xml-config>, for application "tnwgd" and the context's name
     ("Options in <lbm-attributes> do NOT override defaults set via <xml-config>");
  4. the portal's <lbm-config> when it is a UM XML file, selected the same way.
A context's name is <source-context-name> / <receiver-context-name>, else the `context_name`
option from layers 1-2, else none (which selects the unnamed <context>).

Two contexts are in one domain when they share a unicast resolver daemon, or use the same resolver
multicast group and port on interfaces that can reach each other (spec/dro.md §2.5: "two endpoints of
one DRO on the same TRD" is unsupported).
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from router.config.model import DaemonConfig, EndpointConfig, PeerConfig
from router.um.config import ConfigError, UMConfig, load_file
from router.um.xml_config import (ROUTER_APPLICATION, UMXmlDocument, children, content_digest, is_xml_config,
                                  load_xml_config, read_document, topic_options)

Portal = EndpointConfig | PeerConfig


def portal_um_configs(portal: Portal, daemon: DaemonConfig) -> tuple[UMConfig, UMConfig]:
    """(source context options, receive context options) of one portal."""
    base = UMConfig()
    xml_files = [daemon.xml_config] if daemon.xml_config else []
    if portal.lbm_config is not None:
        _check_readable(portal)
        if is_xml_config(portal.lbm_config):
            xml_files.append(portal.lbm_config)
        else:
            _load_plain(portal, base)
    for scope, name, value in portal.lbm_attributes:
        base.set(scope, name, value, portal.where("lbm-attributes"))
    provide = getattr(portal, "late_join_provide", None)
    if provide is not None:
        base.set("source", "late_join", "1" if provide == "always" else "0", portal.where("late-join"))
    default_name = base.get("context", "context_name") or None
    source_name = portal.source_context_name or default_name
    documents = tuple(_read(portal, path) for path in xml_files)
    source = _context(portal, base, documents, source_name)
    _check_topics(portal, source, documents, source_name)
    # Proxy sources belong to the source context (the DRO's src_ctx): its name selects their
    # templates and per-topic options, its options are theirs where no topic says otherwise.
    portal.topic_um = TopicOptions(tuple(xml_files), source_name, source, content_digest(documents), documents)
    return (source, _context(portal, base, documents, portal.receiver_context_name or default_name))


@dataclass(frozen=True)
class TopicOptions:
    """The options of one topic's proxy source: the portal's source context's, then what the UM
    XML configuration files say for that topic under that context's <sources> (seed 001 §4.1:
    "assign unique UM attributes to the topics ... used for the proxy sources ... the gateway
    creates")."""
    xml_files: tuple[Path, ...]
    context_name: str | None
    base: UMConfig
    # The files' contents, so a reload sees an edit that changes only some topic's options (the
    # portal's own options, in `base`, stay the same) and restarts the portals that use them.
    digest: str = field(default="")
    # The files as they were read when the configuration was loaded: a running portal creates
    # proxy sources long after, and an edit on disk (valid or not) reaches it through a reload,
    # which restarts it, never behind the back of the configuration it runs.
    documents: tuple[UMXmlDocument, ...] = field(default=(), compare=False, repr=False)

    def for_topic(self, topic: str) -> UMConfig:
        if not self.xml_files:
            return self.base
        config = self.base.copy()
        for document in self.documents or self.xml_files:
            config = topic_options(document, ROUTER_APPLICATION, self.context_name, topic, into=config)
        return config


def _read(portal: Portal, path: Path) -> UMXmlDocument:
    try:
        return read_document(path)
    except ConfigError as err:
        raise _of_portal(portal, err) from None


def _context(portal: Portal, base: UMConfig, documents: tuple[UMXmlDocument, ...], name: str | None) -> UMConfig:
    config = base.copy()
    for document in documents:
        try:
            load_xml_config(document, ROUTER_APPLICATION, name, into=config)
        except ConfigError as err:
            raise _of_portal(portal, err) from None
    if name:
        config.set("context", "context_name", name)
    try:
        config.check_ranges()
    except ConfigError as err:
        raise _of_portal(portal, err) from None
    return config


def _check_topics(portal: Portal, source: UMConfig, documents: tuple[UMXmlDocument, ...], name: str | None) -> None:
    """Each <topic> under the source context's <sources> over that context's options, as a proxy
    source of a topic it selects runs with them: a mistake in one is refused at load, not given to
    proxy sources made long after start (a pattern's topics cannot be listed, so each entry alone)."""
    for document in documents:
        application = document.application(ROUTER_APPLICATION)
        for _, context in document.contexts(application, name) if application is not None else ():
            for entry in (topic for sources in children(context, "sources") for topic in children(sources, "topic")):
                config = source.copy()
                document.apply_templates(config, entry, "source")
                for options in children(entry, "options"):
                    document.apply(config, options, "source")
                try:
                    config.check_ranges()
                except ConfigError as err:
                    raise _of_portal(portal, err) from None


def _of_portal(portal: Portal, err: ConfigError) -> ConfigError:
    return ConfigError(f"{err.reason} (UM configuration of portal '{portal.name}')", err.path, err.line, err.element)


def _check_readable(portal: Portal) -> None:
    path = portal.lbm_config
    if not path.is_file():
        problem = "no such file" if not path.exists() else "not a regular file"
        raise ConfigError(f"portal '{portal.name}': cannot read lbm-config file '{path}': {problem}",
                          *portal.where("lbm-config"), "lbm-config")


def _load_plain(portal: Portal, into: UMConfig) -> None:
    """The UM reader's error, named by the .cfg file and line, with the portal it belongs to."""
    try:
        load_file(portal.lbm_config, into=into)
    except ConfigError as err:
        reason = err.reason
        option = _option_on_line(err.path, err.line)
        if option and option not in reason:
            reason = f"{option}: {reason}"
        path, line = portal.where("lbm-config")
        raise ConfigError(f"{reason} (lbm-config of portal '{portal.name}', {path}:{line})",
                          err.path, err.line) from None


def _option_on_line(path: str | None, line: int | None) -> str | None:
    try:
        text = Path(path).read_bytes().splitlines()[line - 1].decode(errors="replace")
    except (OSError, TypeError, IndexError):
        return None
    parts = text.split("#", 1)[0].split()
    # A line of another encoding (UTF-16's NULs between letters) names no option worth showing.
    return parts[1] if len(parts) >= 2 and parts[1].isprintable() else None


# ------------------------------------------------------------------------------ domains

def resolver_identity(config: UMConfig) -> tuple:
    """('unicast', daemons) or ('multicast', group, port, interface) of a context's topic resolution."""
    daemons = config.get("context", "resolver_unicast_daemon")
    if daemons:     # the daemons make the domain, whichever interface a context reaches them from
        return ("unicast", frozenset((daemon.host, daemon.port) for daemon in daemons))
    group = (config.get("context", "resolver_multicast_incoming_address")
             or config.get("context", "resolver_multicast_address"))
    port = (config.get("context", "resolver_multicast_incoming_port")
            or config.get("context", "resolver_multicast_port"))
    return ("multicast", group, port, config.get("context", "resolver_multicast_interface"))


def same_domain(a: UMConfig, b: UMConfig) -> bool:
    first, second = resolver_identity(a), resolver_identity(b)
    if first[0] != second[0]:
        return False
    if first[0] == "unicast":
        return bool(first[1] & second[1])
    return first[1:3] == second[1:3] and _interfaces_overlap(first[3], second[3])


def describe_resolver(config: UMConfig) -> str:
    identity = resolver_identity(config)
    if identity[0] == "unicast":
        return "unicast resolver " + ", ".join(f"{h}:{p}" for h, p in sorted(identity[1]))
    return f"resolver {identity[1]}:{identity[2]} on {identity[3]}"


def _interfaces_overlap(a: str | None, b: str | None) -> bool:
    """Multicast on two disjoint networks is two domains; unknown interfaces are assumed shared."""
    try:
        return ipaddress.IPv4Network(a, strict=False).overlaps(ipaddress.IPv4Network(b, strict=False))
    except (TypeError, ValueError):
        return True
