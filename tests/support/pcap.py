"""Write classic pcap files from Python: Ethernet/IPv4/UDP datagrams and TCP streams.

Tests build packets with the project's encoders and hand the file to tshark, the
independent oracle (wire.md §4.3). Only ``struct`` is used; checksums are real (tshark
does not verify them by default, but a capture that looks like a real one keeps TCP
analysis quiet). A TCP stream starts with a three-way handshake, and every data
segment carries PSH/ACK with sequence and acknowledgement numbers that follow the bytes
sent, so tshark's reassembly and sequence analysis see a clean conversation.

    with PcapWriter(path) as pcap:
        pcap.udp(lbmr_bytes, ("127.0.0.1", 40000), ("127.0.0.1", 12965))
        stream = pcap.tcp_stream(("127.0.0.1", 40001), ("127.0.0.1", 14371))
        stream.send(lbmc_bytes, from_client=False)     # server -> client
"""

from __future__ import annotations

import socket
import struct
from typing import BinaryIO

LINKTYPE_ETHERNET = 1
SNAPLEN = 65535
MAX_TCP_SEGMENT = 65000          # payload bytes per segment; keeps IP total length < 65536
MAX_UDP_PAYLOAD = 65535 - 20 - 8

_GLOBAL_HEADER = struct.Struct("<IHHiIII")
_RECORD_HEADER = struct.Struct("<IIII")
_IPV4_HEADER = struct.Struct(">BBHHHBBH4s4s")
_UDP_HEADER = struct.Struct(">HHHH")
_TCP_HEADER = struct.Struct(">HHIIBBHHH")

TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK = 0x01, 0x02, 0x04, 0x08, 0x10
_SRC_MAC = bytes.fromhex("020000000001")
_DST_MAC = bytes.fromhex("020000000002")


def internet_checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f">{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _mac_for(ip: str) -> bytes:
    """Multicast IPv4 maps onto 01:00:5e + low 23 bits, as a real NIC would send it."""
    raw = socket.inet_aton(ip)
    if 224 <= raw[0] <= 239:
        return bytes((0x01, 0x00, 0x5E, raw[1] & 0x7F, raw[2], raw[3]))
    return _DST_MAC


def ethernet_frame(dst_ip: str, ip_packet: bytes) -> bytes:
    return _mac_for(dst_ip) + _SRC_MAC + b"\x08\x00" + ip_packet


def ipv4_packet(src: str, dst: str, protocol: int, payload: bytes, ident: int = 0, ttl: int = 64) -> bytes:
    total = 20 + len(payload)
    if total > 0xFFFF:
        raise ValueError(f"IPv4 packet of {total} bytes does not fit (fragmentation is not modelled)")
    src_raw, dst_raw = socket.inet_aton(src), socket.inet_aton(dst)
    header = _IPV4_HEADER.pack(0x45, 0, total, ident & 0xFFFF, 0x4000, ttl, protocol, 0, src_raw, dst_raw)
    checksum = internet_checksum(header)
    return header[:10] + struct.pack(">H", checksum) + header[12:] + payload


def _pseudo_header(src: str, dst: str, protocol: int, length: int) -> bytes:
    return socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack(">BBH", 0, protocol, length)


def udp_datagram(src: tuple[str, int], dst: tuple[str, int], payload: bytes, ident: int = 0) -> bytes:
    """An Ethernet frame carrying one IPv4/UDP datagram."""
    if len(payload) > MAX_UDP_PAYLOAD:
        raise ValueError(f"UDP payload of {len(payload)} bytes exceeds {MAX_UDP_PAYLOAD}")
    length = 8 + len(payload)
    header = _UDP_HEADER.pack(src[1], dst[1], length, 0)
    checksum = internet_checksum(_pseudo_header(src[0], dst[0], 17, length) + header + payload) or 0xFFFF
    segment = header[:6] + struct.pack(">H", checksum) + payload
    return ethernet_frame(dst[0], ipv4_packet(src[0], dst[0], 17, segment, ident))


def tcp_segment(src: tuple[str, int], dst: tuple[str, int], seq: int, ack: int, flags: int,
                payload: bytes = b"", window: int = 65535, ident: int = 0) -> bytes:
    """An Ethernet frame carrying one IPv4/TCP segment (20-byte TCP header, no options)."""
    header = _TCP_HEADER.pack(src[1], dst[1], seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4, flags, window, 0, 0)
    pseudo = _pseudo_header(src[0], dst[0], 6, len(header) + len(payload))
    checksum = internet_checksum(pseudo + header + payload)
    segment = header[:16] + struct.pack(">H", checksum) + header[18:] + payload
    return ethernet_frame(dst[0], ipv4_packet(src[0], dst[0], 6, segment, ident))


