"""Shared primitives for the LBMR and LBMC codecs: a bounds-checked reader and checked packers.

Every read goes through :class:`Reader`, so running off the end of a buffer, a missing
NUL terminator or a bad length always surfaces as :class:`WireError` naming the structure
and the absolute byte offset, never as ``struct.error``/``IndexError``. Every write goes
through :func:`pack` (or the ``*_bytes`` helpers), so a value that does not fit its field
also surfaces as :class:`WireError` instead of ``struct.error``.

Text on these wires is a C string. We map bytes to ``str`` with UTF-8 and
``surrogateescape``: ASCII (the documented case) is unchanged, UTF-8 topic names work, and
any other byte still round-trips exactly instead of making a foreign packet undecodable.
"""

from __future__ import annotations

import operator
import socket
import struct

from router.um.wire.errors import WireError

# How wire text maps to str and back; what carries it inside the router (msgpack on the bus, in
# ring records, on the admin socket) uses the same, so a topic of any bytes crosses unchanged.
TEXT_ERRORS = "surrogateescape"

U8 = struct.Struct(">B")
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
U64 = struct.Struct(">Q")


class Reader:
    """A cursor over ``buf[pos:end]`` whose every read is bounds-checked."""

    __slots__ = ("buf", "pos", "end", "what")

    def __init__(self, buf: bytes, pos: int = 0, end: int | None = None, what: str = "packet") -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end
        self.what = what

    def fail(self, message: str, offset: int | None = None) -> WireError:
        """Build (not raise) a WireError that names this structure and an offset."""
        at = self.pos if offset is None else offset
        return WireError(f"{self.what}: {message} at offset {at}")

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def skip(self, n: int) -> int:
        """Advance by ``n`` bytes and return the offset where they start."""
        start = self.pos
        if n < 0 or start + n > self.end:
            raise self.fail(f"need {n} bytes, only {self.end - start} left")
        self.pos = start + n
        return start

    def unpack(self, layout: struct.Struct) -> tuple:
        return layout.unpack_from(self.buf, self.skip(layout.size))

    def u8(self) -> int:
        return self.buf[self.skip(1)]

    def u16(self) -> int:
        return U16.unpack_from(self.buf, self.skip(2))[0]

    def u32(self) -> int:
        return U32.unpack_from(self.buf, self.skip(4))[0]

    def take(self, n: int) -> bytes:
        start = self.skip(n)
        return bytes(self.buf[start:start + n])

    def ip(self) -> str:
        return socket.inet_ntoa(self.take(4))

    def cstring(self) -> str:
        """A NUL-terminated string; the NUL must lie before ``end``."""
        start = self.pos
        nul = self.buf.find(b"\x00", start, self.end)
        if nul < 0:
            raise self.fail("string has no NUL terminator", start)
        self.pos = nul + 1
        return text_from_bytes(self.buf[start:nul])

    def sub(self, n: int, what: str) -> "Reader":
        """A reader over the next ``n`` bytes (consumed from this one)."""
        start = self.skip(n)
        return Reader(self.buf, start, start + n, what)

    def expect_end(self) -> None:
        if self.pos != self.end:
            raise self.fail(f"{self.end - self.pos} unexpected trailing bytes")


def pack(layout: struct.Struct, what: str, *values) -> bytes:
    """``layout.pack(*values)``, with out-of-range values reported as WireError."""
    try:
        return layout.pack(*values)
    except (struct.error, TypeError) as exc:
        raise WireError(f"{what}: value does not fit the wire format ({exc})") from None


def ip_bytes(address: str, what: str, field: str = "") -> bytes:
    """Dotted-quad IPv4 text to 4 bytes; only the canonical form is accepted,
    so that decode(encode(x)) == x ("10.1" or "010.0.0.1" would not survive).
    An error names `what` (and `.field`, if given: the label is made only for an error)."""
    try:
        raw = socket.inet_aton(address)
    except (OSError, TypeError, ValueError):
        raise WireError(f"{_label(what, field)}: {address!r} is not an IPv4 address") from None
    if socket.inet_ntoa(raw) != address:
        raise WireError(f"{_label(what, field)}: {address!r} is not a canonical dotted-quad IPv4 address")
    return raw


def _label(what: str, field: str) -> str:
    return f"{what}.{field}" if field else what


def text_from_bytes(raw: bytes) -> str:
    return bytes(raw).decode("utf-8", TEXT_ERRORS)


