"""Layout descriptor of a shared-memory ring: named offsets and nothing else.

A ring segment is a power-of-two data region followed by a trailer::

    0                                   capacity                      segment_size(capacity)
    +-----------------------------------+----------------------------------------------+
    |  data region: records, back to    |  trailer: 128-byte slots, each written by    |
    |  back, a padding record at wrap   |  exactly one process (see TRAILER below)     |
    +-----------------------------------+----------------------------------------------+

Positions are byte counts since the ring was created: 64-bit, monotonically increasing, never
wrapping. The index of a position in the data region is ``position & (capacity - 1)``.

Record layout (after Agrona's ``RecordDescriptor``), little-endian, every record starts on a
``RECORD_ALIGNMENT`` boundary::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +---------------------------------------------------------------+
    |                    Payload length (uint32)                    |
    +---------------------------------------------------------------+
    |                      Record type (int32)                      |
    +---------------------------------------------------------------+
    |              Destination mask, bits 0-31 (uint64)             |
    |              Destination mask, bits 32-63                     |
    +---------------------------------------------------------------+
    |                    Payload (length bytes)                    ...
   ...                                                              |
    +---------------------------------------------------------------+
    |         0-15 bytes of alignment, to the next record           |
    +---------------------------------------------------------------+

Bit ``i`` of the destination mask addresses consumer ``i``. A padding record has type
``PADDING_TYPE`` and mask 0, so no consumer delivers it. The alignment equals the header length
(as in Agrona) so that the space left before the wrap always holds at least a padding header.

Each trailer slot is 128 bytes (two cache lines, because adjacent-line prefetch pairs them) so no two
writers ever share a line. Slots that one writer owns together (counters, metadata, the producer's
eviction counts) are packed within their slot.
"""
from __future__ import annotations

import struct

RECORD_HEADER = struct.Struct("<IiQ")
"""length, type, destination mask. The length is unsigned so that even a header the producer
is overwriting under a lapped consumer can only move that consumer forward, never backward."""
HEADER_LENGTH = RECORD_HEADER.size
RECORD_ALIGNMENT = HEADER_LENGTH
PADDING_TYPE = -1
LENGTH_OFFSET = 0
TYPE_OFFSET = 4
DEST_MASK_OFFSET = 8

SLOT_LENGTH = 128
MAX_CONSUMERS = 64
MIN_CAPACITY = 4096
MAX_CAPACITY = 1 << 30  # keeps every record length inside the int32 length field

LAYOUT_MAGIC = 0x756D_7272_696E_6701  # "umrring" + layout version 1
LAYOUT_VERSION = 1

# Trailer slot numbers. Offsets below are bytes from the start of the trailer.
_TAIL_SLOT = 0  # producer: published position (records before it are complete)
_TAIL_INTENT_SLOT = 1  # producer: highest position it may write before publishing again
_PRODUCER_HEARTBEAT_SLOT = 2  # producer: time.monotonic_ns() of its last activity
_PRODUCER_PARK_SLOT = 3  # producer: non-zero park epoch while it sleeps waiting for space
_COUNTERS_SLOT = 4  # producer: the RingCounters fields, packed
_METADATA_SLOT = 5  # owner, once, at creation
_CONSUMER_HEAD_FIRST_SLOT = 6
_CONSUMER_HEARTBEAT_FIRST_SLOT = _CONSUMER_HEAD_FIRST_SLOT + MAX_CONSUMERS
_CONSUMER_PARK_FIRST_SLOT = _CONSUMER_HEARTBEAT_FIRST_SLOT + MAX_CONSUMERS
_EVICTIONS_FIRST_SLOT = _CONSUMER_PARK_FIRST_SLOT + MAX_CONSUMERS
_EVICTIONS_SLOTS = MAX_CONSUMERS * 8 // SLOT_LENGTH
_TRAILER_SLOTS = _EVICTIONS_FIRST_SLOT + _EVICTIONS_SLOTS

TAIL_OFFSET = _TAIL_SLOT * SLOT_LENGTH
TAIL_INTENT_OFFSET = _TAIL_INTENT_SLOT * SLOT_LENGTH
PRODUCER_HEARTBEAT_OFFSET = _PRODUCER_HEARTBEAT_SLOT * SLOT_LENGTH
PRODUCER_PARK_OFFSET = _PRODUCER_PARK_SLOT * SLOT_LENGTH
# While parked: the destination mask of the record it waits to write (who the full ring holds up).
PRODUCER_WAITING_FOR_OFFSET = PRODUCER_PARK_OFFSET + 8

