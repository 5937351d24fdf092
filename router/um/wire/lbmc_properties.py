"""UM message properties (lbm_msg_properties_t) on LBMC data frames: the pure codec.

A message with properties carries an APPHDR_CHAIN header whose one element says how many bytes
at the end of the payload are the properties block; the application's data is what comes before.
Every fragment of such a message carries the same chain header (the FRAG header after it), and
FRAG's length counts data and block together. As Wireshark's LBMC dissector reads it::

    APPHDR_CHAIN (12 bytes, big-endian like every LBMC header)
      next_hdr u8 | hdr_len u8 = 12 | res u8 | first_chain_hdr u8 = 6 (properties length)
      element: next u8 = 0xFF | hdr_len u8 = 8 | res u16 | len u32  (the block's size)

    properties block (byte order told by the magic; we write little-endian)
      magic u32 = 0xABACDABA | num_fields u16 | vertype u8 = 0 | res u8
      num_fields x {key_offset u32, value_offset u32, hash u32, type u32}
      then each key (NUL-terminated) and value (booleans and bytes 1, shorts 2, ints and
      floats 4, longs and doubles 8 bytes, strings NUL-terminated)

Offsets count from the block's first byte (the magic). Values are put at an offset that is a
multiple of their size (the block's consumers may read them in place). The hash is written 0:
the dissector shows it without checking it, and we do not know UM's function; it is not read.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from router.um.wire import lbmc_constants as c
from router.um.wire._codec import text_bytes, text_from_bytes
from router.um.wire.errors import WireError

APPHDR_CHAIN = struct.Struct(">BBBBBBHI")   # chain header, then its one properties-length element
APPHDR_CHAIN_SIZE = APPHDR_CHAIN.size       # 12
_ELEMENT_SIZE = 8

_BLOCK_HEADER = {"<": struct.Struct("<IHBB"), ">": struct.Struct(">IHBB")}
_FIELD_HEADER = {"<": struct.Struct("<IIII"), ">": struct.Struct(">IIII")}
_BLOCK_HEADER_SIZE = 8
_FIELD_HEADER_SIZE = 16

# property type name -> (wire type, struct format of its value, or None for a string)
_TYPES = {
    "boolean": (c.MSG_PROPERTY_BOOLEAN, "?"),
    "byte": (c.MSG_PROPERTY_BYTE, "b"),
    "short": (c.MSG_PROPERTY_SHORT, "h"),
    "int": (c.MSG_PROPERTY_INT, "i"),
    "long": (c.MSG_PROPERTY_LONG, "q"),
    "float": (c.MSG_PROPERTY_FLOAT, "f"),
    "double": (c.MSG_PROPERTY_DOUBLE, "d"),
    "string": (c.MSG_PROPERTY_STRING, None),
}
_NAMES = {wire_type: name for name, (wire_type, _) in _TYPES.items()}


class Property(NamedTuple):
    """One typed property value: ``Property("int", 5)``. ``kind`` is one of UM's property types
    (boolean, byte, short, int, long, float, double, string); byte, short, int and long are
    signed. A float keeps only what 32 bits hold."""

    kind: str
    value: object


def encode_properties(properties: dict) -> bytes:
    """The properties block for ``{key: Property}``; WireError for a bad key, kind or value."""
    if not properties:
        raise WireError("message properties: at least one property is needed")
    if len(properties) > 0xFFFF:
        raise WireError(f"message properties: {len(properties)} exceed the 65535 a block holds")
    headers, area = [], bytearray()
    area_start = _BLOCK_HEADER_SIZE + _FIELD_HEADER_SIZE * len(properties)
    for key, prop in properties.items():
        if not isinstance(prop, Property):
            raise WireError(f"message property {key!r}: give a Property(kind, value), not {prop!r}")
        wire_type, value = _encode_value(key, prop)
        key_offset = area_start + len(area)
        area += text_bytes(key, f"message property key {key!r}") + b"\x00"
        align = len(value) if prop.kind != "string" else 1
        area += bytes(-(area_start + len(area)) % align)
        headers.append(_FIELD_HEADER["<"].pack(key_offset, area_start + len(area), 0, wire_type))
        area += value
    head = _BLOCK_HEADER["<"].pack(c.MSG_PROPERTIES_MAGIC, len(properties),
                                   c.MSG_PROPERTIES_VERSION << 4 | c.MSG_PROPERTIES_TYPE_NORMAL, 0)
    return head + b"".join(headers) + bytes(area)


def _encode_value(key: str, prop: Property) -> tuple[int, bytes]:
    kind = _TYPES.get(prop.kind)
    if kind is None:
        raise WireError(f"message property {key!r}: unknown kind {prop.kind!r} (one of {', '.join(_TYPES)})")
    wire_type, fmt = kind
    if fmt is None:
        return wire_type, text_bytes(prop.value, f"message property {key!r}") + b"\x00"
    if fmt == "?" and not isinstance(prop.value, bool):
        raise WireError(f"message property {key!r}: a boolean needs True or False, not {prop.value!r}")
    try:
        return wire_type, struct.pack("<" + fmt, prop.value)
    except (struct.error, TypeError) as exc:
        raise WireError(f"message property {key!r}: {prop.value!r} is not a {prop.kind} ({exc})") from None


def decode_properties(block: bytes) -> dict:
    """``{key: Property}`` from a properties block; WireError if it is malformed anywhere."""
    if len(block) < _BLOCK_HEADER_SIZE:
        raise WireError(f"message properties: block of {len(block)} bytes is shorter than its header")
    magic = int.from_bytes(block[:4], "little")
    order = "<" if magic == c.MSG_PROPERTIES_MAGIC else ">" if magic == c.MSG_PROPERTIES_ANTIMAGIC else None
    if order is None:
        raise WireError(f"message properties: bad magic 0x{magic:08x}")
    _, count, vertype, _ = _BLOCK_HEADER[order].unpack_from(block, 0)
    if vertype >> 4 != c.MSG_PROPERTIES_VERSION:
        raise WireError(f"message properties: version {vertype >> 4} is not 0")
    if _BLOCK_HEADER_SIZE + _FIELD_HEADER_SIZE * count > len(block):
        raise WireError(f"message properties: {count} fields do not fit in {len(block)} bytes")
    properties = {}
    for position in range(_BLOCK_HEADER_SIZE, _BLOCK_HEADER_SIZE + _FIELD_HEADER_SIZE * count, _FIELD_HEADER_SIZE):
        key_offset, value_offset, _, wire_type = _FIELD_HEADER[order].unpack_from(block, position)
        key = text_from_bytes(_cstring(block, key_offset, "key"))
        properties[key] = _decode_value(block, value_offset, wire_type, order)
    return properties


def _decode_value(block: bytes, offset: int, wire_type: int, order: str) -> Property:
    name = _NAMES.get(wire_type)
    if name is None:
        raise WireError(f"message properties: unknown type {wire_type}")
    fmt = _TYPES[name][1]
    if fmt is None:
        return Property(name, text_from_bytes(_cstring(block, offset, "string value")))
    layout = struct.Struct(order + fmt)
    if offset + layout.size > len(block):
        raise WireError(f"message properties: {name} value at {offset} runs past the block's {len(block)} bytes")
    value = layout.unpack_from(block, offset)[0]
    if fmt == "?" and block[offset] > 1:
        raise WireError(f"message properties: boolean value {block[offset]}")
    return Property(name, value)


def _cstring(block: bytes, offset: int, what: str) -> bytes:
    end = block.find(b"\x00", offset) if offset < len(block) else -1
    if end < 0:
        raise WireError(f"message properties: {what} at {offset} has no NUL within the block's {len(block)} bytes")
    return block[offset:end]


def apphdr_chain(next_hdr: int, block_size: int) -> bytes:
    """The APPHDR_CHAIN header saying the payload ends in a properties block of `block_size`."""
    return APPHDR_CHAIN.pack(next_hdr, APPHDR_CHAIN_SIZE, 0, c.CHAIN_ELEM_PROPERTIES_LENGTH,
                             c.CHAIN_ELEM_NONE, _ELEMENT_SIZE, 0, block_size)


def read_apphdr_chain(data, offset: int, end: int) -> tuple[int, int]:
    """(header after the chain, properties block size) of the APPHDR_CHAIN header at `offset`;
    WireError for any chain but the one properties-length element this codec writes."""
    if end - offset < APPHDR_CHAIN_SIZE:
        raise WireError(f"APPHDR_CHAIN: {end - offset} bytes, shorter than {APPHDR_CHAIN_SIZE}")
    next_hdr, hdr_len, _, first, element_next, element_len, _, size = APPHDR_CHAIN.unpack_from(data, offset)
    if (hdr_len, first, element_next, element_len) != (APPHDR_CHAIN_SIZE, c.CHAIN_ELEM_PROPERTIES_LENGTH,
                                                       c.CHAIN_ELEM_NONE, _ELEMENT_SIZE):
        raise WireError(f"APPHDR_CHAIN: not one properties-length element (hdr_len {hdr_len}, first {first}, "
                        f"element {element_len} bytes, then {element_next})")
    return next_hdr, size
