"""UM configuration files named by the router's file that are not files: the error says what they are."""
from __future__ import annotations

import pytest

from router.config import ConfigError, load_gateway_config
from tests.config.samples import TWO_LANS


def test_an_xml_config_that_is_a_directory_is_called_one(write_gateway, tmp_path):
    # It was reported as "no such file" while the operator looks at it with ls.
    (tmp_path / "um.d").mkdir()
    path = write_gateway(TWO_LANS, daemon="<xml-config>um.d</xml-config>")
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    err = caught.value
    assert (err.path, err.line, err.element) == (str(path), 2, "xml-config")
    assert err.reason == f"cannot read xml-config file '{tmp_path / 'um.d'}': not a regular file"


def test_a_missing_xml_config_is_called_missing(write_gateway, tmp_path):
    path = write_gateway(TWO_LANS, daemon="<xml-config>absent.xml</xml-config>")
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    assert caught.value.reason == f"cannot read xml-config file '{tmp_path / 'absent.xml'}': no such file"