COUNTERS_OFFSET = _COUNTERS_SLOT * SLOT_LENGTH
RECORDS_WRITTEN_OFFSET = COUNTERS_OFFSET + 0
BYTES_WRITTEN_OFFSET = COUNTERS_OFFSET + 8
RECORDS_DROPPED_OFFSET = COUNTERS_OFFSET + 16
BLOCKED_EVENTS_OFFSET = COUNTERS_OFFSET + 24
EVICTED_CONSUMERS_OFFSET = COUNTERS_OFFSET + 32

METADATA_OFFSET = _METADATA_SLOT * SLOT_LENGTH
MAGIC_OFFSET = METADATA_OFFSET + 0
CAPACITY_OFFSET = METADATA_OFFSET + 8
CONSUMER_SLOTS_OFFSET = METADATA_OFFSET + 16
OVERFLOW_POLICY_OFFSET = METADATA_OFFSET + 24
HEARTBEAT_TIMEOUT_NS_OFFSET = METADATA_OFFSET + 32
OWNER_PID_OFFSET = METADATA_OFFSET + 40

TRAILER_LENGTH = _TRAILER_SLOTS * SLOT_LENGTH


def consumer_head_offset(consumer: int) -> int:
    """Consumer ``consumer``'s position: everything before it has been read (written by it)."""
    return (_CONSUMER_HEAD_FIRST_SLOT + _checked_consumer(consumer)) * SLOT_LENGTH


def consumer_heartbeat_offset(consumer: int) -> int:
    """Consumer's ``time.monotonic_ns()`` when it last read; 0 means detached (written by it)."""
    return (_CONSUMER_HEARTBEAT_FIRST_SLOT + _checked_consumer(consumer)) * SLOT_LENGTH


def consumer_park_offset(consumer: int) -> int:
    """Consumer's park epoch, non-zero while it sleeps on its wakeup (written by it)."""
    return (_CONSUMER_PARK_FIRST_SLOT + _checked_consumer(consumer)) * SLOT_LENGTH


def consumer_evictions_offset(consumer: int) -> int:
    """How often the producer stopped waiting for this consumer (written by the producer)."""
    return _EVICTIONS_FIRST_SLOT * SLOT_LENGTH + 8 * _checked_consumer(consumer)


def check_capacity(capacity: int) -> None:
    """Raise ValueError unless ``capacity`` is a usable data-region size."""
    if not isinstance(capacity, int) or isinstance(capacity, bool):
        raise ValueError(f"ring capacity must be an int, got {type(capacity).__name__}")
    if capacity < MIN_CAPACITY:
        raise ValueError(f"ring capacity {capacity} is too small: the minimum is {MIN_CAPACITY} bytes")
    if capacity > MAX_CAPACITY:
        raise ValueError(f"ring capacity {capacity} is too large: the maximum is {MAX_CAPACITY} bytes")
    if capacity & (capacity - 1):
        raise ValueError(
            f"ring capacity {capacity} is not a power of two "
            f"(the next one is {1 << capacity.bit_length()})"
        )


def segment_size(capacity: int) -> int:
    """Bytes of shared memory a ring of ``capacity`` needs: data region plus trailer."""
    check_capacity(capacity)
    return capacity + TRAILER_LENGTH


def aligned_record_length(payload_length: int) -> int:
    """Bytes a record with ``payload_length`` bytes of payload occupies in the data region."""
    return (payload_length + HEADER_LENGTH + RECORD_ALIGNMENT - 1) & -RECORD_ALIGNMENT


def max_payload_length(capacity: int) -> int:
    """Largest payload a ring accepts: a record may fill at most half of the data region.

    Half, so that a record plus the padding before it at the wrap always fits in an empty ring.
    """
    return capacity // 2 - HEADER_LENGTH


def _checked_consumer(consumer: int) -> int:
    if not 0 <= consumer < MAX_CONSUMERS:
        raise ValueError(f"consumer index {consumer} out of range 0..{MAX_CONSUMERS - 1}")
    return consumer
