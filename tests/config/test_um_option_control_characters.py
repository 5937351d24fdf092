"""A UM option value with a control character in it (a NUL, a tab, DEL) is refused where it was set:
UM refuses it, and no address, name or number has one; accepted, it was cut or misread later."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from router.config import ConfigError, load_gateway_config
from router.um.config import load_file
from tests.config.samples import endpoint

ROOT = Path(__file__).resolve().parents[2]


# Python's str.strip() and str.split() take these for whitespace; C's isspace, UM's, does not.
NOT_WHITESPACE_TO_UM = [b"\x1c", b"\x1f", b"\xc2\x85"]


# At either end of a value the last three were trimmed away as if they were spaces: the file
# loaded and the character was silently lost.
@pytest.mark.parametrize("value", [b"lan\x00one", b"lan\tone", b"lan\x1bone", b"lan\x7fone", b"lan\xc2\x85one",
                                   b"lan\x00"] + [b"lan" + c for c in NOT_WHITESPACE_TO_UM]
                         + [c + b"lan" for c in NOT_WHITESPACE_TO_UM])
def test_a_plain_text_value_with_a_control_character_is_refused_at_its_line(tmp_path, value):
    path = tmp_path / "name.cfg"
    path.write_bytes(b"context resolver_multicast_port 13999\ncontext context_name " + value + b"\n")
    with pytest.raises(ConfigError) as caught:
        load_file(path)
    err = caught.value
    assert (err.path, err.line) == (str(path), 2)
    assert "context_name" in err.reason and "control character" in err.reason
    control = next(char for char in value.decode() if char not in "lanoe")
    assert control not in str(err)                      # named, not printed raw


def test_a_number_with_a_nul_is_refused_as_a_control_character(tmp_path):
    path = tmp_path / "port.cfg"
    path.write_bytes(b"context resolver_multicast_port 13999\x00\n")
    with pytest.raises(ConfigError) as caught:
        load_file(path)
    assert "U+0000" in caught.value.reason and "\0" not in str(caught.value)


def test_a_portals_lbm_config_with_a_nul_names_file_line_option_and_portal(write_gateway):
    path = write_gateway(endpoint("A", 1, "a.cfg") + endpoint("B", 2, "lan2.cfg"))
    (path.parent / "a.cfg").write_bytes(b"context resolver_multicast_port 13999\ncontext monitor_appid ab\x00cd\n")
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    err = caught.value
    assert (err.path, err.line) == (str(path.parent / "a.cfg"), 2)
    assert "monitor_appid" in err.reason and "portal 'A'" in err.reason


@pytest.mark.parametrize("value, named", [("lan&#9;one", "U+0009"),
                                           ("lan&#x85;", "U+0085")])     # at the end: Python strips it
def test_an_lbm_attributes_value_with_a_control_character_is_refused_at_its_element(write_gateway, value, named):
    attributes = (f'<lbm-attributes><option scope="context" name="context_name" value="{value}"/>'
                  '</lbm-attributes>')
    path = write_gateway(endpoint("A", 1, "lan1.cfg", after=attributes) + endpoint("B", 2, "lan2.cfg"))
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    err = caught.value
    assert (err.path, err.line, err.element) == (str(path), 4, "option")
    assert "context_name" in err.reason and named in err.reason and "portal 'A'" in err.reason


@pytest.mark.parametrize("value, named", [("lan&#127;one", "U+007F"),
                                           ("lan&#x85;", "U+0085")])     # at the end: Python strips it
def test_a_um_xml_value_with_a_control_character_is_refused_at_its_option(write_gateway, value, named):
    um_xml = ('<um-configuration version="1.0"><applications><application name="tnwgd"><contexts><context>\n'
              f'<options type="context"><option name="context_name" default-value="{value}"/></options>\n'
              '</context></contexts></application></applications></um-configuration>\n')
    path = write_gateway(endpoint("A", 1, "a.xml") + endpoint("B", 2, "lan2.cfg"), a__xml=um_xml)
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    err = caught.value
    assert (err.path, err.line, err.element) == (str(path.parent / "a.xml"), 2, "option")
    assert "context_name" in err.reason and "control character" in err.reason and named in err.reason


def test_tnwgd_validate_refuses_a_nul_in_an_option_value(write_gateway):
    path = write_gateway(endpoint("A", 1, "a.cfg") + endpoint("B", 2, "lan2.cfg"))
    (path.parent / "a.cfg").write_bytes(b"context resolver_multicast_port 13999\ncontext context_name a\x00b\n")
    result = subprocess.run([sys.executable, "-m", "router.cli.tnwgd", "-v", str(path)], capture_output=True,
                            text=True, cwd=ROOT, timeout=60)
    assert result.returncode != 0
    message = result.stderr.strip().splitlines()[-1]
    assert f"{path.parent / 'a.cfg'}:2" in message and "context_name" in message, result.stderr


@pytest.mark.parametrize("portal_name", ["A&#127;x", "A&#9;x", "A&#x85;x"])
def test_a_gateway_element_with_a_control_character_is_refused_at_the_element(write_gateway, portal_name):
    # The same mistake in the router's own file: a portal name with a tab went into logs, statistics
    # and the web monitor as it was.
    path = write_gateway(f"<endpoint><name>{portal_name}</name><domain-id>1</domain-id>"
                         "<lbm-config>lan1.cfg</lbm-config></endpoint>" + endpoint("B", 2, "lan2.cfg"))
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    err = caught.value
    assert (err.path, err.line, err.element) == (str(path), 4, "name")
    assert "control character" in err.reason


@pytest.mark.parametrize("control", NOT_WHITESPACE_TO_UM)
def test_a_control_character_between_a_plain_text_lines_fields_is_not_a_separator(tmp_path, control):
    path = tmp_path / "port.cfg"
    path.write_bytes(b"context context_name lan\ncontext" + control + b"resolver_multicast_port" + control
                     + b"13999\n")
    with pytest.raises(ConfigError) as caught:
        load_file(path)
    assert (caught.value.path, caught.value.line) == (str(path), 2)
    assert "control character" in caught.value.reason and control.decode() not in str(caught.value)


def test_a_gateway_element_ending_in_a_control_character_is_refused(write_gateway):
    path = write_gateway("<endpoint><name>A&#x85;</name><domain-id>1</domain-id>"
                         "<lbm-config>lan1.cfg</lbm-config></endpoint>" + endpoint("B", 2, "lan2.cfg"))
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    err = caught.value
    assert (err.path, err.line, err.element) == (str(path), 4, "name")
    assert "U+0085" in err.reason