def text_bytes(text: str, what: str, allow_nul: bool = False) -> bytes:
    """Encode wire text; refuses strings that could not decode back to themselves."""
    if not isinstance(text, str):
        raise WireError(f"{what}: expected str, got {type(text).__name__}")
    if text.isascii():
        raw = text.encode("ascii")
    else:
        try:
            raw = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            raise WireError(f"{what}: {text!r} cannot be encoded") from None
        if raw.decode("utf-8", "surrogateescape") != text:
            raise WireError(f"{what}: {text!r} would not decode back to itself")
    if not allow_nul and b"\x00" in raw:
        raise WireError(f"{what}: text must not contain NUL")
    return raw


def cstring_bytes(text: str, what: str) -> bytes:
    return text_bytes(text, what) + b"\x00"


def fixed_bytes(value: bytes, size: int, what: str, field: str = "") -> bytes:
    """An opaque fixed-size field (context instance, OTID...); errors as ip_bytes's."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise WireError(f"{_label(what, field)}: expected bytes, got {type(value).__name__}")
    value = bytes(value)
    if len(value) != size:
        raise WireError(f"{_label(what, field)}: must be exactly {size} bytes, got {len(value)}")
    return value


def as_bytes(data) -> bytes:
    """Accept bytes-like input at a decode entry point; anything else is a WireError."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)      # a memoryview of any format gives its raw bytes
    raise WireError(f"expected a bytes-like packet, got {type(data).__name__}")


def byte_indexable(data):
    """``data`` itself if ``data[i]`` is its i-th byte (bytes, bytearray, flat byte memoryview),
    else a bytes copy; so callers can index a large receive buffer without copying it."""
    if isinstance(data, (bytes, bytearray)):
        return data
    if isinstance(data, memoryview) and data.ndim == 1 and data.format in ("B", "b", "c"):
        return data if data.format == "B" else data.cast("B")
    return as_bytes(data)


_CODES = {"B": "B", "H": "H", "I": "I", "Q": "Q", "ip": "4s"}


class Layout:
    """A fixed, packed field layout shared by a record's encoder and decoder.

    ``spec`` lists ``name:code`` items, where code is B/H/I/Q (big-endian unsigned),
    ``ip`` (4 bytes <-> dotted str), ``Ns`` (N opaque bytes) or ``xN`` (N reserved
    bytes: written as zero, ignored when read, as the dissectors do). Declaring each
    layout once keeps field offsets in one place instead of in two hand-written codecs.
    """

    __slots__ = ("struct", "names", "ips", "blobs", "size", "_fields", "_converted")

    def __init__(self, spec: str) -> None:
        fmt = [">"]
        self.names: list[str] = []
        self.ips: set[int] = set()
        self.blobs: dict[int, int] = {}
        for item in spec.split():
            if ":" not in item:  # "xN": N reserved bytes
                fmt.append(f"{int(item[1:])}x")
                continue
            name, code = item.split(":")
            if code.endswith("s"):
                self.blobs[len(self.names)] = int(code[:-1])
                fmt.append(code)
            else:
                if code == "ip":
                    self.ips.add(len(self.names))
                fmt.append(_CODES[code])
            self.names.append(name)
        self.struct = struct.Struct("".join(fmt))
        self.size = self.struct.size
        # Every control message and every resolver record goes through here: the fields are read
        # in one call and only the ip and blob ones converted one by one (a label for an error is
        # made only for an error).
        getter = operator.attrgetter(*self.names) if self.names else (lambda record: ())
        self._fields = getter if len(self.names) != 1 else (lambda record: (getter(record),))
        self._converted = bool(self.ips or self.blobs)

    def encode(self, record, what: str) -> bytes:
        values = self._fields(record)
        if self._converted:
            values = list(values)
            names = self.names
            for i in self.ips:
                values[i] = ip_bytes(values[i], what, names[i])
            for i, size in self.blobs.items():
                values[i] = fixed_bytes(values[i], size, what, names[i])
        try:
            return self.struct.pack(*values)
        except (struct.error, TypeError):
            return pack(self.struct, what, *values)      # raises, naming the record

    def decode(self, reader: Reader) -> dict:
        values = reader.unpack(self.struct)
        if self.ips:
            values = list(values)
            for i in self.ips:
                values[i] = socket.inet_ntoa(values[i])
        return dict(zip(self.names, values))
