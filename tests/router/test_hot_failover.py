"""Hot failover through a router: two HF sources in LAN1, an HF receiver in LAN2. The router's
proxy sources forward each message with its origin's sequence number, so the receiver merges the
two streams as if it were in LAN1."""
import signal

import pytest

from tests.router.test_two_lans import bridge
from tests.support.processes import wait_for
from tests.um.test_hot_failover import COUNT, LENGTH, bytes_sent, start_hf_pair

pytestmark = pytest.mark.integration


def listed(numbers) -> str:
    return ",".join(str(n) for n in numbers)


def test_an_hf_source_killed_midway_behind_a_router_loses_nothing(routers, tools, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    bridge(routers, lan1, lan2)
    receiver, (doomed, survivor) = start_hf_pair(tools, lan1.config_path, "hf.routed", receiver_config=lan2.config_path)
    wait_for(lambda: bytes_sent(doomed) > COUNT * LENGTH // 2, 60, message="the first source half way")
    doomed.proc.send_signal(signal.SIGKILL)
    assert survivor.result(120)["sent"] == COUNT
    got = receiver.result(120)
    assert (got["received"], got["unique"], got["gaps"], got["duplicates"]) == (COUNT, COUNT, 0, 0), got
    assert got["unrecoverable_loss"] == 0
    assert got["hf_duplicates_discarded"] > 0, "the killed source's copies never crossed the router"


def test_hf_sources_skipping_different_numbers_behind_a_router_fill_each_other(routers, tools, make_domain):
    """Each source leaves out numbers the other sends: every number arrives once, in order, and
    none is reported lost. Were the proxy sources to number what they forward themselves, the
    numbers after a source's first skip would carry other messages, and the receiver would see
    them missing or twice."""
    lan1, lan2 = make_domain(), make_domain()
    bridge(routers, lan1, lan2)
    skipped_by_a, skipped_by_b = range(10, COUNT, 100), range(60, COUNT, 100)
    receiver, sources = start_hf_pair(tools, lan1.config_path, "hf.skips", "--hf-skip", listed(skipped_by_a),
                                      receiver_config=lan2.config_path, other=("--hf-skip", listed(skipped_by_b)))
    sent = [source.result(120)["sent"] for source in sources]
    assert sent == [COUNT - len(skipped_by_a), COUNT - len(skipped_by_b)]
    got = receiver.result(120)
    assert (got["received"], got["unique"], got["gaps"], got["duplicates"]) == (COUNT, COUNT, 0, 0), got
    assert got["out_of_order"] == 0 and got["unrecoverable_loss"] == 0
