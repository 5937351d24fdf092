"""tshark as the wire oracle: decode captures, collect expert info, capture live traffic.

Used by the wire-codec tests and by live-traffic tests. Every helper runs tshark once
per call, so put many packets in one capture and ask everything in one go. A missing
tshark is an error, never a skip: ``make test`` installs it (scripts/install-sysdeps.sh).

- :func:`decode` -> one dict per frame, ``field -> [values]`` (strings, as tshark shows them).
- :func:`expert_info` -> the ``-z expert`` rows at or above a severity (empty list = clean).
- :func:`expert_frames` -> which frames carry expert info, and what it says.
- :func:`assert_no_expert_info` -> pytest-friendly assertion with the details in the message.
- :class:`LiveCapture` -> ``with LiveCapture(path=...) as cap:`` captures on loopback.

``decode_as`` items are tshark ``-d`` arguments (``"udp.port==12965,lbmr"``) and ``prefs``
items are ``-o`` arguments (``"lbttcp.source_port_low:5555"``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

SEVERITIES = {"comment": 0x00100000, "chat": 0x00200000, "note": 0x00400000,
              "warn": 0x00600000, "error": 0x00800000}
_SEVERITY_NAMES = {value: name.capitalize() for name, value in SEVERITIES.items()}
_Z_EXPERT_SECTIONS = {"Errors": "error", "Warns": "warn", "Notes": "note", "Chats": "chat",
                      "Comments": "comment"}
_EXPERT_FIELDS = ("_ws.expert.severity", "_ws.expert.group", "_ws.expert.message")


class TsharkError(RuntimeError):
    """tshark is missing, failed, or printed something we cannot parse."""


# LiveCapture's canaries carry this payload. Their port is whatever the kernel gives, and a
# dissector registered on it (Elasticsearch's 54328, say) reads the canary as a malformed packet
# of its protocol: the expert checks leave them out by their bytes, whichever port they took.
CANARY_PAYLOAD = b"umrouter capture canary"
NOT_CANARY = f'!(udp contains "{CANARY_PAYLOAD.decode()}")'


def tshark_path() -> str:
    """Absolute path of tshark; raises TsharkError (a test failure, not a skip) if missing."""
    path = shutil.which("tshark") or ("/usr/bin/tshark" if os.access("/usr/bin/tshark", os.X_OK) else None)
    if path is None:
        raise TsharkError(
            "tshark is not installed; the wire tests need it as their oracle. "
            "Run `make sysdeps` (scripts/install-sysdeps.sh) or "
            "`DEBIAN_FRONTEND=noninteractive apt-get install -y tshark`.")
    return path


def _base_args(pcap_path, decode_as, prefs) -> list[str]:
    # Two passes: in one pass tshark flags the early pieces of a fragmented LBMC message as
    # "not reassembled" because the last piece has not been read yet. (They are still
    # flagged when no TIR for the LBT-TCP source is in the capture: the lbttcp channel then
    # differs between the passes, so pass two starts a fresh reassembly.)
    args = [tshark_path(), "-2", "-n", "-r", str(pcap_path)]
    for item in decode_as:
        args += ["-d", item]
    for item in prefs:
        args += ["-o", item]
    return args


def _run(args: list[str], timeout: float = 120.0) -> str:
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise TsharkError(f"tshark failed ({result.returncode}): {' '.join(args)}\n{result.stderr.strip()}")
    return result.stdout


def _flatten(node, out: dict) -> None:
    """Collect ``field -> [values]`` from a ``-T json --no-duplicate-keys`` layer tree."""
    for key, value in node.items():
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, dict):
                _flatten(item, out)
            elif not key.endswith("_tree"):
                out.setdefault(key, []).append(item)


def decode(pcap_path, decode_as: list[str], prefs: list[str] = (),
           fields: list[str] | None = None, display_filter: str | None = None) -> list[dict]:
    """Decode a capture; return one dict per frame mapping field name -> list of values.

    With ``fields`` only those are extracted (plus ``frame.number``); without, the whole
    tree is flattened, so every field tshark shows is present. Values are tshark's
    strings (``"14371"``, ``"10.0.0.5"``, ``"0x00001234"``, ``"-1"``).
    """
    args = _base_args(pcap_path, decode_as, prefs) + ["-T", "json", "--no-duplicate-keys"]
    if fields is not None:
        for name in ("frame.number", *fields):
            args += ["-e", name]
    if display_filter:
        args += ["-Y", display_filter]
    text = _run(args)
    try:
        packets = json.loads(text) if text.strip() else []
    except json.JSONDecodeError as exc:
        raise TsharkError(f"tshark printed invalid JSON: {exc}") from None
    frames = []
    for packet in packets:
        layers = packet["_source"]["layers"]
        if fields is not None:
            frames.append({key: list(value) for key, value in layers.items()})
        else:
            flat: dict = {}
            _flatten(layers, flat)
            frames.append(flat)
    return frames


def _parse_z_expert(text: str) -> list[str]:
    """Parse ``-q -z expert`` tables into ``"Severity/Group/Protocol: Summary (xN)"`` lines."""
    rows, severity = [], None
    for line in text.splitlines():
        stripped = line.strip()
        head = stripped.split(" (")[0]
        if head in _Z_EXPERT_SECTIONS and stripped.endswith(")"):
            severity = _SEVERITY_NAMES[SEVERITIES[_Z_EXPERT_SECTIONS[head]]]
            continue
        if not stripped or stripped.startswith("=") or stripped.startswith("Frequency"):
            continue
        parts = stripped.split(None, 3)
        if severity is None or len(parts) < 3 or not parts[0].isdigit():
            raise TsharkError(f"cannot parse tshark -z expert line: {line!r}")
        count, group, protocol = parts[:3]
        summary = parts[3] if len(parts) > 3 else ""
        rows.append(f"{severity}/{group}/{protocol}: {summary} (x{count})")
    return rows


def expert_info(pcap_path, decode_as: list[str], prefs: list[str] = (),
                min_severity: str = "note") -> list[str]:
    """The ``-z expert`` rows at or above ``min_severity``; an empty list means clean.

    The default ("note") leaves out TCP's chat-level "Connection establish request
    (SYN)" lines, which every capture of a real connection has. Malformed packets are
    errors, so they always show.
    """
    if min_severity not in SEVERITIES:
        raise ValueError(f"min_severity must be one of {sorted(SEVERITIES)}")
    args = _base_args(pcap_path, decode_as, prefs) + ["-q", "-z", f"expert,{min_severity},{NOT_CANARY}"]
    return _parse_z_expert(_run(args))


def expert_frames(pcap_path, decode_as: list[str], prefs: list[str] = (),
                  min_severity: str = "note") -> dict[int, list[str]]:
    """Frame number -> ``["Severity/group 0x..: message", ...]`` for frames with expert info."""
    threshold = SEVERITIES[min_severity]
    rows = decode(pcap_path, decode_as, prefs, fields=list(_EXPERT_FIELDS), display_filter=f"_ws.expert and {NOT_CANARY}")
    result: dict[int, list[str]] = {}
    for row in rows:
        severities = row.get("_ws.expert.severity", [])
        groups = row.get("_ws.expert.group", [])
        messages = row.get("_ws.expert.message", [])
        for i, severity in enumerate(severities):
            level = int(severity, 0)
            if level < threshold:
                continue
            group = int(groups[i], 0) if i < len(groups) else 0
            message = messages[i] if i < len(messages) else ""
            name = _SEVERITY_NAMES.get(level, hex(level))
            result.setdefault(int(row["frame.number"][0]), []).append(f"{name}/group 0x{group:08x}: {message}")
    return result


# What TCP's own analysis says of the kernel recovering a segment on a loaded loopback (a
# retransmission after an ACK came late, and the SACKs around it): the stack's behaviour, not a
# byte we wrote. The LBMC carried in those segments still has to reassemble and decode cleanly,
# which everything else the check looks at holds.
_TCP_RECOVERY = ("D-SACK Sequence", "This frame is a (suspected) retransmission",
                 "This frame is a (suspected) spurious retransmission",
                 "This frame is a (suspected) fast retransmission",
                 "This frame is a (suspected) out-of-order segment", "Duplicate ACK")


def _tcp_recovery(item: str) -> bool:
    """A row of expert_frames ("Severity/group 0x02000000: message", the Sequence group) or of
    expert_info ("Severity/Sequence/TCP: summary (xN)") that is TCP's loss recovery."""
    head, _, message = item.partition(": ")
    return head.endswith(("/group 0x02000000", "/Sequence/TCP")) and message.startswith(_TCP_RECOVERY)


