"""A portal's counters continue across a restart of its worker: none goes back, none stands still.

The counters' segment belongs to the supervisor, so /metrics, routerctl stats and the Parquet files
all promise totals since the portal was added. Some figures are kept first by objects of the worker
(its resolver channel, its transport sessions) that start again from zero: those must be added to
the totals, not copied over them.
"""
import os
import signal

import pytest

from tests.support.processes import wait_for
from tests.support.routers import endpoint_xml

pytestmark = pytest.mark.integration

# Counted first by the worker's own objects (its resolver channel sends the LBMR packets).
CONTINUED = ("lbmr_packets_sent",)


def test_counters_kept_by_the_worker_s_objects_continue_after_it_is_killed(routers, make_domain):
    lan1, lan2 = make_domain(), make_domain()
    router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path)
                           + endpoint_xml("LAN2", 2, lan2.config_path)).wait_ready()
    wait_for(lambda: router.counters()[1]["lbmr_packets_sent"] >= 10, 60, interval=0.2,
             message="LAN2 has sent some topic resolution of its own")
    victim = router.worker_pids()["1"]
    before = router.counters()[1]
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: router.worker_pids()["1"] not in (0, victim), 30, message="the supervisor restarts the worker")
    seen = []

    def sent_more_than_before() -> bool:
        now = router.counters()[1]
        seen.append({name: now[name] for name in CONTINUED})
        return all(now[name] > before[name] for name in CONTINUED)
    wait_for(sent_more_than_before, 60, interval=0.05, message="the restarted worker sends topic resolution too")
    went_back = [sample for sample in seen if any(sample[name] < before[name] for name in CONTINUED)]
    assert not went_back, f"before the restart {[before[n] for n in CONTINUED]}, after it: {went_back[:5]}"
