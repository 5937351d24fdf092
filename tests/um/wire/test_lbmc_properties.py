"""The message properties codec: every UM property type round-trips, the block is laid out as
Wireshark reads it, and any malformed block or chain header is a WireError, never another error."""
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.um.wire.errors import WireError
from router.um.wire.lbmc import NHDR_DATA, NHDR_FRAG
from router.um.wire.lbmc_properties import (APPHDR_CHAIN_SIZE, Property, apphdr_chain, decode_properties,
                                            encode_properties, read_apphdr_chain)

EVERY_TYPE = {
    "flag": Property("boolean", True),
    "b": Property("byte", -7),
    "s": Property("short", -12345),
    "i": Property("int", 2_000_000_000),
    "l": Property("long", -(1 << 62)),
    "f": Property("float", 1.5),
    "d": Property("double", 3.141592653589793),
    "name": Property("string", "héllo"),
}


def test_every_property_type_round_trips():
    assert decode_properties(encode_properties(EVERY_TYPE)) == EVERY_TYPE


@given(st.dictionaries(st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                               min_size=1, max_size=20),
                       st.one_of(st.builds(Property, st.just("boolean"), st.booleans()),
                                 st.builds(Property, st.just("byte"), st.integers(-128, 127)),
                                 st.builds(Property, st.just("short"), st.integers(-(1 << 15), (1 << 15) - 1)),
                                 st.builds(Property, st.just("int"), st.integers(-(1 << 31), (1 << 31) - 1)),
                                 st.builds(Property, st.just("long"), st.integers(-(1 << 63), (1 << 63) - 1)),
                                 st.builds(Property, st.just("double"), st.floats(allow_nan=False)),
                                 st.builds(Property, st.just("string"),
                                           st.text(st.characters(blacklist_characters="\x00",
                                                                 blacklist_categories=("Cs",))))),
                       min_size=1, max_size=12))
def test_any_properties_round_trip_with_values_aligned_to_their_size(properties):
    block = encode_properties(properties)
    assert decode_properties(block) == properties
    count = struct.unpack_from("<H", block, 4)[0]
    for n in range(count):
        _, value_offset, _, wire_type = struct.unpack_from("<IIII", block, 8 + 16 * n)
        size = {3: 2, 4: 4, 5: 8, 6: 4, 7: 8}.get(wire_type, 1)
        assert value_offset % size == 0


def test_the_block_is_little_endian_with_the_magic_first_and_offsets_from_its_start():
    block = encode_properties({"k": Property("int", 1)})
    magic, count, vertype, res = struct.unpack_from("<IHBB", block, 0)
    assert (magic, count, vertype, res) == (0xABACDABA, 1, 0, 0)
    key_offset, value_offset, _, wire_type = struct.unpack_from("<IIII", block, 8)
    assert (key_offset, wire_type) == (24, 4)
    assert block[key_offset:key_offset + 2] == b"k\x00"
    assert struct.unpack_from("<i", block, value_offset)[0] == 1


def test_a_big_endian_block_anti_magic_as_read_little_endian_decodes_too():
    key, value = b"k\x00", struct.pack(">i", -5)
    block = (struct.pack(">IHBB", 0xABACDABA, 1, 0, 0) + struct.pack(">IIII", 24, 28, 0, 4)
             + key + b"\x00\x00" + value)
    assert decode_properties(block) == {"k": Property("int", -5)}


def test_a_float_keeps_what_32_bits_hold():
    assert decode_properties(encode_properties({"f": Property("float", 0.1)}))["f"].value == pytest.approx(0.1)


@pytest.mark.parametrize("properties", [
    {}, {"k": Property("integer", 1)}, {"k": Property("byte", 128)}, {"k": Property("boolean", 1)},
    {"k": Property("string", "a\x00b")}, {"k\x00": Property("int", 1)}, {"k": 5}, {"k": Property("int", "5")},
])
def test_what_cannot_be_sent_is_a_wire_error(properties):
    with pytest.raises(WireError):
        encode_properties(properties)


def _corrupt(offset: int, value: bytes) -> bytes:
    block = bytearray(encode_properties({"key": Property("string", "value"), "n": Property("long", 9)}))
    block[offset:offset + len(value)] = value
    return bytes(block)


GOOD = encode_properties({"key": Property("string", "value"), "n": Property("long", 9)})


@pytest.mark.parametrize("block", [
    b"", GOOD[:7],                                              # shorter than the header
    _corrupt(0, b"\x00\x00\x00\x00"),                           # bad magic
    _corrupt(6, b"\x10"),                                       # version 1
    _corrupt(4, struct.pack("<H", 50)),                         # more fields than fit
    GOOD[:8 + 16 * 2 - 1],                                      # field headers truncated
    _corrupt(8, struct.pack("<I", 10_000)),                     # key offset past the end
    _corrupt(12, struct.pack("<I", 10_000)),                    # value offset past the end
    _corrupt(24 + 4, struct.pack("<I", len(GOOD) - 4)),         # long value runs past the end
    _corrupt(20, struct.pack("<I", 9)),                         # unknown type
    GOOD[:-1],                                                  # last string's NUL cut off
    GOOD[:-3],                                                  # truncated value
])
def test_a_malformed_block_is_a_wire_error(block):
    with pytest.raises(WireError):
        decode_properties(block)


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_a_wire_error(data):
    try:
        decode_properties(data)
    except WireError:
        pass


def test_the_chain_header_round_trips_and_any_other_chain_is_a_wire_error():
    chain = apphdr_chain(NHDR_FRAG, 77)
    assert len(chain) == APPHDR_CHAIN_SIZE == 12
    assert chain[:4] == bytes([NHDR_FRAG, 12, 0, 6]) and chain[4:8] == bytes([0xFF, 8, 0, 0])
    assert read_apphdr_chain(chain, 0, 12) == (NHDR_FRAG, 77)
    for broken in (chain[:11], chain[:1] + b"\x0b" + chain[2:], chain[:3] + b"\x05" + chain[4:],
                   chain[:4] + b"\x01" + chain[5:]):
        with pytest.raises(WireError):
            read_apphdr_chain(broken, 0, len(broken))
    assert read_apphdr_chain(b"xx" + apphdr_chain(NHDR_DATA, 5), 2, 14) == (NHDR_DATA, 5)
