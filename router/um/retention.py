"""What a late-join source keeps of what it sent, for receivers that join later (UM's retention).

Each LBMC frame the source sent (a message, or one fragment of a larger one) is kept by its
sequence number, oldest first, as it went out; a late joiner asks for them by number and gets
them back as RETRANS messages (router.um.late_join). The buffer holds at most
`retransmit_retention_size_limit` bytes of frames (UM's count: the frames' own bytes); with
`retransmit_retention_age_threshold` (seconds) set, frames older than that go too. The oldest go
first, a whole message at a time is not guaranteed: a receiver asking for a fragment that went
gets none, and gives that message up. A sequence number sent again replaces the frame kept for
it. The sending thread adds while the context's loop reads (advertisements, retransmissions): a
lock of its own.

The frames are kept compactly, since a router keeps them for months: their bytes one after
another in one ring of bytes, and per frame only its sequence number, where its bytes are, their
length and (with an age threshold) when it was sent, in arrays used as rings alongside: about a
dozen bytes a frame besides its own (a Python object per frame would take over 150, ten times a
small message's frame). Both rings grow as needed, never past what the limits can hold, and
shrink as the frames go.

Frames are numbered as they are added (their index). A source numbers its frames one after
another, so sequence numbers increase with the index: a number is found by how far it is past
the sequence's first (the n-th after it is usually n indexes later, else a binary search finds
it: numbers with gaps, as a router's proxy source forwards them). A frame whose number does not
increase the sequence (a number sent again, or one before the newest) is found by a table of its
own.
"""
from __future__ import annotations

import threading
import time
from array import array

import numpy as np

from router.um.sequence_numbers import HALF, MASK

MAX_FRAME = 0xFFFF              # an LBMC frame's length is 16 bits
# A source that has sent nothing keeps nothing (a router has a proxy source per topic and origin).
_FIRST_BYTES = 0
_FIRST_ENTRIES = 0
# Frames replaced (a sequence number sent again) or discarded still take their place in the rings
# until the oldest reach them; this many, or more than the frames kept, and the rings are remade.
_DEAD_TOLERATED = 64
_STRAYS_SKIPPED = 64           # looking for the oldest of the sequence past frames out of it


def _zeros(typecode: str, count: int) -> array:
    return array(typecode, [0]) * count         # (exactly as large: no room to grow)


def _view(column: array) -> np.ndarray:
    return np.frombuffer(column, dtype=np.dtype(column.typecode))


