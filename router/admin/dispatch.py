"""One place that turns a request into a reply: envelope, command, properties, errors.

Every failure becomes a reply with a stable error number (protocol.Errno): garbage, an unknown
command, a bad property, a command's own AdminError, or a bug (COMMAND_FAILED, logged with its
traceback). Nothing a client sends can raise out of here into the supervisor's loop.
"""
from __future__ import annotations

import logging
from typing import Callable

from router.admin.commands import commands as registered_commands
from router.admin.protocol import AdminError, Errno, decode_request, encode_reply

log = logging.getLogger(__name__)


class Reply:
    """Answers one request exactly once, now or later (asynchronous commands keep it)."""

    def __init__(self, request_id, command: str, send: Callable[[bytes], None]):
        self.request_id, self.command, self._send = request_id, command, send
        self.sent = False

    def ok(self, data) -> None:
        self._answer(data, Errno.OK, "")

    def error(self, errno: Errno, reason: str) -> None:
        self._answer(None, errno, reason)

    def fail(self, err: BaseException) -> None:
        errno, reason = error_of(err, self.command)
        self.error(errno, reason)

    def run(self, function: Callable, *args) -> None:
        """Reply with what `function` returns, or with the error it raises."""
        try:
            data = function(*args)
        except Exception as err:
            self.fail(err)
        else:
            self.ok(data)

    def _answer(self, data, errno: Errno, reason: str) -> None:
        if self.sent:
            return
        self.sent = True
        try:
            payload = encode_reply(self.request_id, data, errno, reason)
        except Exception as err:       # data a command returned that msgpack cannot carry: a bug
            log.exception("admin: the reply to %r could not be encoded", self.command)
            payload = encode_reply(self.request_id, None, Errno.COMMAND_FAILED,
                                   f"{self.command}: reply not encodable: {type(err).__name__}")
        self._send(payload)


def error_of(err: BaseException, command: str) -> tuple[Errno, str]:
    if isinstance(err, AdminError):
        return err.errno, err.reason
    log.error("admin command %r failed", command, exc_info=err)
    return Errno.COMMAND_FAILED, f"{command} failed: {type(err).__name__}: {err}"


def dispatch(supervisor, payload: bytes, send: Callable[[bytes], None], commands: dict | None = None) -> None:
    """Handle one request payload; `send(reply_bytes)` is called exactly once, maybe later."""
    reply = Reply(None, "?", send)
    try:
        request = decode_request(payload)
        reply.request_id, reply.command = request.id, request.command
        command = (commands if commands is not None else registered_commands()).get(request.command)
        if command is None:
            known = ", ".join(sorted(commands if commands is not None else registered_commands()))
            raise AdminError(Errno.UNKNOWN_COMMAND, f"unknown command '{request.command[:64]}' (commands: {known})")
        props = command.validate(request.props)
        command.start(supervisor, props, reply)
    except Exception as err:
        reply.fail(err)


def malformed(send: Callable[[bytes], None], reason: str) -> None:
    """For requests the server rejects before dispatch (wrong frame layout)."""
    send(encode_reply(None, None, Errno.MALFORMED_REQUEST, reason))