class PcapWriter:
    """A classic (microsecond, little-endian) pcap file with LINKTYPE_ETHERNET frames.

    Frames get increasing timestamps ``step`` seconds apart, starting at ``start``.
    """

    def __init__(self, path_or_file, start: float = 1_700_000_000.0, step: float = 0.001) -> None:
        self._owns = not hasattr(path_or_file, "write")
        self._file: BinaryIO = open(path_or_file, "wb") if self._owns else path_or_file
        self._file.write(_GLOBAL_HEADER.pack(0xA1B2C3D4, 2, 4, 0, 0, SNAPLEN, LINKTYPE_ETHERNET))
        # Integer microseconds, so timestamps do not drift (0.006999...) over many frames.
        self._micros = int(round(start * 1_000_000))
        self._step_micros = max(1, int(round(step * 1_000_000)))
        self._ident = 0
        self.frames = 0

    def write_frame(self, frame: bytes, ts: float | None = None) -> int:
        """Append one frame; returns its 1-based frame number (as tshark counts)."""
        if len(frame) > SNAPLEN:
            raise ValueError(f"frame of {len(frame)} bytes exceeds the snap length {SNAPLEN}")
        if ts is None:
            stamp = self._micros
            self._micros += self._step_micros
        else:
            stamp = int(round(ts * 1_000_000))
        seconds, micros = divmod(stamp, 1_000_000)
        self._file.write(_RECORD_HEADER.pack(seconds, micros, len(frame), len(frame)) + frame)
        self.frames += 1
        return self.frames

    def next_ident(self) -> int:
        self._ident = (self._ident + 1) & 0xFFFF
        return self._ident

    def udp(self, payload: bytes, src: tuple[str, int], dst: tuple[str, int]) -> int:
        """Write one UDP datagram; returns its frame number."""
        return self.write_frame(udp_datagram(src, dst, payload, self.next_ident()))

    def tcp_stream(self, client: tuple[str, int], server: tuple[str, int],
                   client_isn: int = 1000, server_isn: int = 5000, ack_each: bool = True) -> "TcpStream":
        """Open a TCP conversation (writes the three-way handshake now)."""
        return TcpStream(self, client, server, client_isn, server_isn, ack_each)

    def close(self) -> None:
        self._file.flush()
        if self._owns:
            self._file.close()

    def __enter__(self) -> "PcapWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class TcpStream:
    """One TCP conversation inside a :class:`PcapWriter`, tracking both sequence spaces."""

    def __init__(self, pcap: PcapWriter, client: tuple[str, int], server: tuple[str, int],
                 client_isn: int, server_isn: int, ack_each: bool) -> None:
        self.pcap = pcap
        self.client, self.server = client, server
        self.ack_each = ack_each
        # next sequence number each side will send
        self._next = {True: client_isn, False: server_isn}
        self._segment(True, TCP_SYN, b"", ack=0)
        self._next[True] += 1
        self._segment(False, TCP_SYN | TCP_ACK, b"")
        self._next[False] += 1
        self._segment(True, TCP_ACK, b"")
        self.closed = False

    def _segment(self, from_client: bool, flags: int, payload: bytes, ack: int | None = None) -> int:
        src, dst = (self.client, self.server) if from_client else (self.server, self.client)
        ack = self._next[not from_client] if ack is None else ack
        frame = tcp_segment(src, dst, self._next[from_client], ack, flags, payload,
                            ident=self.pcap.next_ident())
        return self.pcap.write_frame(frame)

    def send(self, data: bytes, from_client: bool = True, max_segment: int = MAX_TCP_SEGMENT) -> list[int]:
        """Send ``data`` as PSH/ACK segments of at most ``max_segment`` bytes.

        Returns the frame numbers of the data segments. With ``ack_each`` the peer
        acknowledges every segment, as a live receiver would.
        """
        if self.closed:
            raise ValueError("TCP stream already closed")
        if not 0 < max_segment <= MAX_TCP_SEGMENT:
            raise ValueError(f"max_segment must be in 1..{MAX_TCP_SEGMENT}")
        frames = []
        for start in range(0, len(data), max_segment):
            piece = data[start:start + max_segment]
            frames.append(self._segment(from_client, TCP_PSH | TCP_ACK, piece))
            self._next[from_client] += len(piece)
            if self.ack_each:
                self._segment(not from_client, TCP_ACK, b"")
        return frames

    def close(self) -> None:
        """FIN from the client, FIN/ACK from the server, final ACK."""
        self._segment(True, TCP_FIN | TCP_ACK, b"")
        self._next[True] += 1
        self._segment(False, TCP_FIN | TCP_ACK, b"")
        self._next[False] += 1
        self._segment(True, TCP_ACK, b"")
        self.closed = True


def write_udp_pcap(path, payloads: list[bytes], src: tuple[str, int] = ("127.0.0.1", 40000),
                   dst: tuple[str, int] = ("127.0.0.1", 12965)) -> list[int]:
    """Convenience: one datagram per payload, all on the same flow; returns frame numbers."""
    with PcapWriter(path) as pcap:
        return [pcap.udp(payload, src, dst) for payload in payloads]
