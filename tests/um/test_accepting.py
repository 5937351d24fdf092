"""Accepting connections from a loop: a process out of descriptors sets its listener aside for a
moment instead of spinning on it, and takes the waiting connection once it can."""
import os
import resource
import socket

from router.um.accepting import accept_pending, listen_in_range
from router.um.loop import EventLoop
from tests.support.processes import wait_for


def lowest_free_descriptor() -> int:
    listed = [int(name) for name in os.listdir("/proc/self/fd")]
    open_now = set()
    for fd in listed:                   # the listing's own descriptor is closed by now
        try:
            os.fstat(fd)
            open_now.add(fd)
        except OSError:
            pass
    return min(set(range(max(listed) + 2)) - open_now)


def test_a_listener_out_of_descriptors_pauses_then_accepts_the_waiting_connection(caplog):
    loop = EventLoop("accepting")
    loop.start_thread()
    listener = listen_in_range("127.0.0.1", [0])
    calls, accepted = [], []

    def on_readable() -> None:
        calls.append(1)
        accepted.extend(accept_pending(listener, "test listener", loop, on_readable))

    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        # No descriptor left for accept(): a new one takes the lowest free number, so the limit
        # is that number.
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free_descriptor(), hard))
        loop.call_and_wait(loop.add_reader, listener, on_readable)
        client.connect(listener.getsockname())          # queued in the listener's backlog
        wait_for(lambda: calls, 5, message="the listener's first readiness")
        wait_for(lambda: "not accepting for 1 s" in caplog.text, 5, message="the pause")
        # Paused, not spinning: the next look is a second later, so only a few calls by then.
        wait_for(lambda: len(calls) >= 2, 5, message="a second look after the pause")
        assert len(calls) <= 3 and not accepted, len(calls)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    wait_for(lambda: accepted, 5, message="the waiting connection, once a descriptor is free")
    for sock, _ in accepted:
        sock.close()
    client.close()
    loop.call_and_wait(loop.remove_reader, listener)
    listener.close()
    loop.close()
