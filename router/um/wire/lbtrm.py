"""LBT-RM DATA packets, the framing multicast immediate messages (MIM) travel in (wire.md §2.5).

A MIM datagram is an 8-byte LBT-RM header {ver_type, next_hdr, ucast_port, session_id}, a
12-byte DATA header {sqn, trail_sqn, flags_fec_type, flags_tgsz, fec_symbol} and then LBMC
messages. Wireshark's lbtrm dissector recognises it by its destination (the `mim_incoming_*` and
`mim_outgoing_*` preferences, 224.10.10.21:14401 by default) and hands the rest to LBMC.

Only DATA is modelled: immediate messages here are sent once, without the NAK/NCF/SM machinery
of an LBT-RM transport session (the product does not use LBT-RM transports).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from router.um.wire.errors import WireError

LBTRM_VERSION = 0
LBTRM_TYPE_DATA = 0x0
LBTRM_NHDR_DATA = 0x00

_HEADER = struct.Struct(">BBHIIIBBH")          # main header + DATA header
HEADER_SIZE = _HEADER.size                     # 20


@dataclass(frozen=True, slots=True)
class LbtrmData:
    session_id: int
    sqn: int
    trail_sqn: int
    ucast_port: int
    payload: memoryview | bytes      # the LBMC messages


def encode_lbtrm_data(session_id: int, sqn: int, payload, trail_sqn: int | None = None, ucast_port: int = 0) -> bytes:
    """One DATA datagram around `payload` (whole LBMC messages)."""
    try:
        head = _HEADER.pack((LBTRM_VERSION << 4) | LBTRM_TYPE_DATA, LBTRM_NHDR_DATA, ucast_port,
                            session_id, sqn & 0xFFFFFFFF, (sqn if trail_sqn is None else trail_sqn) & 0xFFFFFFFF,
                            0, 0, 0)
    except struct.error as err:
        raise WireError(f"LBT-RM DATA header: {err}") from None
    return head + bytes(payload)


def decode_lbtrm_data(datagram) -> LbtrmData:
    """The DATA header and the LBMC bytes after it; WireError for anything else."""
    view = memoryview(datagram)
    if len(view) < HEADER_SIZE:
        raise WireError(f"LBT-RM: datagram of {len(view)} bytes is shorter than the {HEADER_SIZE}-byte DATA header")
    ver_type, next_hdr, ucast_port, session_id, sqn, trail_sqn, _fec, _tgsz, _symbol = _HEADER.unpack_from(view)
    if ver_type >> 4 != LBTRM_VERSION:
        raise WireError(f"LBT-RM: version {ver_type >> 4} at offset 0 (only 0 exists)")
    if ver_type & 0x0F != LBTRM_TYPE_DATA:
        raise WireError(f"LBT-RM: packet type {ver_type & 0x0F} at offset 0 is not DATA")
    if next_hdr != LBTRM_NHDR_DATA:
        raise WireError(f"LBT-RM: next header 0x{next_hdr:02x} at offset 1 is not DATA")
    return LbtrmData(session_id, sqn, trail_sqn, ucast_port, view[HEADER_SIZE:])
