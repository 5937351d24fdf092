"""The memory-ordering module: which backend this machine gets, and int64 slots that another
process sees whole."""
from __future__ import annotations

import mmap
import os
import platform

import pytest

from router.ipc import ordering


def test_x86_64_uses_plain_aligned_accesses():
    assert ordering.IS_TSO == (platform.machine() in ordering.TSO_MACHINES)
    if ordering.IS_TSO:
        slots = ordering.int64_slots(memoryview(bytearray(64)))
        assert isinstance(slots, memoryview) and slots.format == "q" and len(slots) == 8


def test_slot_regions_must_be_whole_int64s():
    with pytest.raises(ValueError, match="whole number of int64 slots"):
        ordering.int64_slots(memoryview(bytearray(12)))


def test_a_forked_process_sees_whole_64_bit_values_in_order():
    shared = mmap.mmap(-1, 4096)
    slots = ordering.int64_slots(memoryview(shared)[:256])
    rounds = 20000
    pid = os.fork()
    if pid == 0:  # writer: payload slot first, then the "published" slot
        for value in range(1, rounds + 1):
            ordering.store_release(slots, 8, value << 32 | value)  # both halves carry the value
            ordering.store_release(slots, 0, value)
        os._exit(0)
    try:
        seen = 0
        while seen < rounds:
            published = ordering.load_acquire(slots, 0)
            payload = ordering.load_acquire(slots, 8)
            if published:
                # The payload was stored before the publication we saw: at least that new, never torn.
                assert payload >> 32 == payload & 0xFFFFFFFF >= published
            seen = published
            ordering.full_fence()
    finally:
        assert os.waitpid(pid, 0)[1] == 0
    ordering.release_slots(slots)
    shared.close()
