"""A lock-free single-producer, many-consumer ring in shared memory, with write-once fan-out.

The producer appends records (``layout`` draws one); each record carries a 64-bit destination
mask and consumer ``i`` delivers only records whose mask has bit ``i``, but walks past all of them.
Every shared integer has exactly one writer (the tail and counters: the producer; a head, heartbeat
and park flag: their consumer), so no compare-and-swap is needed; ``ordering`` decides how they are
loaded and stored.

Protocol
--------
- Producer: claim space, write payload, then publish the tail once per commit or per batch.
  Consumers never look past the tail, so they never see a half-written record.
- Consumer: load the tail, deliver its records between its head and the tail to a handler as
  memoryviews into the ring, then store its head once per batch. **A payload view is valid only
  until ``read_batch`` returns**: the head advances then and the producer may reuse the bytes.
  Copy what you keep (and keeping a view also stops the segment from being unmapped).
- Flow control: the producer never writes past ``min(head of live consumers) + capacity``. A consumer
  is live while attached (heartbeat slot non-zero) and its heartbeat is younger than the ring's
  ``heartbeat_timeout``. A detached or dead consumer no longer holds the producer back.
  The producer looks at heartbeats only when it runs out of room, so liveness costs nothing on
  the fast path; a skipped consumer's slot gets an eviction count.
- Torn data: before the producer writes under a new limit it publishes that limit as the *tail
  intent* (a store before the payload stores, which TSO keeps in order); bytes more than a
  capacity below the intent may have been overwritten. ``read_batch`` checks the intent before
  delivering, so a consumer that was skipped never starts reading overwritten bytes, and again
  after its handler calls (a seqlock-style validation), so a consumer that stalled for longer than
  the heartbeat timeout *during* a batch learns that the views it was given went stale. Either way
  it raises ``ConsumerLapped`` with the bytes lost, after moving its head to the tail so that the
  next call continues cleanly. A returning consumer (``resume=True``) learns the same way. Record
  lengths are unsigned, so even a header overwritten under a stalled reader only moves it forward.
- Wakeups (optional ``RingWakeups``): a consumer with nothing to read parks (``wait``) and the
  producer wakes it after publishing records addressed to it; a producer waiting for space parks
  in ``claim`` and consumers wake it after advancing their heads.
"""
from __future__ import annotations

from .ring_consumer import DEFAULT_BATCH_LIMIT, RingConsumer
from .ring_format import (
    Claim,
    ConsumerLapped,
    MalformedRecord,
    OverflowPolicy,
    RecordTooLarge,
    RingCounters,
    init_ring,
    read_counters,
)
from .ring_producer import RingProducer

__all__ = [
    "DEFAULT_BATCH_LIMIT",
    "Claim",
    "ConsumerLapped",
    "MalformedRecord",
    "OverflowPolicy",
    "RecordTooLarge",
    "RingConsumer",
    "RingCounters",
    "RingProducer",
    "init_ring",
    "read_counters",
]