def assert_no_expert_info(pcap_path, decode_as: list[str], prefs: list[str] = (),
                          min_severity: str = "note") -> None:
    """Fail (AssertionError) naming each offending frame and message. TCP's own loss recovery on
    loopback (_TCP_RECOVERY) is not ours, so it does not count."""
    frames = {number: kept for number, items in expert_frames(pcap_path, decode_as, prefs, min_severity).items()
              if (kept := [item for item in items if not _tcp_recovery(item)])}
    summary = [row for row in expert_info(pcap_path, decode_as, prefs, min_severity)
               if not _tcp_recovery(row)] if not frames else []
    if frames or summary:
        details = "\n".join(f"  frame {number}: {'; '.join(items)}" for number, items in sorted(frames.items()))
        raise AssertionError(f"tshark reports expert info in {pcap_path}:\n{details or summary}"
                             f"{_frames_around(pcap_path, decode_as, prefs, sorted(frames))}")


def _frames_around(pcap_path, decode_as, prefs, numbers: list[int]) -> str:
    """The TCP segments before and at the first offending frames (sequence numbers, lengths, TCP's
    own analysis): whether the capture began inside a message, missed a segment, or the bytes
    themselves are wrong is then told by the failure message, after the capture file is gone."""
    if not numbers:
        return ""
    first, last = max(1, numbers[0] - 5), numbers[min(len(numbers), 10) - 1]
    rows = decode(pcap_path, decode_as, prefs,
                  fields=["tcp.stream", "tcp.seq", "tcp.len", "_ws.col.Info"],
                  display_filter=f"frame.number >= {first} && frame.number <= {last}")
    lines = [" ".join(f"{name.rsplit('.', 1)[-1]}={','.join(row.get(name, []))}" for name in
                      ("frame.number", "tcp.stream", "tcp.seq", "tcp.len", "_ws.col.Info")) for row in rows[:40]]
    return "\nframes around them:\n  " + "\n  ".join(lines)


