"""routerctl stopped from outside: Ctrl-C while it waits for a reply, or its output piped into a
reader that leaves early (`routerctl topics | head`). A command line exits quietly then (130 for
Ctrl-C, 141 as if killed by SIGPIPE), never with a Python traceback."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest
import zmq

from router.admin.protocol import decode_request, encode_reply
from tests.support.processes import ROOT

pytestmark = pytest.mark.integration

DEADLINE = 30.0


class FakeAdminSocket:
    """A router's admin socket that counts the requests it gets and answers each with `data`, or
    not at all."""

    def __init__(self, path: str, data=None, answer: bool = True):
        self.endpoint = f"ipc://{path}"
        self.data, self.answer = data, answer
        self.received = threading.Event()
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind(self.endpoint)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self.socket.poll(50):
                continue
            identity, payload = self.socket.recv_multipart()
            request = decode_request(payload)
            self.received.set()
            if self.answer:
                self.socket.send_multipart([identity, encode_reply(request.id, self.data)])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(DEADLINE)
        self.socket.close()
        self.context.term()


def start_routerctl(*args, stdout=subprocess.PIPE) -> subprocess.Popen:
    # Buffered, as an operator's shell runs it: what is printed reaches the pipe at exit.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    return subprocess.Popen([sys.executable, "-m", "router.cli.routerctl", *args], stdout=stdout,
                            stderr=subprocess.PIPE, cwd=ROOT, env=env)


def test_ctrl_c_while_waiting_for_the_reply_exits_130_without_a_traceback(runtime_dir):
    server = FakeAdminSocket(os.path.join(runtime_dir, "silent.admin"), answer=False)
    ctl = start_routerctl("-s", server.endpoint, "--timeout", "600", "status", stdout=subprocess.DEVNULL)
    try:
        assert server.received.wait(DEADLINE), "routerctl did not send its request"
        ctl.send_signal(signal.SIGINT)
        _, stderr = ctl.communicate(timeout=DEADLINE)
        assert ctl.returncode == 130, stderr
        assert b"Traceback" not in stderr and b"KeyboardInterrupt" not in stderr, stderr.decode()
    finally:
        ctl.kill()
        ctl.wait()
        server.close()


READERS_LEAVING = {
    # `routerctl --json topics | head -1`: more than the pipe holds, written while routerctl runs.
    "a long reply": (["--json", "topics"], [{"topic": f"topic.{n}", "portal": "LAN1"} for n in range(20_000)]),
    # A short reply stays in Python's buffer until the exit flushes it.
    "a short reply": (["--json", "status"], {"router": "quiet"}),
}


@pytest.mark.parametrize("argv, data", READERS_LEAVING.values(), ids=READERS_LEAVING.keys())
def test_output_into_a_reader_that_left_exits_quietly(runtime_dir, argv, data):
    server = FakeAdminSocket(os.path.join(runtime_dir, "chatty.admin"), data=data)
    ctl = start_routerctl("-s", server.endpoint, *argv)
    try:
        ctl.stdout.close()                     # the reader leaves before routerctl writes
        _, stderr = ctl.communicate(timeout=DEADLINE)
        assert ctl.returncode == 128 + signal.SIGPIPE, stderr.decode()
        assert stderr == b"", stderr.decode()
    finally:
        ctl.kill()
        ctl.wait()
        server.close()
