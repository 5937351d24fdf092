"""Entities a configuration file's own DOCTYPE declares are expanded, in the router's XML and in UM
XML files, as libxml2 expands them for the DRO and UM; external entities and entity bombs are
refused with an error naming the file, and nothing outside the file is read."""
from __future__ import annotations

import pytest

from router.config import ConfigError, load_gateway_config
from router.um.xml_config import load_xml_config

LAN2 = "<endpoint><name>LAN2</name><domain-id>2</domain-id><lbm-config>lan2.cfg</lbm-config></endpoint>"


def _gateway(write_gateway, doctype: str, portals: str, daemon: str = ""):
    path = write_gateway(portals, daemon=daemon)
    path.write_text(f"<?xml version=\"1.0\"?>\n<!DOCTYPE tnw-gateway [\n{doctype}\n]>\n{path.read_text()}")
    return path


def test_entities_in_the_gateway_file_are_expanded_in_text_and_markup(write_gateway):
    path = _gateway(write_gateway, f"<!ENTITY site \"NYC\">\n<!ENTITY lan2 '{LAN2}'>",
                    "<endpoint><name>&site;-LAN1</name><domain-id>1</domain-id>"
                    "<lbm-config>lan1.cfg</lbm-config></endpoint>\n&lan2;",
                    daemon="<name>&site;-router</name>")
    config = load_gateway_config(path)
    assert config.daemon.name == "NYC-router"
    assert [p.name for p in config.portals] == ["NYC-LAN1", "LAN2"]
    assert config.portal("LAN2").domain_id == 2


def _um(tmp_path, doctype: str, context_body: str):
    path = tmp_path / "um.xml"
    path.write_text(f'<?xml version="1.0"?>\n<!DOCTYPE um-configuration [\n{doctype}\n]>\n'
                    f'<um-configuration version="1.0">\n'
                    f'<applications><application name="tnwgd"><contexts><context>\n{context_body}\n'
                    f'</context></contexts></application></applications>\n</um-configuration>\n')
    return path


def test_entities_in_a_um_xml_file_are_expanded(tmp_path):
    shared = '<option name="resolver_multicast_ttl" default-value="7"/>'
    path = _um(tmp_path, f"<!ENTITY port \"13965\">\n<!ENTITY shared '{shared}'>",
               '<options type="context">&shared;'
               '<option name="resolver_multicast_port" default-value="&port;"/></options>')
    config = load_xml_config(path, "tnwgd")
    assert config.get("context", "resolver_multicast_ttl") == 7
    assert config.get("context", "resolver_multicast_port") == 13965


@pytest.mark.parametrize("declaration, use", [
    ('<!ENTITY secret SYSTEM "secret.txt">', '<option name="context_name" default-value="x"/>&secret;'),
    ('<!ENTITY % outside SYSTEM "secret.dtd">\n%outside;', "&fromdtd;"),
])
def test_external_entities_are_refused_and_never_read(tmp_path, declaration, use):
    (tmp_path / "secret.txt").write_text('<option name="context_name" default-value="LEAKED"/>')
    (tmp_path / "secret.dtd").write_text("<!ENTITY fromdtd 'LEAKED'>")
    path = _um(tmp_path, declaration, f'<options type="context">{use}</options>')
    with pytest.raises(ConfigError) as caught:
        load_xml_config(path, "tnwgd")
    assert caught.value.path == str(path) and caught.value.line is not None
    assert "external" in caught.value.reason and "LEAKED" not in str(caught.value)


def test_an_entity_bomb_is_refused(tmp_path):
    levels = ['<!ENTITY e0 "' + "x" * 40 + '">']
    levels += [f'<!ENTITY e{n} "{f"&e{n - 1};" * 10}">' for n in range(1, 10)]
    path = _um(tmp_path, "\n".join(levels), '<options type="context">'
                                            '<option name="context_name" default-value="&e9;"/></options>')
    with pytest.raises(ConfigError) as caught:
        load_xml_config(path, "tnwgd")
    assert caught.value.path == str(path)
    assert "entities" in caught.value.reason
