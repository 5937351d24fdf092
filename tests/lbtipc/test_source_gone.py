"""An LBT-IPC receiver whose source is gone reads what the ring still holds, then ends (EOS):
a source that closed while the ring was full (its end record never written: a receiver behind,
a router's ring full), and a source process that died with records the receiver had not read
yet. Real contexts, rings and shared memory; the dead source is a process of its own."""
from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from router.ipc.shm import remove_stale
from router.lbtipc.source import RECORD_FRAMES, SLOTS
from router.um.context import Context
from tests.lbtipc.sessions import collect, joined_stream
from tests.support.processes import wait_for

pytestmark = pytest.mark.integration

_ALL = (1 << SLOTS) - 1


def test_a_source_closed_while_the_ring_was_full_still_ends_the_stream(domain):
    options = {**domain.overrides(), "transport_lbtipc_transmission_window_size": 1 << 20}
    with Context(**options) as receiving:
        got, events = collect(receiving, "ipc.full")
        sending = Context(transport="lbtipc", **options)
        try:
            source = sending.source("ipc.full")
            session = source.session
            stream = joined_stream(receiving)
            wait_for(lambda: session.receiver_count == 1, 10, message="the receiver reads the ring")
            source.send(b"first", flush=True)
            wait_for(lambda: got == [b"first"], 10, message="the first message")
            receiving.loop.call_and_wait(stream.pause)        # its consumer takes no more for now
            for n in range(3):
                source.send(b"unread %d" % n, flush=True)
            with session.lock:                                # and the ring fills up behind them
                while session.producer.offer(RECORD_FRAMES, b"", _ALL):
                    pass
        finally:
            sending.close()                                   # no room for its end record
        assert not os.path.exists(f"/dev/shm/{session.segment.name.lstrip('/')}")
        receiving.loop.call_and_wait(stream.resume)
        wait_for(lambda: "EOS" in events, 10, message="EOS once what the ring held is read")
    assert got == [b"first", b"unread 0", b"unread 1", b"unread 2"]
    assert events == ["BOS", "EOS"]


_DOOMED_SOURCE = textwrap.dedent("""
    import json, os, signal, sys
    from router.um.context import Context
    from tests.support.processes import wait_for
    options = json.loads(sys.argv[1])
    context = Context(transport="lbtipc", **options)
    source = context.source("ipc.doomed")
    wait_for(lambda: source.session.receiver_count >= 1, 20, message="the test's receiver to join")
    print("ready", flush=True)
    sys.stdin.readline()                 # the test's receiver has stopped reading
    for n in range(5):
        source.send(b"before death %d" % n, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_what_a_killed_source_wrote_is_read_before_the_stream_ends(domain):
    options = domain.overrides()
    with Context(**options) as receiving:
        got, events = collect(receiving, "ipc.doomed")
        process = subprocess.Popen([sys.executable, "-c", _DOOMED_SOURCE, json.dumps(options)], cwd=os.getcwd(),
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert process.stdout.readline() == "ready\n"
            stream = joined_stream(receiving)
            receiving.loop.call_and_wait(stream.pause)        # behind: nothing read yet
            process.stdin.write("go\n")
            process.stdin.flush()
            assert process.wait(30) == -signal.SIGKILL
            receiving.loop.call_and_wait(stream._check_source)   # its once-a-second look: the source is gone
            receiving.loop.call_and_wait(stream.resume)
            wait_for(lambda: "EOS" in events, 10, message="EOS")
            # The receiver that noticed removed what the dead source left in shared memory.
            assert not glob.glob(f"/dev/shm/umr.lbtipc.{process.pid}.*")
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)
            remove_stale(f"umr.lbtipc.{process.pid}")
    assert got == [b"before death %d" % n for n in range(5)]
    assert events == ["BOS", "EOS"]
