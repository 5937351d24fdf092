"""What a peer link's bytes pass through between the LBMC stream and the socket: nothing, LZ4
compression (`<compression>LZ4</compression>`), TLS (`<tls>`), or both (compressed, then encrypted).

PeerLink reads and writes through one of these instead of the socket. The plain stream is the
socket itself: the outbound queue's chunks go to `sendmsg` with no copy. The transformed stream
takes up to MAX_WRITE bytes of each write (as a socket, it may take a prefix), compresses and/or
encrypts them into its own buffer of wire bytes and writes what the socket takes; while that
buffer is above HIGH_WATER it refuses more (BlockingIOError), so the outbound queue and
`<max-queue>` still see the link's back-pressure.

TLS runs on memory BIOs (ssl.SSLObject, as asyncio does) so the link's own non-blocking socket
and event loop stay in charge. Both sides present a certificate and verify the other's against
`<trusted-certificates>` (the system store if absent); peers are addressed by IP, so no host name
is checked. The DRO's negotiation timeout is the link's handshake timeout (5 s). Failures surface
as OSError with a message saying what went wrong, which the link reports and counts as a failed
handshake or a lost link.

Compressed data travels as frames of `length u32 | LZ4 block` (the block carries its own
uncompressed size). Neither form can be read in Wireshark: that is what compression and encryption
are for; an uncompressed, unencrypted link decodes as LBMC (spec/wire.md §3).
"""
from __future__ import annotations

import ssl
import struct

import lz4.block

HIGH_WATER = 256 * 1024
# A write takes at most this many bytes of the queue's chunks (returning fewer, as a socket may):
# one compressed frame per write, and a backlog of many chunks must not make one larger than
# the companion's reader accepts (MAX_FRAME).
MAX_WRITE = 1024 * 1024
_FRAME = struct.Struct(">I")
# A frame or block larger than this is not one our companion wrote: the stream is corrupt.
MAX_FRAME = 16 * 1024 * 1024


class Incomplete(BlockingIOError):
    """Bytes came from the companion, but not yet a whole TLS record or LZ4 frame: nothing to hand
    on, yet the companion is alive (on a slow link one frame may take longer than the keepalive
    timeout to arrive)."""


class PlainStream:
    """The socket as it is."""

    pending = 0

    def __init__(self, sock):
        self.sock = sock

    def start(self) -> None:
        """Nothing to negotiate."""

    def recv(self, size: int) -> bytes:
        return self.sock.recv(size)

    def sendmsg(self, views) -> int:
        return self.sock.sendmsg(views)

    def flush(self) -> None:
        """Nothing is held."""


