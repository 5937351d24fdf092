"""`make demo`: traffic on loopback, with the receiver's JSON summary printed at the end.

A receiver and a source in the LAN1 domain (conf/lan1.cfg) exchange 100000 messages over LBT-TCP.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MESSAGES = 100_000


def tool(module: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE, text=True, cwd=ROOT)


def main() -> int:
    config = str(ROOT / "conf" / "lan1.cfg")
    print(f"demo: receiver and source on topic demo.prices in the LAN1 domain ({config})", flush=True)
    receiver = tool("router.cli.umrcv", "-c", config, "--json", "-C", str(MESSAGES), "--timeout", "120",
                    "demo.prices")
    source = tool("router.cli.umsrc", "-c", config, "--json", "-M", str(MESSAGES), "-l", "64", "demo.prices")
    try:
        sent = json.loads(source.communicate(timeout=120)[0].strip().splitlines()[-1])
        received = json.loads(receiver.communicate(timeout=120)[0].strip().splitlines()[-1])
    finally:
        for proc in (source, receiver):
            if proc.poll() is None:
                proc.kill()
    print(f"source:   sent {sent['sent']} messages at {sent['rate_msgs_per_s']:.0f} msgs/s")
    print("receiver:", json.dumps({k: v for k, v in received.items() if k != "per_source"}, indent=2))
    ok = received["received"] == sent["sent"] and received["gaps"] == 0
    print("demo: OK, every message arrived" if ok else "demo: FAILED, messages were lost")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
