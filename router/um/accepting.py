"""Taking every connection a non-blocking listener has ready (the loops' readable callback).

A listener's fd is readable once for several waiting connections: accept until it would block.
A failed accept (EMFILE and friends) is logged, not raised: the loop tries again on the next
readiness. A connection the client already abandoned (ECONNABORTED, EPROTO) is skipped quietly.
"""
from __future__ import annotations

import errno
import logging
import socket
from typing import Iterator

log = logging.getLogger(__name__)


def accept_pending(listener: socket.socket, what: str) -> Iterator[tuple[socket.socket, tuple]]:
    """Yield (non-blocking socket, peer address) for each connection waiting on `listener`."""
    while True:
        try:
            sock, peer = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as err:
            if err.errno not in (errno.ECONNABORTED, errno.EPROTO):
                log.warning("%s: accept failed: %s", what, err)
            return
        sock.setblocking(False)
        yield sock, peer
