"""The ring layout descriptor: offsets, alignment, capacity checks."""
from __future__ import annotations

import pytest

from router.ipc import layout


def _single_writer_slots() -> dict[str, int]:
    slots = {
        "tail": layout.TAIL_OFFSET,
        "tail intent": layout.TAIL_INTENT_OFFSET,
        "producer heartbeat": layout.PRODUCER_HEARTBEAT_OFFSET,
        "producer park": layout.PRODUCER_PARK_OFFSET,
        "counters": layout.COUNTERS_OFFSET,
        "metadata": layout.METADATA_OFFSET,
        "evictions": layout.consumer_evictions_offset(0),
    }
    for consumer in range(layout.MAX_CONSUMERS):
        slots[f"head {consumer}"] = layout.consumer_head_offset(consumer)
        slots[f"heartbeat {consumer}"] = layout.consumer_heartbeat_offset(consumer)
        slots[f"park {consumer}"] = layout.consumer_park_offset(consumer)
    return slots


def test_every_trailer_slot_has_its_own_128_byte_line_inside_the_trailer():
    offsets = _single_writer_slots().values()
    assert all(offset % layout.SLOT_LENGTH == 0 for offset in offsets)
    assert len(set(offsets)) == len(offsets)
    assert max(offsets) + layout.SLOT_LENGTH <= layout.TRAILER_LENGTH
    assert layout.TRAILER_LENGTH % layout.SLOT_LENGTH == 0


def test_packed_fields_are_8_byte_aligned_and_stay_inside_their_slot():
    packed = {
        layout.COUNTERS_OFFSET: [
            layout.RECORDS_WRITTEN_OFFSET,
            layout.BYTES_WRITTEN_OFFSET,
            layout.RECORDS_DROPPED_OFFSET,
            layout.BLOCKED_EVENTS_OFFSET,
            layout.EVICTED_CONSUMERS_OFFSET,
        ],
        layout.METADATA_OFFSET: [
            layout.MAGIC_OFFSET,
            layout.CAPACITY_OFFSET,
            layout.CONSUMER_SLOTS_OFFSET,
            layout.OVERFLOW_POLICY_OFFSET,
            layout.HEARTBEAT_TIMEOUT_NS_OFFSET,
            layout.OWNER_PID_OFFSET,
        ],
    }
    for slot, fields in packed.items():
        assert len(set(fields)) == len(fields)
        for field in fields:
            assert field % 8 == 0 and slot <= field < slot + layout.SLOT_LENGTH
    evictions = [layout.consumer_evictions_offset(c) for c in range(layout.MAX_CONSUMERS)]
    assert evictions == sorted(set(evictions)) and all(offset % 8 == 0 for offset in evictions)
    assert evictions[-1] + 8 <= layout.TRAILER_LENGTH


def test_record_header_is_16_bytes_and_records_are_16_aligned():
    assert layout.HEADER_LENGTH == 16
    assert layout.RECORD_ALIGNMENT == layout.HEADER_LENGTH  # a padding header always fits at the wrap
    assert layout.RECORD_HEADER.pack(5, 7, 1 << 63)[:4] == (5).to_bytes(4, "little")
    assert [layout.aligned_record_length(n) for n in (0, 1, 16, 17, 100)] == [16, 32, 32, 48, 128]


@pytest.mark.parametrize("capacity", [4096, 1 << 20, 1 << 30])
def test_valid_capacities(capacity):
    layout.check_capacity(capacity)
    assert layout.segment_size(capacity) == capacity + layout.TRAILER_LENGTH
    assert layout.max_payload_length(capacity) == capacity // 2 - layout.HEADER_LENGTH


@pytest.mark.parametrize(
    "capacity, message",
    [
        (5000, "not a power of two"),
        (3 * 4096, "next one is 16384"),
        (2048, "too small"),
        (0, "too small"),
        (1 << 31, "too large"),
        (4096.0, "must be an int"),
    ],
)
def test_bad_capacities_are_rejected_with_a_clear_message(capacity, message):
    with pytest.raises(ValueError, match=message):
        layout.check_capacity(capacity)
    with pytest.raises(ValueError, match=message):
        layout.segment_size(capacity)


def test_consumer_index_is_checked():
    with pytest.raises(ValueError, match="out of range"):
        layout.consumer_head_offset(layout.MAX_CONSUMERS)