class Retention:
    def __init__(self, size_limit: int, age_threshold: float = 0.0):
        self.size_limit = size_limit
        self.age_threshold = age_threshold     # fixed: the send times are kept only when it is set
        self.bytes = 0                         # the kept frames' bytes, what the size limit counts
        self.counters = {"retained_frames": 0, "retention_dropped_frames": 0}
        self.lock = threading.Lock()
        self._smallest = MAX_FRAME             # frame lengths seen: how many frames the limit can hold,
        self._largest = 0                      # how much room a ring of bytes needs
        self._empty(_FIRST_BYTES, _FIRST_ENTRIES)

    def _empty(self, byte_capacity: int, entry_capacity: int) -> None:
        self._data = memoryview(bytearray(byte_capacity))    # (slices of a view are set fastest)
        self._sqns = _zeros("I", entry_capacity)
        self._offsets = _zeros("I", entry_capacity)
        self._lengths = _zeros("H", entry_capacity)
        self._times = _zeros("d", entry_capacity) if self.age_threshold else None
        self._capacity = entry_capacity
        self._head = 0            # ring position of the oldest frame
        self._count = 0           # frames in the rings, kept or dead
        self._first = 0           # index of the oldest
        self._start = 0           # where its bytes begin
        self._end = 0             # where the next frame's bytes go
        self._wrap_at = 0         # once the next frame went to the start of the ring of bytes: where
        self._wrapped_from = -1   # the bytes before it end, and that frame's index (-1: not wrapped)
        self._dead: set[int] = set()      # indexes of frames replaced or discarded
        self._dead_bytes = 0
        # The sequence: frames whose numbers increase with their index. A frame's key is how far
        # its number is past the sequence's first (its index and number); the newest's key.
        self._ref_index = self._ref_sqn = self._last_key = 0
        # Frames out of the sequence: sequence number -> index of those kept; the indexes of all
        # still in the rings (kept or dead), which a search of the sequence steps over.
        self._strays: dict[int, int] = {}
        self._stray_indexes: set[int] = set()

    # -- adding ----------------------------------------------------------------------------------
    def add(self, sqn: int, frame, now: float | None = None) -> None:
        length = len(frame)
        if length > MAX_FRAME:
            raise ValueError(f"a frame of {length} bytes cannot be retained: LBMC frames are at most {MAX_FRAME}")
        age_threshold = self.age_threshold
        if age_threshold and now is None:
            now = time.monotonic()
        lock = self.lock
        lock.acquire()
        try:
            self.counters["retained_frames"] += 1
            in_order, key = True, 0
            if self._count:
                # Past the newest of the sequence (by less than half the circle) and not kept out
                # of it: nothing kept has this number.
                key = (sqn - self._ref_sqn) & MASK
                if not self._last_key < key < self._last_key + HALF or (self._strays and sqn in self._strays):
                    in_order, key = self._out_of_order(sqn)
            # UM's order: the new frame counts, then the oldest go while the limits are passed.
            if self.bytes + length > self.size_limit \
                    or (age_threshold and self._count and now - self._times[self._head] > age_threshold):
                head = self._head
                if age_threshold or self._dead or self._stray_indexes or self._count < 2 \
                        or self.bytes - self._lengths[head] + length > self.size_limit:
                    self._trim(now, length)
                else:
                    # _trim, as it goes at the size limit: the oldest frame for the new one
                    self.counters["retention_dropped_frames"] += 1
                    self.bytes -= self._lengths[head]
                    self._count -= 1
                    self._first += 1
                    self._head = head = (head + 1) % self._capacity
                    if self._first == self._wrapped_from:
                        self._wrapped_from = -1
                    self._start = self._offsets[head]
            if length > self.size_limit:
                self.counters["retention_dropped_frames"] += 1      # it goes at once
                return
            count, at = self._count, self._end
            if not (in_order and 0 < count < self._capacity and self._smallest <= length <= self._largest
                    and at + length <= (len(self._data) if self._wrapped_from < 0 else self._start)):
                self._append(sqn, frame, length, now, in_order, key)
                return
            # _append, as it goes for nearly every frame (every one a source sends runs through here)
            self._last_key = key
            self._data[at:at + length] = frame
            position = (self._head + count) % self._capacity
            self._sqns[position] = sqn
            self._offsets[position] = at
            self._lengths[position] = length
            if age_threshold:
                self._times[position] = now
            self._count = count + 1
            self._end = at + length
            self.bytes += length
        finally:
            lock.release()

    def _out_of_order(self, sqn: int) -> tuple[bool, int]:
        """A number not past the newest of the sequence: the frame kept for it, if any, is
        replaced. Returns whether the new frame continues the sequence after all, and its key."""
        index = self._find(sqn)
        if index is not None:
            self._kill(index)
        if not self._count:
            return True, 0
        key = (sqn - self._ref_sqn) & MASK
        if self._last_key < key < self._last_key + HALF:
            return True, key
        oldest = self._oldest_in_order()
        if oldest is None:                  # none of the sequence is kept: this frame starts it
            self._ref_index, self._ref_sqn, self._last_key = self._first + self._count, sqn, 0
            return True, 0
        # Past the newest all the same, measured from the sequence's first the number went round
        # the circle (2**32 numbers on): it is, from the oldest of the sequence still kept.
        newest = (self._ref_sqn + self._last_key) & MASK
        if 0 < (sqn - newest) & MASK < HALF and oldest > self._ref_index:
            base = self._sqns[self._position(oldest)]
            last = (newest - base) & MASK
            key = (sqn - base) & MASK
            if key > last:
                self._ref_index, self._ref_sqn, self._last_key = oldest, base, last
                return True, key
        return False, 0

    def _oldest_in_order(self) -> int | None:
        """The index of the oldest frame of the sequence still in the rings, None if there is
        none; the sequence's first when it cannot be told at once (then nothing changes)."""
        first, count = self._first, self._count
        if self._ref_index >= first:
            return self._ref_index
        if len(self._stray_indexes) >= count:
            return None
        for index in range(first, first + min(count, _STRAYS_SKIPPED)):
            if index not in self._stray_indexes:
                return index
        return self._ref_index

    def _append(self, sqn: int, frame, length: int, now, in_order: bool, key: int) -> None:
        count = self._count
        index = self._first + count
        if count and in_order:
            self._last_key = key
        elif not count:                         # (the oldest may all have gone meanwhile)
            self._start = self._end = 0
            self._wrapped_from = -1
            self._ref_index, self._ref_sqn, self._last_key = index, sqn, 0
        else:
            self._strays[sqn] = index
            self._stray_indexes.add(index)
        if not self._smallest <= length <= self._largest:
            self._smallest, self._largest = min(self._smallest, length), max(self._largest, length)
        if count == self._capacity:
            self._rebuild(len(self._data), self._more_entries(count))
        # Where its bytes go: after the newest's, if they fit there (else see _room).
        at = self._end
        if (at + length > len(self._data)) if self._wrapped_from < 0 else (at + length > self._start):
            at = self._room(length, index)
        self._data[at:at + length] = frame
        position = (self._head + count) % self._capacity
        self._sqns[position] = sqn
        self._offsets[position] = at
        self._lengths[position] = length
        if self._times is not None:
            self._times[position] = now
        self._count = count + 1
        self._end = at + length
        self.bytes += length

    def _room(self, length: int, index: int) -> int:
        """Where the frame of `index` goes when its bytes do not fit after the newest's: at the
        start of the ring, before the oldest's, or in a larger ring."""
        if self._wrapped_from < 0 and 0 < length <= self._start:
            self._wrap_at, self._wrapped_from = self._end, index
            return 0
        used = self._used()
        # Room for what the limit lets the ring hold whatever way the frames fall in it; never
        # less than twice what it holds (so it seldom grows) until then.
        limit = self.size_limit + self._dead_bytes + 2 * self._largest
        self._rebuild(max(min(2 * len(self._data), limit), used + 2 * length), self._capacity, move_bytes=True)
        return self._end

    def _more_entries(self, count: int) -> int:
        """Room for more than `count` frames: twice as many, at most what the size limit can hold
        of frames as small as any seen (and those dead)."""
        most = self.size_limit // self._smallest + 1 + len(self._dead) if self._smallest else 2 * count
        return max(count + 1, min(2 * count, most))

    def _used(self) -> int:
        if self._wrapped_from >= 0:
            return self._wrap_at - self._start + self._end
        return self._end - self._start

    def _rebuild(self, byte_capacity: int, entry_capacity: int, move_bytes: bool = False) -> None:
        """The rings remade at these sizes, oldest frame first; the ring of bytes, when its size
        changes (or `move_bytes`), with the oldest frame's bytes at its start."""
        count, head, capacity = self._count, self._head, self._capacity
        before_wrap = count if self._wrapped_from < 0 else self._wrapped_from - self._first
        columns = [self._sqns, self._offsets, self._lengths] + ([self._times] if self._times is not None else [])
        remade = []
        for column in columns:
            new = _zeros(column.typecode, entry_capacity)
            old, into = _view(column), _view(new)
            tail = min(count, capacity - head)
            into[:tail] = old[head:head + tail]
            into[tail:count] = old[:count - tail]
            remade.append(new)
        offsets = _view(remade[1])
        start = self._start
        if byte_capacity != len(self._data) or move_bytes:
            data, old = memoryview(bytearray(byte_capacity)), self._data
            if self._wrapped_from >= 0:
                first_part = self._wrap_at - start
                data[:first_part] = old[start:self._wrap_at]
                data[first_part:first_part + self._end] = old[:self._end]
                offsets[:before_wrap] -= start
                offsets[before_wrap:count] += first_part
            else:
                data[:self._end - start] = old[start:self._end]
                offsets[:count] -= start
            self._end = self._used()
            self._data, self._start, self._wrapped_from = data, 0, -1
        self._sqns, self._offsets, self._lengths = remade[:3]
        if self._times is not None:
            self._times = remade[3]
        self._capacity, self._head = entry_capacity, 0

    # -- going -----------------------------------------------------------------------------------
    def _trim(self, now, incoming: int = 0) -> None:
        """The oldest go while the frames with `incoming` bytes more pass the size limit, or the
        oldest passed the age threshold (lock held)."""
        age_threshold, times, limit = self.age_threshold, self._times, self.size_limit - incoming
        lengths, offsets, capacity = self._lengths, self._offsets, self._capacity
        dropped = 0
        while self._count and (self.bytes > limit or (age_threshold and now - times[self._head] > age_threshold)):
            dropped += 1
            if self._dead or self._stray_indexes:
                self._pop()
                continue
            # _pop, when no frame is dead or out of the sequence: each frame sent, at the limit
            head = self._head
            self.bytes -= lengths[head]
            self._count -= 1
            self._first += 1
            self._head = head = (head + 1) % capacity
            if self._count:
                if self._first == self._wrapped_from:
                    self._wrapped_from = -1
                self._start = offsets[head]
        if dropped:
            self.counters["retention_dropped_frames"] += dropped
            # At the size limit the rings stay as large as they are; by age they may hold less.
            if not self._count or age_threshold and (4 * self.bytes < len(self._data)
                                                     or 4 * self._count < self._capacity):
                self._shrink()

    def _pop(self) -> None:
        """The oldest frame goes, and the dead ones after it (the oldest kept is never dead)."""
        while True:
            head, first = self._head, self._first
            if self._stray_indexes and first in self._stray_indexes:
                self._stray_indexes.discard(first)
                sqn = self._sqns[head]
                if self._strays.get(sqn) == first:
                    del self._strays[sqn]
                if not self._stray_indexes:     # (a set or dict emptied keeps its size)
                    self._strays, self._stray_indexes = {}, set()
            if self._dead and first in self._dead:
                self._dead.discard(first)
                self._dead_bytes -= self._lengths[head]
                if not self._dead:
                    self._dead = set()
            else:
                self.bytes -= self._lengths[head]
            self._count -= 1
            self._first = first = first + 1
            self._head = head = (head + 1) % self._capacity
            if not self._count:
                return
            if first == self._wrapped_from:
                self._wrapped_from = -1
            self._start = self._offsets[head]
            if not self._dead or first not in self._dead:
                return

    def _shrink(self) -> None:
        """Rings four times larger than what they hold are halved (an empty one starts afresh)."""
        if not self._count:
            self._empty(_FIRST_BYTES, _FIRST_ENTRIES)
            return
        byte_capacity, entry_capacity = len(self._data), self._capacity
        if byte_capacity > _FIRST_BYTES and 4 * (self._used() + 2 * self._largest) < byte_capacity:
            byte_capacity //= 2
        if entry_capacity > _FIRST_ENTRIES and 4 * self._count < entry_capacity:
            entry_capacity //= 2
        if (byte_capacity, entry_capacity) != (len(self._data), self._capacity):
            self._rebuild(byte_capacity, entry_capacity)

    def _kill(self, index: int) -> None:
        """The frame of `index` is no longer kept; its place goes with the oldest (lock held)."""
        position = self._position(index)
        length = self._lengths[position]
        if index in self._stray_indexes:
            del self._strays[self._sqns[position]]
        self.bytes -= length
        self._dead.add(index)
        self._dead_bytes += length
        if index == self._first:
            self._pop()
            if not self._count:
                self._shrink()
        elif len(self._dead) > _DEAD_TOLERATED and len(self._dead) > self._count - len(self._dead):
            self._compact()

    def _compact(self) -> None:
        """The rings remade with only the frames kept (lock held)."""
        kept = []
        for index in range(self._first, self._first + self._count):
            if index not in self._dead:
                position = self._position(index)
                offset = self._offsets[position]
                kept.append((self._sqns[position], bytes(self._data[offset:offset + self._lengths[position]]),
                             self._times[position] if self._times is not None else None))
        first = self._first
        self._empty(_FIRST_BYTES, _FIRST_ENTRIES)
        self._first, self.bytes = first, 0
        for sqn, frame, when in kept:
            in_order, key = True, 0
            if self._count:
                key = (sqn - self._ref_sqn) & MASK
                if not self._last_key < key < self._last_key + HALF:
                    in_order, key = self._out_of_order(sqn)
            self._append(sqn, frame, len(frame), when, in_order, key)

    # -- finding ---------------------------------------------------------------------------------
    def _position(self, index: int) -> int:
        return (self._head + index - self._first) % self._capacity

    def _find(self, sqn: int) -> int | None:
        """The index of the frame kept for `sqn`, or None (lock held)."""
        index = self._strays.get(sqn)
        if index is not None or not self._count:
            return index
        key = (sqn - self._ref_sqn) & MASK
        if key > self._last_key:
            return None
        sqns, strays, ref_sqn = self._sqns, self._stray_indexes, self._ref_sqn
        low, high = max(self._ref_index, self._first), self._first + self._count - 1
        found = self._ref_index + key             # numbers one after another
        if not (low <= found <= high and sqns[self._position(found)] == sqn and found not in strays):
            found = None
            while low <= high:
                middle = probe = (low + high) // 2
                while probe <= high and probe in strays:
                    probe += 1
                if probe > high:
                    high = middle - 1
                    continue
                probe_key = (sqns[self._position(probe)] - ref_sqn) & MASK
                if probe_key < key:
                    low = probe + 1
                elif probe_key > key:
                    high = middle - 1
                else:
                    found = probe
                    break
        return None if found is None or found in self._dead else found

    def get(self, sqn: int) -> bytes | None:
        with self.lock:
            if self.age_threshold:
                self._trim(time.monotonic())
            index = self._find(sqn)
            if index is None:
                return None
            position = self._position(index)
            offset = self._offsets[position]
            return bytes(self._data[offset:offset + self._lengths[position]])

    def discard(self, sqn: int) -> bool:
        """No longer keep the frame of `sqn` (False if none is kept)."""
        with self.lock:
            index = self._find(sqn)
            if index is None:
                return False
            self._kill(index)
            return True

    def bounds(self) -> tuple[int, int] | None:
        """(lowest, highest) sequence number retained, or None when nothing is."""
        with self.lock:
            if self.age_threshold:
                self._trim(time.monotonic())
            if not self._count:
                return None
            last = self._first + self._count - 1
            while last in self._dead:
                last -= 1
            return self._sqns[self._head], self._sqns[self._position(last)]
