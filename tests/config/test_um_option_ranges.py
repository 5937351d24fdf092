"""A portal's UM options whose low..high range is empty are refused at load, where they were set."""
from __future__ import annotations

import pytest

from router.config import ConfigError, load_gateway_config
from tests.config.samples import endpoint


def test_an_empty_port_range_in_lbm_config_is_refused_at_its_line(write_gateway):
    # Accepted, it failed only when the portal wanted its first proxy source, long after start.
    path = write_gateway(endpoint("A", 1, "ports.cfg") + endpoint("B", 2, "lan2.cfg"),
                         ports__cfg="context resolver_multicast_port 13965\n"
                                    "context transport_tcp_port_low 19000\n")
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    err = caught.value
    assert (err.path, err.line) == (str(path.parent / "ports.cfg"), 2)
    assert "transport_tcp_port_low (19000) must not be above transport_tcp_port_high (14390)" in err.reason
    assert "portal 'A'" in err.reason


def test_a_range_that_lbm_attributes_completes_is_accepted(write_gateway):
    attributes = ('<lbm-attributes><option scope="context" name="transport_tcp_port_high" value="19009"/>'
                  '</lbm-attributes>')
    path = write_gateway(endpoint("A", 1, "ports.cfg", after=attributes) + endpoint("B", 2, "lan2.cfg"),
                         ports__cfg="context resolver_multicast_port 13965\n"
                                    "context transport_tcp_port_low 19000\n")
    source = load_gateway_config(path).portal("A").source_um
    assert (source.get("context", "transport_tcp_port_low"), source.get("context", "transport_tcp_port_high")) \
        == (19000, 19009)


def test_an_empty_range_from_lbm_attributes_is_refused_at_the_element(write_gateway):
    attributes = ('<lbm-attributes><option scope="receiver" name="transport_lbtru_port_high" value="100"/>'
                  '</lbm-attributes>')
    path = write_gateway(endpoint("A", 1, "lan1.cfg", after=attributes) + endpoint("B", 2, "lan2.cfg"))
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    assert (caught.value.path, caught.value.line) == (str(path), 4)
    assert "transport_lbtru_port_high (100)" in caught.value.reason


def test_a_minimum_above_its_maximum_across_lbm_config_and_lbm_attributes_names_both(write_gateway):
    attributes = ('<lbm-attributes><option scope="source" name="transport_lbtru_sm_maximum_interval" value="100"/>'
                  '</lbm-attributes>')
    path = write_gateway(endpoint("A", 1, "sm.cfg", after=attributes) + endpoint("B", 2, "lan2.cfg"),
                         sm__cfg="context resolver_multicast_port 13965\n"
                                 "source transport_lbtru_sm_minimum_interval 500\n")
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    err = caught.value
    assert (err.path, err.line) == (str(path), 4)
    assert (f"transport_lbtru_sm_minimum_interval (500, set at {path.parent / 'sm.cfg'}:2) must not be above "
            f"transport_lbtru_sm_maximum_interval (100, set at {path}:4)") in err.reason
    assert "portal 'A'" in err.reason


TOPIC_SM_XML = """<um-configuration version="1.0"><applications><application name="tnwgd"><contexts><context>
  <sources><topic {selector}><options type="source">
    <option name="transport_lbtrm_sm_minimum_interval" default-value="20000"/>
  </options></topic></sources>
</context></contexts></application></applications></um-configuration>
"""


@pytest.mark.parametrize("selector", ['topicname="orders"', 'pattern="^orders\\."'])
def test_a_topics_minimum_above_its_maximum_in_um_xml_is_refused_at_load(write_gateway, selector):
    # Only the portal's context options were checked: a <topic>'s went unchecked to every proxy
    # source of that topic, made long after start, with session messages stuck at their maximum.
    path = write_gateway(endpoint("A", 1, "lan1.cfg") + endpoint("B", 2, "lan2.cfg"), "<xml-config>um.xml</xml-config>",
                         um__xml=TOPIC_SM_XML.format(selector=selector))
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    err = caught.value
    assert (err.path, err.line) == (str(path.parent / "um.xml"), 3)
    assert ("transport_lbtrm_sm_minimum_interval (20000, set at " in err.reason
            and "must not be above transport_lbtrm_sm_maximum_interval (10000, the default)" in err.reason)
    assert "portal 'A'" in err.reason
