"""The router's configuration: the tnw-gateway XML file, its DTD, the model, validation, diffs.

    from router.config import load_gateway_config, diff_configs, dump_dtd

This package owns reading and checking the configuration (`tnwgd -d` / `-v`, start, reload); it
never acts on it. UM option files named by portals are read with router.um.config and
router.um.xml_config, so a portal's contexts get exactly the options an application would.
"""
from router.config.diff import ConfigDiff, diff_configs
from router.config.dtd import dump_dtd
from router.config.model import (Acceptor, Ace, Acl, Condition, DaemonConfig, EndpointConfig,
                                 GatewayConfig, Initiator, PeerConfig, SingleTcpLink)
from router.config.parse import load_gateway_config, validate_structure
from router.config.portal_um import portal_um_configs, same_domain
from router.um.config import ConfigError

__all__ = ["Acceptor", "Ace", "Acl", "Condition", "ConfigDiff", "ConfigError", "DaemonConfig",
           "EndpointConfig", "GatewayConfig", "Initiator", "PeerConfig", "SingleTcpLink",
           "diff_configs", "dump_dtd", "load_gateway_config", "portal_um_configs", "same_domain",
           "validate_structure"]
