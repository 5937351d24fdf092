"""LBT-IPC between real processes: a source's ring, receivers attached to it, EOS, cleanup."""
import glob
import signal

import pytest

from tests.support.processes import wait_for

pytestmark = pytest.mark.integration


def test_a_million_small_messages_over_lbt_ipc(tools, domain):
    receiver = tools.umrcv("-c", domain.config_path, "--json", "-C", 1_000_000, "--timeout", 300, "ipc.bulk")
    source = tools.umsrc("-c", domain.config_path, "--json", "-T", "lbtipc", "-M", 1_000_000, "-l", 64, "ipc.bulk")
    assert source.result(300)["sent"] == 1_000_000
    got = receiver.result(300)
    assert (got["received"], got["gaps"], got["duplicates"]) == (1_000_000, 0, 0), got
    assert got["um_sources"][0].startswith("LBT-IPC:")


def test_fragmented_messages_and_eos_when_the_source_closes(tools, domain):
    receiver = tools.umrcv("-c", domain.config_path, "--json", "-E", "--timeout", 120, "ipc.big")
    source = tools.umsrc("-c", domain.config_path, "--json", "-T", "lbtipc", "-M", 500, "-l", 150_000, "ipc.big")
    source.result(120)
    got = receiver.result(120)       # -E: it exits on the end-of-session record
    assert (got["received"], got["gaps"], got["eos"]) == (500, 0, 1), got


def test_a_killed_source_ends_the_stream_and_leaves_nothing_behind(tools, domain):
    receiver = tools.umrcv("-c", domain.config_path, "--json", "-E", "--timeout", 60, "ipc.doomed")
    source = tools.umsrc("-c", domain.config_path, "--json", "-T", "lbtipc", "-M", 10_000_000, "-P", 1000,
                         "ipc.doomed")
    receiver.wait_for_stderr("Beginning of Transport Session", 30)
    wait_for(lambda: glob.glob(f"/dev/shm/umr.lbtipc.{source.proc.pid}.*"), 10, message="the source's ring")
    source.proc.send_signal(signal.SIGKILL)
    source.proc.wait(10)            # reaped, as a shell would: no zombie keeps its pid alive
    got = receiver.result(60)       # the receiver notices the source process is gone
    assert got["eos"] == 1
    # The next LBT-IPC source on this host removes what the killed one left.
    from router.lbtipc.naming import allocate_xport_id
    allocate_xport_id(20001, 20005)
    assert not glob.glob(f"/dev/shm/umr.lbtipc.{source.proc.pid}.*")
