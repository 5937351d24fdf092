"""Process memory read from /proc: a process that grew its heap, and a process that is gone."""
import subprocess
import sys

from router.monitor.memory import FIELDS, process_memory

# Allocates and touches 64 MiB, says so, and waits.
GROW = ("import sys; b = bytearray(64 << 20); b[::4096] = b'x' * (len(b) // 4096); "
        "sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.read()")


def test_a_process_that_grows_its_heap_shows_it_in_private_memory():
    child = subprocess.Popen([sys.executable, "-c", GROW], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        grown = process_memory(child.pid)
        assert set(grown) == set(FIELDS) and grown["threads"] >= 1
        assert grown["private_bytes"] >= 64 << 20 and grown["rss_bytes"] >= grown["private_bytes"]
        assert grown["rss_peak_bytes"] >= grown["rss_bytes"] and grown["pss_bytes"] >= grown["private_bytes"]
    finally:
        child.stdin.close()
        child.wait(10)
    assert process_memory(child.pid) is None             # reaped: gone
