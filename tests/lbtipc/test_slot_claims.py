"""Consumer slots of an LBT-IPC session (router.lbtipc.naming): two receivers never hold one slot,
and the slot of a receiver that died is free again, whatever its marker file says."""
import multiprocessing
import os
import signal
import subprocess
import sys

import pytest

from router.lbtipc import naming

SLOTS = 8
ROUNDS = 30


@pytest.fixture
def segment():
    name = f"umr.lbtipc.{os.getpid()}.999-{os.getpid() % 100000}"
    yield name
    naming.remove_slots(name, SLOTS)


def _stale(segment: str) -> None:
    """Slot files left by receivers that died: each names a pid no process has."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for slot in range(SLOTS):
        with open(naming._slot_path(segment, slot), "w") as handle:
            handle.write(str(dead.pid))


def _claim(segment: str, start, done, slots) -> None:
    start.wait()
    slots.put(naming.claim_slot(segment, SLOTS))
    done.wait()                 # hold the slot until every claimant has one


def test_receivers_starting_together_over_stale_slots_each_get_a_slot_of_their_own(segment):
    context = multiprocessing.get_context("fork")
    claimants = SLOTS - 2
    for _ in range(ROUNDS):
        _stale(segment)
        start, done, slots = context.Barrier(claimants), context.Event(), context.Queue()
        processes = [context.Process(target=_claim, args=(segment, start, done, slots)) for _ in range(claimants)]
        for process in processes:
            process.start()
        try:
            got = sorted(slots.get(timeout=30) for _ in range(claimants))
        finally:
            done.set()
            for process in processes:
                process.join(30)
        assert len(set(got)) == claimants, f"two receivers share a slot: {got}"


def test_a_slot_whose_file_names_a_live_unrelated_process_is_free(segment):
    """A pid is reused: the file of a receiver that died names some other process now."""
    unrelated = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with open(naming._slot_path(segment, 0), "w") as handle:
            handle.write(str(unrelated.pid))
        assert naming.live_slots(segment, SLOTS) == 0
        assert naming.claim_slot(segment, SLOTS) == 0
        assert naming.live_slots(segment, SLOTS) == 1
    finally:
        unrelated.kill()
        unrelated.wait()
        naming.release_slot(segment, 0)


def test_the_slot_of_a_receiver_killed_is_free_and_no_longer_counted(segment):
    context = multiprocessing.get_context("fork")
    start, done, slots = context.Barrier(1), context.Event(), context.Queue()
    holder = context.Process(target=_claim, args=(segment, start, done, slots))
    holder.start()
    try:
        assert slots.get(timeout=30) == 0
        assert naming.live_slots(segment, SLOTS) == 1
        assert naming.claim_slot(segment, SLOTS) == 1          # taken while its holder lives
        naming.release_slot(segment, 1)
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(30)
    assert naming.live_slots(segment, SLOTS) == 0
    assert naming.claim_slot(segment, SLOTS) == 0
    naming.release_slot(segment, 0)
    assert naming.live_slots(segment, SLOTS) == 0