class LiveCapture:
    """Capture live traffic into ``path`` for the duration of a ``with`` block.

    ``__enter__`` returns only once the capture is proven live (tshark reports "Capturing
    on" and a canary datagram to a port of our own has reached the file), so nothing sent
    inside the block is missed; the canaries stay in the file (see :attr:`not_canary`).
    ``__exit__`` waits ``linger`` seconds for in-flight packets, stops tshark with SIGINT
    (then SIGTERM, then SIGKILL on its whole process group if it does not exit), and
    returns only when the process is gone and the file is complete.
    """

    def __init__(self, interface: str = "lo", capture_filter: str = "udp port 12345 or tcp port 14371",
                 path=None, start_timeout: float = 15.0, linger: float = 0.3) -> None:
        if path is None:
            raise ValueError("LiveCapture needs a path to write the capture to")
        self.interface, self.capture_filter = interface, capture_filter
        self.path = Path(path)
        self.start_timeout, self.linger = start_timeout, linger
        self.process: subprocess.Popen | None = None
        self.canary_port: int | None = None
        self._stderr: list[str] = []
        self._started = threading.Event()
        self._reader: threading.Thread | None = None

    def _read_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        for line in self.process.stderr:
            self._stderr.append(line)
            if "Capturing on" in line:
                self._started.set()
        self._started.set()     # EOF: wake the waiter; it checks whether tshark died

    def start(self) -> "LiveCapture":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # dumpcap says "Capturing on" a little before packets really reach the file: canary
        # datagrams to a port of our own prove the capture is live before the block runs.
        # They stay in the file: leave them out with ``display_filter=capture.not_canary``.
        canary = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        canary.bind(("127.0.0.1", 0))
        canary_port = self.canary_port = canary.getsockname()[1]
        capture_filter = f"({self.capture_filter}) or (udp dst port {canary_port})"
        # A kernel buffer of 16 MiB (dumpcap's default is 2): on a loaded machine dumpcap may wait
        # for a core while a test's burst arrives, and a packet dropped there breaks the TCP
        # reassembly of everything after it. What is dropped anyway fails the block (stop()).
        args = [tshark_path(), "-n", "-i", self.interface, "-B", "16", "-f", capture_filter, "-w", str(self.path)]
        # Own session: tshark and its dumpcap child form a group we can always clean up.
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True, start_new_session=True)
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        try:
            if not self._started.wait(self.start_timeout) or self.process.poll() is not None:
                raise TsharkError(f"tshark did not start capturing on {self.interface}:\n{''.join(self._stderr)}")
            self._wait_for_canary(canary, canary_port)
        except BaseException:
            self.stop()
            raise
        finally:
            canary.close()
        return self

    def _wait_for_canary(self, canary: socket.socket, port: int) -> None:
        deadline = time.monotonic() + self.start_timeout
        first_size = None
        while time.monotonic() < deadline:
            canary.sendto(CANARY_PAYLOAD, ("127.0.0.1", port))
            # dumpcap writes the file in ~4 KB blocks: one canary per 50 ms keeps the file
            # small (a dozen or so) while still proving the capture live within ~0.7 s.
            time.sleep(0.05)
            size = self.path.stat().st_size if self.path.exists() else 0
            if size and first_size is None:
                first_size = size
            elif first_size is not None and size > first_size:
                return
        raise TsharkError(f"no canary packet reached {self.path} within {self.start_timeout} s")

    def stop(self) -> None:
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            time.sleep(self.linger)
            process.send_signal(signal.SIGINT)     # tshark stops dumpcap and closes the file
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self._group_gone(process, wait=2.0):
                break
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
        process.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)
        self.process = None

    @property
    def dropped(self) -> int:
        """Packets the capture lost (tshark says "N packets dropped from lo" as it stops)."""
        return sum(int(line.split()[0]) for line in self._stderr
                   if " dropped from " in line and line.split()[0].isdigit())

    @staticmethod
    def _group_gone(process: subprocess.Popen, wait: float) -> bool:
        """True once no process of tshark's group (tshark, dumpcap) is left."""
        deadline = time.monotonic() + wait
        while True:
            process.poll()      # reap tshark itself so it does not linger as a zombie
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    @property
    def not_canary(self) -> str:
        """Display filter that hides the start-up canary datagrams (see :meth:`start`)."""
        return f"!(udp.dstport == {self.canary_port})" if self.canary_port else ""

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def __enter__(self) -> "LiveCapture":
        return self.start()

    def __exit__(self, exc_type, *exc) -> None:
        self.stop()
        if exc_type is None and self.dropped:
            raise TsharkError(f"the capture into {self.path} lost {self.dropped} packets (the machine too busy "
                              f"for dumpcap): what it holds cannot be checked\n{self.stderr}")
