"""Plain-text UM option files as editors leave them: comments in any encoding, a byte-order mark,
a value that is not UTF-8. UM reads these files as bytes; whatever they hold, loading ends in
options or in a ConfigError naming the file and line, never in another exception (at a reload
that would stop the whole router)."""
from __future__ import annotations

import pytest

from router.config import ConfigError, load_gateway_config
from router.um.config import load_file
from tests.config.samples import endpoint

LATIN1_COMMENT = b"# r\xe9seau de Montr\xe9al\ncontext resolver_multicast_port 13999  # port \xe9tabli\n"


def test_a_comment_in_another_encoding_is_only_a_comment(tmp_path):
    path = tmp_path / "latin1.cfg"
    path.write_bytes(LATIN1_COMMENT)
    assert load_file(path).get("context", "resolver_multicast_port") == 13999


def test_a_byte_order_mark_is_not_part_of_the_first_scope(tmp_path):
    path = tmp_path / "bom.cfg"
    path.write_bytes(b"\xef\xbb\xbfcontext resolver_multicast_port 13999\r\n")
    assert load_file(path).get("context", "resolver_multicast_port") == 13999


def test_a_value_that_is_not_utf8_is_an_error_at_its_line(tmp_path):
    path = tmp_path / "name.cfg"
    path.write_bytes(b"# fine\ncontext resolver_multicast_port 13999\ncontext context_name Montr\xe9al\n")
    with pytest.raises(ConfigError) as caught:
        load_file(path)
    assert (caught.value.path, caught.value.line) == (str(path), 3)
    assert "UTF-8" in caught.value.reason


def _portal_reading(write_gateway, name: str, data: bytes):
    """A gateway file whose portal A's <lbm-config> is `name`, written with `data`: its path."""
    path = write_gateway(endpoint("A", 1, name) + endpoint("B", 2, "lan2.cfg"))
    (path.parent / name).write_bytes(data)
    return path


def test_a_portal_whose_lbm_config_has_a_latin1_comment_loads(write_gateway):
    path = _portal_reading(write_gateway, "a.cfg", LATIN1_COMMENT)
    config = load_gateway_config(path)
    assert config.portal("A").receiver_um.get("context", "resolver_multicast_port") == 13999


def test_a_portal_whose_lbm_config_has_a_bad_byte_in_a_value_names_file_line_and_portal(write_gateway):
    path = _portal_reading(write_gateway, "a.cfg", b"# caf\xe9\ncontext context_name caf\xe9\n")
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    assert (caught.value.path, caught.value.line) == (str(path.parent / "a.cfg"), 2)
    assert "portal 'A'" in caught.value.reason


def test_the_monitoring_contexts_file_may_have_a_latin1_comment(write_gateway):
    path = write_gateway(endpoint("A", 1, "lan1.cfg") + endpoint("B", 2, "lan2.cfg"),
                         daemon='<monitor interval="5"><transport-module module="lbm" options="config=mon.cfg"/>'
                                '</monitor>')
    (path.parent / "mon.cfg").write_bytes(LATIN1_COMMENT)
    assert load_gateway_config(path).daemon.monitor.interval == 5


UM_XML = ('<?xml version="1.0" encoding="{encoding}"?>\n<um-configuration version="1.0"><applications>'
          '<application name="tnwgd"><contexts><context><options type="context">'
          '<option name="resolver_multicast_port" default-value="13001"/></options></context></contexts>'
          '</application></applications></um-configuration>\n')


@pytest.mark.parametrize("data", [b"\xef\xbb\xbf" + UM_XML.format(encoding="UTF-8").encode(),
                                  UM_XML.format(encoding="UTF-16").encode("utf-16")],
                         ids=["utf8-with-bom", "utf16"])
def test_a_um_xml_lbm_config_with_a_byte_order_mark_is_read_as_xml(write_gateway, data):
    # As <xml-config> the same file loaded; as <lbm-config> it was taken for plain text and refused
    # with "expected 'scope option value', got '<?xml ...'".
    path = _portal_reading(write_gateway, "a.xml", data)
    config = load_gateway_config(path)
    assert config.portal("A").receiver_um.get("context", "resolver_multicast_port") == 13001


def test_a_utf16_plain_text_file_is_named_as_such(write_gateway):
    # Windows editors save "Unicode" as UTF-16: the error showed the line with a NUL between letters.
    path = _portal_reading(write_gateway, "a.cfg", "context resolver_multicast_port 13001\n".encode("utf-16"))
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    err = caught.value
    assert (err.path, err.line) == (str(path.parent / "a.cfg"), 1)
    assert "\0" not in str(err)
    assert "UTF-16" in err.reason and "portal 'A'" in err.reason
