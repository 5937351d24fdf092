"""Numbers in elements and attributes: however long the digits run, an error at the element."""
from __future__ import annotations

import pytest

from router.config import ConfigError, load_gateway_config
from tests.config.samples import TWO_LANS, endpoint

MANY_DIGITS = "9" * 5000          # more digits than Python converts to an integer by default


@pytest.mark.parametrize("portals, daemon, element, words", [
    (endpoint("A", 1, "lan1.cfg", before=f"<cost>{MANY_DIGITS}</cost>") + endpoint("B", 2, "lan2.cfg"), "",
     "cost", "cost must be a positive integer (1 or more), got a 5000-digit number"),
    (endpoint("A", MANY_DIGITS, "lan1.cfg") + endpoint("B", 2, "lan2.cfg"), "",
     "domain-id", "domain-id must be 0..4294967295, got a 5000-digit number"),
    (TWO_LANS, f'<route-info timeout="-{MANY_DIGITS}"/>',
     "route-info", "attribute 'timeout' must be a positive integer (1 or more), got a 5000-digit number"),
    (TWO_LANS, f"<web-monitor>*:{MANY_DIGITS}</web-monitor>",
     "web-monitor", "the port must be 1..65535, got a 5000-digit number"),
    (endpoint("A", 1, "lan1.cfg", after='<acl><inbound><ace match="accept">'
              f'<tcp-source-port value="{MANY_DIGITS}" comparison="eq"/></ace></inbound></acl>')
     + endpoint("B", 2, "lan2.cfg"), "",
     "tcp-source-port", "attribute 'value' must be 0..65535, got a 5000-digit number"),
])
def test_a_number_of_thousands_of_digits_is_out_of_range_at_its_element(write_gateway, portals, daemon,
                                                                         element, words):
    path = write_gateway(portals, daemon=daemon)
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    err = caught.value
    assert (err.path, err.element) == (str(path), element)
    assert err.line in (2, 4)
    assert err.reason == words


def test_leading_zeros_do_not_make_a_number_long(write_gateway):
    zeros = "0" * 5000
    path = write_gateway(endpoint("A", 1, "lan1.cfg", before=f"<cost>{zeros}7</cost>") + endpoint("B", 2, "lan2.cfg"))
    assert load_gateway_config(path).portal("A").cost == 7
