"""LBT-RU packets: the reliable unicast UDP transport (wire.md §2.5, Wireshark's packet-lbtru.c).

Every packet starts with a 4-byte header {ver_type, next_hdr, flags_or_res u16}; the type in
ver_type's low nibble says what follows it:

    DATA 0  {sqn, trail_sqn}, then the option chain, then LBMC messages; flags: RETRANSMISSION 0x4000
    SM   2  {sm_sqn, lead_sqn, trail_sqn}; flags: SYN 0x8000 (the answer to a connection request)
    NAK  3  {num_naks u16, format u16}, then num_naks u32 sequence numbers (selective format)
    NCF  4  {trail_sqn, num_ncfs u16, reserved u8, reason_format u8}, then num_ncfs u32 sqns
    ACK  5  {ack_sqn}: a receiver's keepalive, the last sequence number it delivered in order
    CREQ 6  nothing more; flags_or_res is the request (SYN 0): a receiver asks to be sent the session
    RST  7  nothing more; flags_or_res is the reason (default 0): "I do not know you", connect again

After the type's own header comes a chain of options, each {next_hdr, hdr_len, flags u16, value
u32}, linked through next_hdr and ended by DATA (0): SID (1) names the transport session (several
may share a source port), CID (2) a receiver's client session. Sources put SID on DATA, SM and NCF;
receivers put SID and CID on NAK, ACK and CREQ. RST carries none: Wireshark's dissector does not
step over an RST's flags_or_res before the chain, so an RST with options would decode as garbage; a
source has one session per port, so the port alone says which session reset.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from router.um.wire.errors import WireError
from router.um.wire import sqn_lists
from router.um.wire.sqn_lists import fits, pack_sqns, read_sqns

LBTRU_VERSION = 0
LBTRU_TYPE_DATA = 0x0
LBTRU_TYPE_SM = 0x2
LBTRU_TYPE_NAK = 0x3
LBTRU_TYPE_NCF = 0x4
LBTRU_TYPE_ACK = 0x5
LBTRU_TYPE_CREQ = 0x6
LBTRU_TYPE_RST = 0x7

NHDR_DATA = 0x00
NHDR_SID = 0x01
NHDR_CID = 0x02

FLAG_RETRANSMISSION = 0x4000      # DATA
FLAG_SYN = 0x8000                 # SM
CREQ_SYN = 0x0
RST_DEFAULT = 0x0
NAK_FORMAT_SELECTIVE = 0x0

# NCF reasons (reason_format's high nibble): LBT-RM's, with the same meaning
NCF_NO_RETRY = 0x0
NCF_IGNORED = 0x1
NCF_RX_DELAY = 0x2
NCF_SHED = 0x3

MAIN_HEADER = struct.Struct(">BBH")                     # 4
DATA_HEADER = struct.Struct(">BBHII")                   # main + DATA: 12
SM_HEADER = struct.Struct(">BBHIII")                    # main + SM: 16
NAK_HEADER = struct.Struct(">BBHHH")                    # main + NAK: 8
NCF_HEADER = struct.Struct(">BBHIHBB")                  # main + NCF: 12
ACK_HEADER = struct.Struct(">BBHI")                     # main + ACK: 8
OPTION = struct.Struct(">BBHI")                         # SID and CID: 8
SID_DATA_HEADER = struct.Struct(">BBHIIBBHI")           # DATA with its SID option: 20
HEADER_SIZE = SID_DATA_HEADER.size                      # what a DATA packet adds to its LBMC bytes
RETRANSMISSION_BYTE = 2                                 # where a DATA packet's RETRANSMISSION flag lives

MAX_LIST, MAX_DATAGRAM = sqn_lists.MAX_LIST, sqn_lists.MAX_DATAGRAM


@dataclass(frozen=True, slots=True)
class LbtruData:
    session_id: int
    sqn: int
    trail_sqn: int
    payload: memoryview | bytes      # the LBMC messages
    flags: int = 0

    @property
    def retransmission(self) -> bool:
        return bool(self.flags & FLAG_RETRANSMISSION)


@dataclass(frozen=True, slots=True)
class LbtruSm:
    session_id: int
    sm_sqn: int
    lead_sqn: int
    trail_sqn: int
    syn: bool = False


@dataclass(frozen=True, slots=True)
class LbtruNak:
    session_id: int
    client_id: int
    sqns: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LbtruNcf:
    session_id: int
    trail_sqn: int
    reason: int
    sqns: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LbtruAck:
    session_id: int
    client_id: int
    ack_sqn: int


@dataclass(frozen=True, slots=True)
class LbtruCreq:
    session_id: int
    client_id: int
    request: int = CREQ_SYN


@dataclass(frozen=True, slots=True)
class LbtruRst:
    reason: int = RST_DEFAULT
    session_id: int | None = None    # RST names no session (see the module's note)


LbtruPacket = LbtruData | LbtruSm | LbtruNak | LbtruNcf | LbtruAck | LbtruCreq | LbtruRst


def _ver_type(packet_type: int) -> int:
    return (LBTRU_VERSION << 4) | packet_type


def _options(session_id: int, client_id: int | None = None) -> bytes:
    """The SID option, and a CID after it for what receivers send."""
    if client_id is None:
        return OPTION.pack(NHDR_DATA, OPTION.size, 0, session_id)
    return OPTION.pack(NHDR_CID, OPTION.size, 0, session_id) + OPTION.pack(NHDR_DATA, OPTION.size, 0, client_id)


def data_header(session_id: int, sqn: int, trail_sqn: int, flags: int = 0) -> bytes:
    """The 20 bytes before a DATA packet's LBMC messages: header, {sqn, trail}, SID option.
    Sequence numbers wrap; a session id that does not fit 32 bits is a WireError."""
    try:
        return SID_DATA_HEADER.pack(_ver_type(LBTRU_TYPE_DATA), NHDR_SID, flags & FLAG_RETRANSMISSION,
                                    sqn & 0xFFFFFFFF, trail_sqn & 0xFFFFFFFF, NHDR_DATA, OPTION.size, 0, session_id)
    except struct.error as err:
        raise WireError(f"LBT-RU DATA header: {err}") from None


def encode_lbtru_data(session_id: int, sqn: int, payload, trail_sqn: int | None = None, flags: int = 0) -> bytes:
    """One DATA datagram around `payload` (whole LBMC messages)."""
    head = data_header(session_id, sqn, sqn if trail_sqn is None else trail_sqn, flags)
    return fits(head + bytes(payload), "LBT-RU", "DATA")


def encode_lbtru_sm(session_id: int, sm_sqn: int, lead_sqn: int, trail_sqn: int, syn: bool = False) -> bytes:
    try:
        return SM_HEADER.pack(_ver_type(LBTRU_TYPE_SM), NHDR_SID, FLAG_SYN if syn else 0, sm_sqn & 0xFFFFFFFF,
                              lead_sqn & 0xFFFFFFFF, trail_sqn & 0xFFFFFFFF) + _options(session_id)
    except struct.error as err:
        raise WireError(f"LBT-RU SM: {err}") from None


def encode_lbtru_nak(session_id: int, client_id: int, sqns) -> bytes:
    """A selective NAK for `sqns`, from client `client_id` of session `session_id`."""
    body = pack_sqns(sqns, "LBT-RU")
    try:
        head = NAK_HEADER.pack(_ver_type(LBTRU_TYPE_NAK), NHDR_SID, 0, len(sqns), NAK_FORMAT_SELECTIVE)
        options = _options(session_id, client_id)
    except struct.error as err:
        raise WireError(f"LBT-RU NAK: {err}") from None
    return fits(head + body + options, "LBT-RU", "NAK")


def encode_lbtru_ncf(session_id: int, trail_sqn: int, reason: int, sqns) -> bytes:
    """A NAK confirmation: the source will not (now) retransmit `sqns`, for `reason`."""
    body = pack_sqns(sqns, "LBT-RU")
    try:
        head = NCF_HEADER.pack(_ver_type(LBTRU_TYPE_NCF), NHDR_SID, 0, trail_sqn & 0xFFFFFFFF, len(sqns), 0,
                               (reason & 0x0F) << 4 | NAK_FORMAT_SELECTIVE)
        options = _options(session_id)
    except struct.error as err:
        raise WireError(f"LBT-RU NCF: {err}") from None
    return fits(head + body + options, "LBT-RU", "NCF")


def encode_lbtru_ack(session_id: int, client_id: int, ack_sqn: int) -> bytes:
    try:
        return ACK_HEADER.pack(_ver_type(LBTRU_TYPE_ACK), NHDR_SID, 0, ack_sqn & 0xFFFFFFFF) + \
            _options(session_id, client_id)
    except struct.error as err:
        raise WireError(f"LBT-RU ACK: {err}") from None


def encode_lbtru_creq(session_id: int, client_id: int) -> bytes:
    try:
        return MAIN_HEADER.pack(_ver_type(LBTRU_TYPE_CREQ), NHDR_SID, CREQ_SYN) + _options(session_id, client_id)
    except struct.error as err:
        raise WireError(f"LBT-RU CREQ: {err}") from None


def encode_lbtru_rst(reason: int = RST_DEFAULT) -> bytes:
    try:
        return MAIN_HEADER.pack(_ver_type(LBTRU_TYPE_RST), NHDR_DATA, reason)
    except struct.error as err:
        raise WireError(f"LBT-RU RST: {err}") from None


def _read_options(view: memoryview, offset: int, next_hdr: int) -> tuple[int, dict[int, int]]:
    """Walk the option chain from `offset`: (where the payload starts, {header type: value})."""
    values: dict[int, int] = {}
    while next_hdr != NHDR_DATA:
        if len(view) < offset + 2:
            raise WireError(f"LBT-RU: option header truncated at offset {len(view)}")
        following, length = view[offset], view[offset + 1]
        if next_hdr not in (NHDR_SID, NHDR_CID):
            raise WireError(f"LBT-RU: unknown option 0x{next_hdr:02x} at offset {offset}")
        if length != OPTION.size:
            raise WireError(f"LBT-RU: option 0x{next_hdr:02x} at offset {offset} has length {length} "
                            f"(it is {OPTION.size})")
        if len(view) < offset + OPTION.size:
            raise WireError(f"LBT-RU: option 0x{next_hdr:02x} truncated at offset {len(view)}")
        if next_hdr in values:
            raise WireError(f"LBT-RU: option 0x{next_hdr:02x} repeated at offset {offset}")
        values[next_hdr] = OPTION.unpack_from(view, offset)[3]
        next_hdr = following
        offset += length
    return offset, values


def _session(values: dict[int, int], what: str, offset: int) -> int:
    if NHDR_SID not in values:
        raise WireError(f"LBT-RU {what}: no session id option (SID) after offset {offset}")
    return values[NHDR_SID]


def _client(values: dict[int, int], what: str, offset: int) -> int:
    if NHDR_CID not in values:
        raise WireError(f"LBT-RU {what}: no client id option (CID) after offset {offset}")
    return values[NHDR_CID]


_unpack_sid_data_header = SID_DATA_HEADER.unpack_from
_DATA_VER_TYPE = (LBTRU_VERSION << 4) | LBTRU_TYPE_DATA


def peek_new_data(datagram) -> tuple[int, int] | None:
    """(session id, sequence number) of new DATA (not a retransmission) in the form every source
    sends, its session id the only option and its LBMC bytes after HEADER_SIZE, read from the
    header alone: a receiver's shortcut for a steady session (router.um.session_socket). None:
    anything else, for decode_lbtru."""
    if len(datagram) < HEADER_SIZE:
        return None
    (ver_type, next_hdr, flags, sqn, _trail, option_next, option_length, _option_flags,
     session_id) = _unpack_sid_data_header(datagram)
    if (ver_type != _DATA_VER_TYPE or next_hdr != NHDR_SID or option_next != NHDR_DATA
            or option_length != OPTION.size or flags & FLAG_RETRANSMISSION):
        return None
    return session_id, sqn


def decode_lbtru(datagram) -> LbtruPacket:
    """Any LBT-RU packet; WireError naming the offset of what is wrong."""
    view = memoryview(datagram)
    if len(view) < MAIN_HEADER.size:
        raise WireError(f"LBT-RU: header truncated at offset {len(view)} (it needs {MAIN_HEADER.size} bytes)")
    ver_type, next_hdr, flags = MAIN_HEADER.unpack_from(view)
    if ver_type >> 4 != LBTRU_VERSION:
        raise WireError(f"LBT-RU: version {ver_type >> 4} at offset 0 (only 0 exists)")
    kind = ver_type & 0x0F
    if kind == LBTRU_TYPE_RST:
        if next_hdr != NHDR_DATA:
            raise WireError(f"LBT-RU RST: next header 0x{next_hdr:02x} at offset 1 (an RST carries no options)")
        return LbtruRst(flags)
    if kind == LBTRU_TYPE_DATA:
        fixed, what = DATA_HEADER, "DATA"
    elif kind == LBTRU_TYPE_SM:
        fixed, what = SM_HEADER, "SM"
    elif kind == LBTRU_TYPE_NAK:
        fixed, what = NAK_HEADER, "NAK"
    elif kind == LBTRU_TYPE_NCF:
        fixed, what = NCF_HEADER, "NCF"
    elif kind == LBTRU_TYPE_ACK:
        fixed, what = ACK_HEADER, "ACK"
    elif kind == LBTRU_TYPE_CREQ:
        fixed, what = MAIN_HEADER, "CREQ"
    else:
        raise WireError(f"LBT-RU: packet type {kind} at offset 0 is not DATA, SM, NAK, NCF, ACK, CREQ or RST")
    if len(view) < fixed.size:
        raise WireError(f"LBT-RU: {what} header truncated at offset {len(view)} (it needs {fixed.size} bytes)")
    fields = fixed.unpack_from(view)
    offset = fixed.size
    sqns: tuple[int, ...] = ()
    if kind == LBTRU_TYPE_NAK:
        count, fmt = fields[3:5]
        if fmt & 0x0F != NAK_FORMAT_SELECTIVE:
            raise WireError(f"LBT-RU NAK: format {fmt & 0x0F} at offset 6 (only selective NAKs are sent)")
        sqns = read_sqns(view, offset, count, "LBT-RU", what)
        offset += 4 * count
    elif kind == LBTRU_TYPE_NCF:
        count, reason_format = fields[4], fields[6]
        if reason_format & 0x0F != NAK_FORMAT_SELECTIVE:
            raise WireError(f"LBT-RU NCF: format {reason_format & 0x0F} at offset 11 (only selective)")
        sqns = read_sqns(view, offset, count, "LBT-RU", what)
        offset += 4 * count
    options_at = offset
    offset, values = _read_options(view, offset, next_hdr)
    if kind == LBTRU_TYPE_DATA:
        return LbtruData(_session(values, what, options_at), fields[3], fields[4], view[offset:],
                         flags & FLAG_RETRANSMISSION)
    if kind == LBTRU_TYPE_SM:
        return LbtruSm(_session(values, what, options_at), fields[3], fields[4], fields[5], bool(flags & FLAG_SYN))
    if kind == LBTRU_TYPE_NAK:
        return LbtruNak(_session(values, what, options_at), _client(values, what, options_at), sqns)
    if kind == LBTRU_TYPE_NCF:
        return LbtruNcf(_session(values, what, options_at), fields[3], fields[6] >> 4, sqns)
    if kind == LBTRU_TYPE_ACK:
        return LbtruAck(_session(values, what, options_at), _client(values, what, options_at), fields[3])
    return LbtruCreq(_session(values, what, options_at), _client(values, what, options_at), flags)
