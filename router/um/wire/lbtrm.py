"""LBT-RM packets: the reliable multicast transport and the framing of immediate messages (wire.md §2.5).

Every packet starts with an 8-byte header {ver_type, next_hdr, ucast_port, session_id}; the type
in ver_type's low nibble says what follows:

    DATA 0  {sqn, trail_sqn, flags_fec_type u8, flags_tgsz u8, fec_symbol u16}, then LBMC messages
    SM   2  {sm_sqn, lead_sqn, trail_sqn, flags_fec_type u8, flags_tgsz u8, reserved u16}
    NAK  3  {num_naks u16, format u16}, then num_naks u32 sequence numbers (selective format)
    NCF  4  {trail_sqn, num_ncfs u16, reserved u8, reason_format u8}, then num_ncfs u32 sqns

A source multicasts DATA and session messages (SM: "I have sent up to lead_sqn and can still
repair from trail_sqn"); receivers NAK what they miss by unicast to the source's `ucast_port`; the
source retransmits (DATA with the RETRANSMISSION flag) or answers with an NCF saying why not.
Immediate messages (router.um.immediate) are DATA packets on the MIM group, sent once.
Wireshark's lbtrm dissector recognises the packets by their ports (the `lbtrm.*` and `mim_*`
preferences) and hands DATA payloads to LBMC.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from router.um.wire.errors import WireError
from router.um.wire import sqn_lists
from router.um.wire.sqn_lists import fits, pack_sqns, read_sqns

LBTRM_VERSION = 0
LBTRM_TYPE_DATA = 0x0
LBTRM_TYPE_SM = 0x2
LBTRM_TYPE_NAK = 0x3
LBTRM_TYPE_NCF = 0x4
LBTRM_NHDR_DATA = 0x00

# flags_fec_type of DATA and SM (high nibble)
FLAG_UCAST_NAKS = 0x80          # NAKs go by unicast to the source (how every source here works)
FLAG_MCAST_NAKS = 0x40
FLAG_RETRANSMISSION = 0x20
FLAG_LATE_JOIN = 0x10

NAK_FORMAT_SELECTIVE = 0x0

# NCF reasons (reason_format's high nibble)
NCF_NO_RETRY = 0x0              # gone from the transmission window: unrecoverable, stop asking
NCF_IGNORED = 0x1               # retransmitted a moment ago (ignore interval): wait for it
NCF_RX_DELAY = 0x2
NCF_SHED = 0x3                  # the retransmit rate limit is spent: ask again later

MAIN_HEADER = struct.Struct(">BBHI")                    # 8
DATA_HEADER = struct.Struct(">BBHIIIBBH")               # main + DATA: 20
SM_PACKET = struct.Struct(">BBHIIIIBBH")                # main + SM: 24
NAK_HEADER = struct.Struct(">BBHIHH")                   # main + NAK: 12
NCF_HEADER = struct.Struct(">BBHIIHBB")                 # main + NCF: 16
HEADER_SIZE = DATA_HEADER.size                          # what a DATA packet adds to its LBMC bytes

MAX_LIST, MAX_DATAGRAM = sqn_lists.MAX_LIST, sqn_lists.MAX_DATAGRAM


@dataclass(frozen=True, slots=True)
class LbtrmData:
    session_id: int
    sqn: int
    trail_sqn: int
    ucast_port: int
    payload: memoryview | bytes      # the LBMC messages
    flags: int = 0

    @property
    def retransmission(self) -> bool:
        return bool(self.flags & FLAG_RETRANSMISSION)


@dataclass(frozen=True, slots=True)
class LbtrmSm:
    session_id: int
    ucast_port: int
    sm_sqn: int
    lead_sqn: int
    trail_sqn: int
    flags: int = FLAG_UCAST_NAKS


@dataclass(frozen=True, slots=True)
class LbtrmNak:
    session_id: int
    ucast_port: int
    sqns: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LbtrmNcf:
    session_id: int
    ucast_port: int
    trail_sqn: int
    reason: int
    sqns: tuple[int, ...]


def _ver_type(packet_type: int) -> int:
    return (LBTRM_VERSION << 4) | packet_type


def encode_lbtrm_data(session_id: int, sqn: int, payload, trail_sqn: int | None = None, ucast_port: int = 0,
                      flags: int = 0) -> bytes:
    """One DATA datagram around `payload` (whole LBMC messages)."""
    try:
        head = DATA_HEADER.pack(_ver_type(LBTRM_TYPE_DATA), LBTRM_NHDR_DATA, ucast_port, session_id,
                                sqn & 0xFFFFFFFF, (sqn if trail_sqn is None else trail_sqn) & 0xFFFFFFFF,
                                flags & 0xF0, 0, 0)
    except struct.error as err:
        raise WireError(f"LBT-RM DATA header: {err}") from None
    return fits(head + bytes(payload), "LBT-RM", "DATA")


def encode_lbtrm_sm(session_id: int, ucast_port: int, sm_sqn: int, lead_sqn: int, trail_sqn: int,
                    flags: int = FLAG_UCAST_NAKS) -> bytes:
    try:
        return SM_PACKET.pack(_ver_type(LBTRM_TYPE_SM), LBTRM_NHDR_DATA, ucast_port, session_id,
                              sm_sqn & 0xFFFFFFFF, lead_sqn & 0xFFFFFFFF, trail_sqn & 0xFFFFFFFF, flags & 0xF0, 0, 0)
    except struct.error as err:
        raise WireError(f"LBT-RM SM: {err}") from None


def encode_lbtrm_nak(session_id: int, ucast_port: int, sqns) -> bytes:
    """A selective NAK for `sqns` (sent by unicast to the source's ucast_port)."""
    body = pack_sqns(sqns, "LBT-RM")
    try:
        head = NAK_HEADER.pack(_ver_type(LBTRM_TYPE_NAK), LBTRM_NHDR_DATA, ucast_port, session_id, len(sqns),
                               NAK_FORMAT_SELECTIVE)
    except struct.error as err:
        raise WireError(f"LBT-RM NAK: {err}") from None
    return fits(head + body, "LBT-RM", "NAK")


def encode_lbtrm_ncf(session_id: int, ucast_port: int, trail_sqn: int, reason: int, sqns) -> bytes:
    """A NAK confirmation: the source will not (now) retransmit `sqns`, for `reason`."""
    body = pack_sqns(sqns, "LBT-RM")
    try:
        head = NCF_HEADER.pack(_ver_type(LBTRM_TYPE_NCF), LBTRM_NHDR_DATA, ucast_port, session_id,
                               trail_sqn & 0xFFFFFFFF, len(sqns), 0, (reason & 0x0F) << 4 | NAK_FORMAT_SELECTIVE)
    except struct.error as err:
        raise WireError(f"LBT-RM NCF: {err}") from None
    return fits(head + body, "LBT-RM", "NCF")


_unpack_data_header = DATA_HEADER.unpack_from
_DATA_VER_TYPE = (LBTRM_VERSION << 4) | LBTRM_TYPE_DATA


def peek_new_data(datagram) -> tuple[int, int] | None:
    """(session id, sequence number) of new DATA (not a retransmission), its LBMC bytes after
    HEADER_SIZE, read from the header alone: a receiver's shortcut for a steady session
    (router.um.session_socket). None: anything else, for decode_lbtrm."""
    if len(datagram) < HEADER_SIZE:
        return None
    ver_type, next_hdr, _ucast_port, session_id, sqn, _trail, flags, _, _ = _unpack_data_header(datagram)
    if ver_type != _DATA_VER_TYPE or next_hdr != LBTRM_NHDR_DATA or flags & FLAG_RETRANSMISSION:
        return None
    return session_id, sqn


def decode_lbtrm_data(datagram) -> LbtrmData:
    """The DATA header and the LBMC bytes after it; WireError for anything else."""
    packet = decode_lbtrm(datagram)
    if not isinstance(packet, LbtrmData):
        raise WireError(f"LBT-RM: packet type {_type_name(packet)} at offset 0 is not DATA")
    return packet


def _type_name(packet) -> str:
    return {LbtrmSm: "SM", LbtrmNak: "NAK", LbtrmNcf: "NCF"}.get(type(packet), "?")


def decode_lbtrm(datagram) -> LbtrmData | LbtrmSm | LbtrmNak | LbtrmNcf:
    """Any LBT-RM packet; WireError naming the offset of what is wrong."""
    view = memoryview(datagram)
    if len(view) < MAIN_HEADER.size:
        raise WireError(f"LBT-RM: header truncated at offset {len(view)} (it needs {MAIN_HEADER.size} bytes)")
    ver_type, next_hdr, ucast_port, session_id = MAIN_HEADER.unpack_from(view)
    if ver_type >> 4 != LBTRM_VERSION:
        raise WireError(f"LBT-RM: version {ver_type >> 4} at offset 0 (only 0 exists)")
    if next_hdr != LBTRM_NHDR_DATA:
        raise WireError(f"LBT-RM: next header 0x{next_hdr:02x} at offset 1 is not DATA")
    kind = ver_type & 0x0F
    if kind == LBTRM_TYPE_DATA:
        if len(view) < DATA_HEADER.size:
            raise WireError(f"LBT-RM: DATA header truncated at offset {len(view)} (it needs {DATA_HEADER.size} bytes)")
        sqn, trail_sqn, flags = DATA_HEADER.unpack_from(view)[4:7]
        return LbtrmData(session_id, sqn, trail_sqn, ucast_port, view[DATA_HEADER.size:], flags & 0xF0)
    if kind == LBTRM_TYPE_SM:
        if len(view) < SM_PACKET.size:
            raise WireError(f"LBT-RM: SM truncated at offset {len(view)} (it needs {SM_PACKET.size} bytes)")
        sm_sqn, lead, trail, flags = SM_PACKET.unpack_from(view)[4:8]
        return LbtrmSm(session_id, ucast_port, sm_sqn, lead, trail, flags & 0xF0)
    if kind == LBTRM_TYPE_NAK:
        if len(view) < NAK_HEADER.size:
            raise WireError(f"LBT-RM: NAK header truncated at offset {len(view)} (it needs {NAK_HEADER.size} bytes)")
        count, fmt = NAK_HEADER.unpack_from(view)[4:6]
        if fmt & 0x0F != NAK_FORMAT_SELECTIVE:
            raise WireError(f"LBT-RM NAK: format {fmt & 0x0F} at offset 10 (only selective NAKs are sent)")
        return LbtrmNak(session_id, ucast_port, read_sqns(view, NAK_HEADER.size, count, "LBT-RM", "NAK"))
    if kind == LBTRM_TYPE_NCF:
        if len(view) < NCF_HEADER.size:
            raise WireError(f"LBT-RM: NCF header truncated at offset {len(view)} (it needs {NCF_HEADER.size} bytes)")
        trail, count, _reserved, reason_format = NCF_HEADER.unpack_from(view)[4:8]
        if reason_format & 0x0F != NAK_FORMAT_SELECTIVE:
            raise WireError(f"LBT-RM NCF: format {reason_format & 0x0F} at offset 15 (only selective)")
        return LbtrmNcf(session_id, ucast_port, trail, reason_format >> 4,
                        read_sqns(view, NCF_HEADER.size, count, "LBT-RM", "NCF"))
    raise WireError(f"LBT-RM: packet type {kind} at offset 0 is not DATA, SM, NAK or NCF")
