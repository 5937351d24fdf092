"""Reading a UDP socket from the loop: what every datagram receiver here (topic resolution,
immediate messages, LBT-RM sessions and their NAKs) does when its socket becomes readable.

A readiness event takes at most `limit` datagrams, so one busy socket cannot starve the loop's
others; what is left waits for the next event. A receive error ends the batch and is logged, never
raised (the socket stays registered; a lasting error shows again at the next event). A socket that
a datagram of the batch got closed (its session ended) ends the batch quietly.
"""
from __future__ import annotations

import logging
import socket
from typing import Iterator

log = logging.getLogger(__name__)

MAX_DATAGRAM = 65536


def pending_datagrams(sock: socket.socket, limit: int, what: str) -> Iterator[tuple[bytes, tuple]]:
    """(datagram, sender address) for each datagram waiting on `sock`, up to `limit`; `what`
    names the socket in the log line of a receive error."""
    for _ in range(limit):
        if sock.fileno() < 0:
            return
        try:
            yield sock.recvfrom(MAX_DATAGRAM, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as err:
            log.warning("%s: receive failed: %s", what, err)
            return