class TransformedStream:
    """LZ4 and/or TLS over a non-blocking socket."""

    def __init__(self, sock, compress: bool, tls: ssl.SSLContext | None, server_side: bool):
        self.sock = sock
        self.compress = compress
        self.outgoing = bytearray()            # wire bytes the socket has not taken yet
        self.held: list[bytes] = []            # written before TLS was up: sent once it is
        self.inflating = bytearray()           # compressed bytes received, not yet a whole frame
        self.tls = None
        if tls is not None:
            self.incoming_bio, self.outgoing_bio = ssl.MemoryBIO(), ssl.MemoryBIO()
            self.tls = tls.wrap_bio(self.incoming_bio, self.outgoing_bio, server_side=server_side)
        self.established = self.tls is None

    @property
    def pending(self) -> int:
        return len(self.outgoing)

    def start(self) -> None:
        """The client speaks first in TLS: send its hello."""
        if self.tls is not None and not self.tls.server_side:
            self._negotiate()
            self.flush()

    # -- sending ------------------------------------------------------------------------------------
    def sendmsg(self, views) -> int:
        if len(self.outgoing) >= HIGH_WATER:
            self.flush()
            if len(self.outgoing) >= HIGH_WATER:
                raise BlockingIOError("the link's wire buffer is full")
        taken, budget = [], MAX_WRITE
        for view in views:
            if len(view) >= budget:
                taken.append(view[:budget])
                break
            taken.append(view)
            budget -= len(view)
        data = b"".join(taken)
        size = len(data)                        # all of the views, or a prefix: what was taken
        if self.compress:
            block = lz4.block.compress(data, store_size=True)
            data = _FRAME.pack(len(block)) + block
        if self.established:
            self._emit(data)
            self.flush()
        else:
            self.held.append(data)
        return size

    def _emit(self, data: bytes) -> None:
        if self.tls is None:
            self.outgoing += data
            return
        try:
            self.tls.write(data)
        except ssl.SSLError as err:
            raise OSError(f"TLS: {err.reason or err}") from err
        self.outgoing += self.outgoing_bio.read()

    def flush(self) -> None:
        """Write what the socket takes now; OSError other than would-block is the caller's."""
        while self.outgoing:
            try:
                written = self.sock.send(self.outgoing)
            except BlockingIOError:
                return
            if not written:
                return
            del self.outgoing[:written]

    # -- receiving ----------------------------------------------------------------------------------
    def recv(self, size: int) -> bytes:
        """Plain bytes from the companion; b"" when it closed; Incomplete when the bytes that
        came were not yet enough (a partial TLS record or LZ4 frame, or TLS negotiation)."""
        raw = self.sock.recv(size)
        if not raw:
            return b""
        data = self._decrypt(raw) if self.tls is not None else raw
        if self.compress and data:
            data = self._inflate(data)
        if not data:
            raise Incomplete("nothing whole yet")
        return data

    def _decrypt(self, raw: bytes) -> bytes:
        self.incoming_bio.write(raw)
        if not self.established:
            self._negotiate()
        pieces = []
        while self.established:
            try:
                piece = self.tls.read(262144)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                break                       # close_notify: the socket's EOF follows
            except ssl.SSLError as err:
                raise OSError(f"TLS: {err.reason or err}") from err
            if not piece:
                break
            pieces.append(piece)
        if self.outgoing_bio.pending:       # e.g. session tickets after the handshake
            self.outgoing += self.outgoing_bio.read()
        self.flush()
        return b"".join(pieces)

    def _negotiate(self) -> None:
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError as err:
            detail = getattr(err, "verify_message", None)
            raise OSError(f"TLS negotiation failed: {err.reason or err}" + (f" ({detail})" if detail else "")) from err
        else:
            self.established = True
        self.outgoing += self.outgoing_bio.read()
        if self.established:
            held, self.held = self.held, []
            for data in held:
                self._emit(data)

    def _inflate(self, data: bytes) -> bytes:
        buf = self.inflating
        buf += data
        pieces, offset = [], 0
        while len(buf) - offset >= _FRAME.size:
            (length,) = _FRAME.unpack_from(buf, offset)
            if length > MAX_FRAME or length < 4:
                raise OSError(f"LZ4: corrupt compressed stream (frame of {length} bytes); "
                              f"is <compression> the same on both sides?")
            if len(buf) - offset - _FRAME.size < length:
                break
            start = offset + _FRAME.size
            if int.from_bytes(buf[start:start + 4], "little") > MAX_FRAME:
                raise OSError("LZ4: corrupt compressed stream (block too large)")
            try:
                pieces.append(lz4.block.decompress(bytes(buf[start:start + length])))
            except lz4.block.LZ4BlockError as err:
                raise OSError(f"LZ4: corrupt compressed stream ({err})") from err
            offset = start + length
        del buf[:offset]
        return b"".join(pieces)


def tls_context(config, server_side: bool) -> ssl.SSLContext:
    """The SSLContext for `<tls>` (router.config.model.TlsConfig); ValueError says which element
    OpenSSL could not use, and why."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server_side else ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED
    try:
        context.load_cert_chain(str(config.certificate), str(config.certificate_key),
                                password=config.certificate_key_password or None)
    except (ssl.SSLError, OSError) as err:
        raise ValueError(f"cannot use <certificate> '{config.certificate}' with <certificate-key> "
                         f"'{config.certificate_key}' ({_reason(err)}): not PEM, a key that does not match "
                         f"the certificate, or a wrong <certificate-key-password>") from None
    try:
        if config.trusted_certificates:
            context.load_verify_locations(cafile=str(config.trusted_certificates))
        else:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH if server_side else ssl.Purpose.SERVER_AUTH)
    except (ssl.SSLError, OSError) as err:
        raise ValueError(f"cannot read <trusted-certificates> '{config.trusted_certificates}' "
                         f"({_reason(err)}): PEM certificates expected") from None
    if config.cipher_suites:
        try:
            context.set_ciphers(config.cipher_suites)     # OpenSSL takes commas as separators too
        except ssl.SSLError:
            raise ValueError(f"<cipher-suites> '{config.cipher_suites}': OpenSSL knows none of these "
                             f"cipher suites") from None
    return context


def _reason(err: Exception) -> str:
    return getattr(err, "reason", None) or getattr(err, "strerror", None) or str(err)


def open_stream(sock, link, server_side: bool, contexts: dict):
    """The stream for one connection of `link` (router.config.model.SingleTcpLink); `contexts`
    caches the SSLContexts by side."""
    compress = link.compression == "lz4"
    if link.tls is None and not compress:
        return PlainStream(sock)
    context = None
    if link.tls is not None:
        context = contexts.get(server_side)
        if context is None:
            context = contexts[server_side] = tls_context(link.tls, server_side)
    return TransformedStream(sock, compress, context, server_side)
