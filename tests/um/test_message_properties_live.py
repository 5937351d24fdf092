"""Message properties on a live LBT-TCP source in one domain: the receiver gets each message's
properties (whole and fragmented messages; None for a message sent without), and Wireshark's
LBMC dissector decodes every key and typed value in the capture with no expert info."""

import pytest

from router.um.wire.lbmc_properties import Property
from tests.support.captured_exchange import captured_exchange
from tests.support.tshark import assert_no_expert_info, decode

pytestmark = pytest.mark.integration

# Positive numbers: tshark shows byte, short, int and long as unsigned.
PROPERTIES = {
    "flag": Property("boolean", True), "b": Property("byte", 7), "s": Property("short", 300),
    "i": Property("int", 70000), "l": Property("long", 1 << 40), "f": Property("float", 1.5),
    "d": Property("double", 2.25), "name": Property("string", "emea-1"),
}


def test_a_receiver_gets_the_properties_and_tshark_decodes_them_cleanly(domain, tmp_path):
    pcap = tmp_path / "properties.pcapng"
    sent = [(b"small %d" % n, {**PROPERTIES, "n": Property("int", n)}) for n in range(5)]
    sent += [(b"plain", None), (bytes(range(256)) * 600, PROPERTIES), (b"", {"only": Property("byte", 1)})]

    def send(source) -> None:
        for data, properties in sent:
            source.send_with_properties(data, properties)
    received, decode_as, prefs = captured_exchange(domain, pcap, "props.topic", len(sent), send)
    assert [(m.data, m.properties) for m in received] == sent

    assert_no_expert_info(pcap, decode_as, prefs, min_severity="warn")
    fields = ["lbmc.apphdr_chain.first_chain_hdr", "lbmc.apphdr_chain.msgprop.proplen",
              "lbmc.lbm_msg_properties.data.magic", "lbmc.lbm_msg_properties.hdr.key",
              "lbmc.lbm_msg_properties.hdr.boolean_value", "lbmc.lbm_msg_properties.hdr.byte_value",
              "lbmc.lbm_msg_properties.hdr.short_value", "lbmc.lbm_msg_properties.hdr.int_value",
              "lbmc.lbm_msg_properties.hdr.long_value", "lbmc.lbm_msg_properties.hdr.float_value",
              "lbmc.lbm_msg_properties.hdr.double_value", "lbmc.lbm_msg_properties.hdr.string_value",
              "lbmc.frag.offset"]
    frames = decode(pcap, decode_as, prefs, fields=fields)
    values = {name: [v for f in frames for v in f.get(name, [])] for name in fields}
    assert set(values["lbmc.apphdr_chain.first_chain_hdr"]) == {"0x06"}
    assert set(values["lbmc.lbm_msg_properties.data.magic"]) == {"0xabacdaba"}
    keys = values["lbmc.lbm_msg_properties.hdr.key"]
    assert keys.count("n") == 5 and keys.count("only") == 1
    # The large message's show once it is reassembled (once for each of its fragments in the
    # frame that completes it): more than the five small messages' own.
    assert keys.count("name") > 5
    assert len(set(values["lbmc.apphdr_chain.msgprop.proplen"])) == 3     # small, large, empty's
    assert set(values["lbmc.lbm_msg_properties.hdr.string_value"]) == {"emea-1"}
    assert set(values["lbmc.lbm_msg_properties.hdr.boolean_value"]) == {"1"}
    assert set(values["lbmc.lbm_msg_properties.hdr.byte_value"]) == {"7", "1"}
    assert set(values["lbmc.lbm_msg_properties.hdr.short_value"]) == {"300"}
    assert set(values["lbmc.lbm_msg_properties.hdr.int_value"]) == {"70000", "0", "1", "2", "3", "4"}
    assert set(values["lbmc.lbm_msg_properties.hdr.long_value"]) == {str(1 << 40)}
    assert set(values["lbmc.lbm_msg_properties.hdr.float_value"]) == {"1.5"}
    assert set(values["lbmc.lbm_msg_properties.hdr.double_value"]) == {"2.25"}
    assert any(values["lbmc.frag.offset"]), "the large message was not fragmented"
