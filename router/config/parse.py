"""Reading a tnw-gateway configuration file: XML, XInclude, the DTD, the model, the semantic checks.

    config = load_gateway_config("two-lans.xml")      # GatewayConfig, or ConfigError
    validate_structure("two-lans.xml")                 # `tnwgd -v`: the DTD only

Every error is a ConfigError whose text reads `file:line: <element>: message`; the file is the
included one when the mistake is in an XInclude'd part.
"""
from __future__ import annotations

from pathlib import Path

from router.config.build_daemon import build_daemon
from router.config.build_portal import build_endpoint, build_peer
from router.config.dtd import check_against_dtd
from router.config.model import GatewayConfig
from router.config.reader import ElementReader
from router.config.validate import validate_gateway
from router.um.xml_config import XmlFile, children


def read_gateway_file(path: str | Path) -> XmlFile:
    """Parse (with line numbers and XIncludes) and check against the DTD."""
    source = XmlFile(path)
    check_against_dtd(source)
    return source


def validate_structure(path: str | Path) -> None:
    """What `tnwgd -v` checks: well-formed XML that follows the DTD."""
    read_gateway_file(path)


def build_gateway(source: XmlFile) -> GatewayConfig:
    """The model of a DTD-valid file, each value range-checked; no cross-element checks yet."""
    path = Path(source.path).resolve()
    reader = ElementReader(source, path.parent)
    root = source.root
    daemon = build_daemon(reader, reader.child(root, "daemon"), path)
    portals = []
    for element in children(reader.child(root, "portals")):
        portals.append(build_endpoint(reader, element) if element.tag == "endpoint"
                       else build_peer(reader, element))
    return GatewayConfig(daemon=daemon, portals=portals, path=path, text=source.text)


def load_gateway_config(path: str | Path) -> GatewayConfig:
    """The validated configuration, with each portal's effective UM options filled in."""
    config = build_gateway(read_gateway_file(path))
    validate_gateway(config)
    return config
