"""The one error type the wire codecs raise.

Every decode function in :mod:`router.um.wire` turns any malformed input into a
:class:`WireError`; callers (resolvers, portals) catch exactly this type, count the
packet as malformed and carry on. Encoders raise it too, for values that do not fit
the wire (a port above 65535, a 9-byte context instance, a message over 64 KiB).
"""


class WireError(ValueError):
    """A packet that does not parse, or a value that cannot be encoded.

    The message names the structure and, when decoding, the byte offset at which
    parsing failed, e.g. ``"LBMR TIR: transport info truncated at offset 17"``.
    """
