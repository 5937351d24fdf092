"""`make demo`: the router on the seed's two-LAN example, on loopback.

Starts `tnwgd conf/demo-two-lans.xml`, a receiver in LAN2 and a source in LAN1 (100000 messages,
over LBT-RM in LAN1 and LBT-TCP in LAN2, as the seed's configuration files say), prints the
receiver's JSON summary and the router's per-portal counters; then a requester in LAN1 asks a
responder in LAN2 by its address (unicast immediate requests to TCP:2:ip:port, through the
router, answered the same way back); then runs the Spark pipeline over the statistics the router
wrote and says where the report is.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
CONFIG = CONF / "demo-two-lans.xml"
STATS = ROOT / "out" / "demo-stats"
REPORT = ROOT / "out" / "demo-report"
MESSAGES = 100_000
TOPIC = "demo.prices"
REQUESTS = 10
REQUEST_TOPIC = "demo.quotes"
LAN2_DOMAIN = 2                  # conf/demo-two-lans.xml
SHOWN_COUNTERS = ("transport_topic_fragments_rcvd", "transport_topic_fragments_forwarded",
                  "transport_topic_fragments_sent", "transport_topic_fragments_dropped_would_block",
                  "transport_topic_fragments_dropped_size_error", "proxy_receivers", "proxy_sources",
                  "local_interest_topics", "data_bytes_enqueued_max")


def spawn(*args: str, stdin=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", *args], stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)


def wait_line(proc: subprocess.Popen, text: str, timeout: float) -> None:
    """Read the process's stderr until `text` appears (it prints readiness and BOS lines there)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            raise RuntimeError(f"{proc.args[2]} exited before saying {text!r}")
        if text in line:
            return
    raise RuntimeError(f"{proc.args[2]} did not say {text!r} within {timeout} s")


def router_counters(router: subprocess.Popen) -> dict[str, dict[str, int]]:
    """The portals' counters, straight from the router's shared memory."""
    import numpy as np

    from router.config import load_gateway_config
    from router.ipc.shm import segment_name
    from router.monitor.counters import COUNTER_NAMES
    config = load_gateway_config(CONFIG)
    found = {}
    for index, portal in enumerate(config.portals):
        path = Path("/dev/shm") / segment_name(config.daemon.name, f"counters{index}", router.pid).lstrip("/")
        values = np.fromfile(path, dtype=np.int64)
        found[portal.name] = {n: int(v) for n, v in zip(COUNTER_NAMES, values) if n in SHOWN_COUNTERS}
    return found


def _ask_across(procs: list) -> dict:
    """umresp --unicast in LAN2, umreq --unicast TCP:2:ip:port from LAN1: umreq's summary and the target."""
    responder = spawn("router.cli.umresp", "-c", str(CONF / "lan2.cfg"), "--json", "-C", str(REQUESTS),
                      "--timeout", "60", "--unicast", REQUEST_TOPIC)
    procs.append(responder)
    deadline = time.monotonic() + 30
    target = None
    while target is None and time.monotonic() < deadline:
        line = responder.stderr.readline()
        if not line:
            raise RuntimeError("umresp exited before saying its address")
        if "unicast immediate requests to TCP:" in line:
            target = line.split("TCP:", 1)[1].split(" ", 1)[0]
    if target is None:
        raise RuntimeError("umresp did not say its address within 30 s")
    print(f"demo: a responder in LAN2 at {target}; a requester in LAN1 asks it through the router", flush=True)
    requester = spawn("router.cli.umreq", "-c", str(CONF / "lan1.cfg"), "--json", "-R", str(REQUESTS),
                      "--unicast", f"TCP:{LAN2_DOMAIN}:{target}", "--wait-timeout", "30", "--response-timeout", "10",
                      REQUEST_TOPIC)
    procs.append(requester)
    summary = json.loads(requester.communicate(timeout=120)[0].strip().splitlines()[-1])
    summary["target"] = target
    return summary


def main() -> int:
    import shutil
    shutil.rmtree(STATS, ignore_errors=True)
    print(f"demo: starting the router on {CONFIG} (LAN1 and LAN2 are loopback domains)", flush=True)
    router = spawn("router.cli.tnwgd", str(CONFIG))
    procs = [router]
    try:
        wait_line(router, "portals are up", 30)
        receiver = spawn("router.cli.umrcv", "-c", str(CONF / "lan2.cfg"), "--json", "-C", str(MESSAGES),
                         "--timeout", "120", TOPIC)
        source = spawn("router.cli.umsrc", "-c", str(CONF / "lan1.cfg"), "--json", "-M", str(MESSAGES), "-l", "64",
                       "--start-on-stdin", TOPIC, stdin=subprocess.PIPE)
        procs += [receiver, source]
        print(f"demo: receiver in LAN2 and source in LAN1 on topic {TOPIC}; waiting for the receiver to join "
              "the router's proxy source", flush=True)
        wait_line(receiver, "Beginning of Transport Session", 30)
        source.stdin.write("go\n")
        source.stdin.flush()
        sent = json.loads(source.communicate(timeout=120)[0].strip().splitlines()[-1])
        received = json.loads(receiver.communicate(timeout=120)[0].strip().splitlines()[-1])
        counters = router_counters(router)
        asked = _ask_across(procs)
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
    print(f"source (LAN1): sent {sent['sent']} messages at {sent['rate_msgs_per_s']:,.0f} msgs/s")
    print("receiver (LAN2):", json.dumps({k: v for k, v in received.items() if k != "per_source"}, indent=2))
    print("router counters by portal:", json.dumps(counters, indent=2))
    print(f"unicast immediate requests LAN1 -> LAN2 (TCP:{LAN2_DOMAIN}:{asked['target']}): {asked['requests']} "
          f"asked, {asked['answered']} answered, rtt p50 {asked['rtt_us']['p50']} us")
    ok = received["received"] == sent["sent"] and received["gaps"] == 0
    print("demo: OK, every message crossed the router" if ok else "demo: FAILED, messages were lost")
    answered = asked["answered"] == REQUESTS
    print("demo: OK, every request was answered across the router" if answered
          else "demo: FAILED, requests went unanswered")
    ok = ok and answered
    print(f"demo: analysing the router's statistics ({STATS}) with Spark...", flush=True)
    from spark_pipeline import run_report
    report = run_report(STATS, REPORT)
    print(f"demo: report written to {report}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
