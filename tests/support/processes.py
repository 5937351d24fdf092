"""Starting the project's command-line tools as real processes, and always stopping them."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class Tool:
    """A running tool. Its output is read as it comes, so a test can wait for a line (a BOS, a
    readiness message) while it runs; `result()` waits for exit and parses its --json line."""

    def __init__(self, module: str, args: list[str], env: dict | None = None):
        self.argv = [sys.executable, "-m", module, *map(str, args)]
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                     env={**os.environ, **(env or {})})
        self.stdout_lines: list[str] = []
        self.stderr_lines: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.stdout_lines), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr_lines), daemon=True)]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.stderr_lines)

    def wait_for_stderr(self, text: str, timeout: float) -> None:
        wait_for(lambda: any(text in line for line in list(self.stderr_lines)) or self.proc.poll() is not None,
                 timeout, message=f"{text!r} from {self.argv[2]}")
        if not any(text in line for line in self.stderr_lines):
            raise AssertionError(f"{self.argv} exited ({self.proc.returncode}) before printing {text!r}:\n{self.stderr}")

    def send_line(self, line: str = "go") -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def result(self, timeout: float = 60.0) -> dict:
        """The last --json line, once the tool has exited 0."""
        return self.result_lines(timeout)[-1]

    def result_lines(self, timeout: float = 60.0) -> list[dict]:
        """Every JSON line the tool printed, once it has exited 0 (a tool printing one per record)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"{self.argv} did not finish within {timeout} s\nstderr:\n{self.stderr}")
        for reader in self._readers:
            reader.join(5)
        out = "".join(self.stdout_lines)
        if self.proc.returncode != 0:
            raise AssertionError(f"{self.argv} exited {self.proc.returncode}\nstdout:\n{out}\nstderr:\n{self.stderr}")
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if not lines:
            raise AssertionError(f"{self.argv} printed no JSON\nstdout:\n{out}\nstderr:\n{self.stderr}")
        return [json.loads(line) for line in lines]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 5.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class ToolRunner:
    """Tracks every tool a test starts and kills what is left at the end."""

    def __init__(self):
        self.tools: list[Tool] = []

    def start(self, module: str, *args, env: dict | None = None) -> Tool:
        tool = Tool(module, list(args), env)
        self.tools.append(tool)
        return tool

    def umsrc(self, *args) -> Tool:
        return self.start("router.cli.umsrc", *args)

    def umrcv(self, *args) -> Tool:
        return self.start("router.cli.umrcv", *args)

    def umwrcv(self, *args) -> Tool:
        return self.start("router.cli.umwrcv", *args)

    def cleanup(self) -> None:
        for tool in self.tools:
            tool.stop(signal.SIGKILL, timeout=2)
            if tool.proc.stdin:
                try:
                    tool.proc.stdin.close()
                except OSError:
                    pass


def wait_for(condition, timeout: float, interval: float = 0.02, message: str = "condition") -> None:
    """Poll `condition` until it is true; fail with `message` at the deadline."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        time.sleep(interval)
