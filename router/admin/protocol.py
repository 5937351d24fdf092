"""The admin socket's envelope, shared by the daemon and routerctl.

    request: msgpack map {"id": int|str|nil, "command": str, "props": map}
    reply:   msgpack map {"id": <the request's id>, "status": "ok"|"error",
                          "errno": int, "reason": str, "data": <command-specific>}

A request is one ZeroMQ frame (after a REQ socket's empty delimiter, if any). Error numbers are
part of the interface: scripts compare them, so a number never changes meaning once released.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import msgpack

from router.um.wire._codec import TEXT_ERRORS

# Commands are small; anything bigger is a mistake or an attack, answered without being parsed.
MAX_REQUEST_BYTES = 64 * 1024
# Longer than this and an id is not an id: it is echoed in every reply, so it is bounded too.
MAX_ID_LENGTH = 256


class Errno(IntEnum):
    OK = 0
    MALFORMED_REQUEST = 1       # not msgpack, not a map, wrong field types, several frames
    REQUEST_TOO_LARGE = 2
    UNKNOWN_COMMAND = 3
    INVALID_PROPERTY = 4        # unknown, missing or mistyped property
    UNKNOWN_PORTAL = 5
    CONFIG_INVALID = 6          # reload rejected: the old configuration keeps running
    COMMAND_FAILED = 99         # a bug: the reason says what; the daemon keeps serving


class AdminError(Exception):
    """A failure with a stable number; anything else a command raises becomes COMMAND_FAILED."""

    def __init__(self, errno: Errno, reason: str):
        super().__init__(reason)
        self.errno = Errno(errno)
        self.reason = reason


@dataclass
class Request:
    id: int | str | None
    command: str
    props: dict = field(default_factory=dict)


def encode_request(request_id, command: str, props: dict | None = None) -> bytes:
    return msgpack.packb({"id": request_id, "command": command, "props": props or {}}, use_bin_type=True,
                         unicode_errors=TEXT_ERRORS)


def decode_request(payload: bytes) -> Request:
    """Parse and check the envelope (not the command's properties); raises AdminError."""
    if len(payload) > MAX_REQUEST_BYTES:
        raise AdminError(Errno.REQUEST_TOO_LARGE,
                         f"request of {len(payload)} bytes; the limit is {MAX_REQUEST_BYTES}")
    try:
        message = msgpack.unpackb(payload, raw=False, strict_map_key=False, unicode_errors=TEXT_ERRORS)
    except Exception as err:        # msgpack raises many types for garbage; all mean the same
        raise AdminError(Errno.MALFORMED_REQUEST, f"not a msgpack message: {type(err).__name__}") from None
    if not isinstance(message, dict):
        raise AdminError(Errno.MALFORMED_REQUEST, "a request is a msgpack map {id, command, props}")
    request_id = message.get("id")
    if not valid_id(request_id):
        raise AdminError(Errno.MALFORMED_REQUEST, "'id' must be an integer, a short string or nil")
    command = message.get("command")
    if not isinstance(command, str) or not command:
        raise AdminError(Errno.MALFORMED_REQUEST, "'command' must be a non-empty string")
    props = message.get("props", {})
    if props is None:
        props = {}
    if not isinstance(props, dict) or not all(isinstance(key, str) for key in props):
        raise AdminError(Errno.MALFORMED_REQUEST, "'props' must be a map with string keys")
    unknown = set(message) - {"id", "command", "props"}
    if unknown:
        raise AdminError(Errno.MALFORMED_REQUEST, f"unknown envelope fields: {sorted(map(str, unknown))}")
    return Request(request_id, command, props)


def valid_id(request_id) -> bool:
    if request_id is None or (isinstance(request_id, int) and not isinstance(request_id, bool)):
        return request_id is None or -(2 ** 63) <= request_id < 2 ** 64
    return isinstance(request_id, str) and len(request_id) <= MAX_ID_LENGTH


def encode_reply(request_id, data=None, errno: Errno = Errno.OK, reason: str = "") -> bytes:
    reply = {"id": request_id if valid_id(request_id) else None,
             "status": "ok" if errno == Errno.OK else "error",
             "errno": int(errno), "reason": reason, "data": data}
    return msgpack.packb(reply, use_bin_type=True, unicode_errors=TEXT_ERRORS)


def decode_reply(payload: bytes) -> dict:
    reply = msgpack.unpackb(payload, raw=False, strict_map_key=False, unicode_errors=TEXT_ERRORS)
    if not isinstance(reply, dict) or "status" not in reply:
        raise ValueError("not an admin reply")
    return reply
