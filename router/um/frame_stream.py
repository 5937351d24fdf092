"""What every transport's receiving side shares: LBMC frames dispatched by topic index.

A context opens one stream per source transport session it has joined sources on (a TCP
connection, an LBT-IPC ring), however many of its receivers use it. Fragments are reassembled per
(topic index, first sequence number). When the stream ends, every source on it ends (EOS).
Requests (router.um.requests) are data frames with a REQUEST header first: they are delivered in
sequence with the data around them, as requests, and a raw (router) subscription is told which of
its frames hold requests, so it can stand in for the requester.
"""
from __future__ import annotations

import logging
import struct
import time
from operator import itemgetter
from typing import Callable, Protocol

from router.um.frame_runs import MIN_RUN, consecutive_sequence_numbers, equal_frames
from router.um.reorder_window import MAX_WAITED, ReorderWindow
from router.um.sequence_numbers import MASK, distance
from router.um.requests import REQUEST_FRAME_MIN, REQUEST_HEADER_OFFSET, read_request, request_frame_problem
from router.um.messages import with_properties
from router.um.wire.errors import WireError
from router.um.wire.lbmc import (CONTROL_HEADER, FRAG_HEADER, LBMC_TYPE_CONTROL, LBMC_TYPE_MESSAGE, MESSAGE_HEADER,
                                 NHDR_APPHDR_CHAIN, NHDR_DATA, NHDR_FRAG, NHDR_REQUEST, NHDR_TSNI)
from router.um.wire.lbmc_properties import APPHDR_CHAIN_SIZE, read_apphdr_chain

log = logging.getLogger(__name__)

_unpack_message = MESSAGE_HEADER.unpack_from
_unpack_frag = FRAG_HEADER.unpack_from
_first_field = itemgetter(0)
_MESSAGE_SIZE = MESSAGE_HEADER.size
_FRAG_SIZE = FRAG_HEADER.size
_CONTROL_SIZE = CONTROL_HEADER.size
_TSNI_RECORD = struct.Struct(">II")
MAX_REASSEMBLED = 64 * 1024 * 1024
_OLD_FRAME_WINDOW = 1 << 20          # a frame at most this far behind its topic's next one is old


def run_payloads(data: bytes, first: int, count: int, length: int) -> list[tuple[int, bytes]]:
    """An on_run's frames as a batch: [(sqn, payload), ...]."""
    return list(zip(range(first, first + count), frame_payloads(data, count, length)))


def frame_payloads(data: bytes, count: int, length: int):
    """The payloads (bytes) of the `count` DATA frames of `length` bytes at the start of `data`, in
    order. struct's iter_unpack slices them in C: per 64-byte message about 38 ns against 74 for a
    slice per frame in Python, and a receiver's busy stream makes millions of them."""
    frames = struct.iter_unpack(f"{_MESSAGE_SIZE}x{length - _MESSAGE_SIZE}s", memoryview(data)[:count * length])
    return map(_first_field, frames)


def in_turn(subs):
    """A topic's subscriptions (its live list) one after the other, each only if it is still
    subscribed when its turn comes: an application's callback may close its receiver, or another
    one, which takes it out of the list meanwhile (iterating the list itself would then skip the
    one after it, which would lose what is being delivered without a word)."""
    if len(subs) < 2:
        yield from subs             # one alone leaving ends the iteration: nobody is skipped
        return
    for sub in tuple(subs):
        if sub in subs:
            yield sub


class Subscription(Protocol):
    """What a connection delivers to: one joined source (topic index) of one receiver."""

    def on_batch(self, messages: list[tuple]) -> None: ...
    def on_run(self, data: bytes, first: int, count: int, length: int) -> None: ...
    def on_request(self, sqn: int, payload: bytes, origin) -> None: ...
    def on_frames(self, frames: bytes, count: int, longest: int) -> None: ...
    def on_request_frames(self, frames: bytes, count: int, longest: int) -> None: ...
    def on_eos(self) -> None: ...
    def on_gap(self, first: int, count: int) -> None: ...
    def on_sequence_info(self, sqn: int) -> None: ...

# A subscription with `raw = True` (a router's proxy receiver) gets the LBMC frames themselves,
# fragments as they came: `on_frames(frames, count, longest)`, the bytes of `count` whole frames
# of its topic index from one read. The router forwards frames; it does not reassemble them. A
# run of frames holding at least one request goes to `on_request_frames` instead (same arguments):
# the router rewrites those requests' REQUEST headers. A TSNI's record for a raw topic index goes
# to `on_sequence_info(last sqn)`, after the frames of the read it came in. A topic index is
# either raw or not within one stream (a router's context holds only proxy receivers).
#
# Other subscriptions get `on_batch([(sqn, payload), ...])` per read, or for a run of equal DATA
# frames in sequence at the start of a read (a busy stream) `on_run(data, first sqn, count,
# length)`, the frames being data[:count * length] (run_payloads makes them a batch); and, for a request,
# `on_request(sqn, payload, origin)` after the batch of the messages before it. A jump in their
# topic's sequence numbers is told first, `on_gap(first missing, count)`, during the read (before
# that read's batch): what the transport lost for good (a router dropped it, LBT-RM gave it up).


class Lost:
    """A batch entry `(first sqn, Lost(count))` standing where the stream dropped a message it
    could not read (a malformed frame whose length is sound: the stream goes on). Its sequence
    numbers were taken, so no gap would ever tell of it: it is told as `on_gap(first, count)`
    in its place, between the messages before and after it."""
    __slots__ = ("count",)

    def __init__(self, count: int):
        self.count = count


class FrameStream:
    """Subscriptions by topic index, frame parsing and reassembly; subclasses move the bytes."""

    description = "stream"

    def __init__(self, loop, key: tuple, on_closed: Callable[["FrameStream"], None]):
        self.loop = loop
        self.key = key
        self.on_closed = on_closed
        self.subscriptions: dict[int, list[Subscription]] = {}
        self.raw_indexes: set[int] = set()
        # (tidx, first_sqn) -> [bytearray, bytes received, time.monotonic() of the first fragment]
        self.fragments: dict[tuple[int, int], list] = {}
        # topic index -> first sqns of its messages being reassembled: fragments come in sequence
        # (a window aside), so when a topic's next message starts, the ones before it that are
        # still partial lost a fragment for good (a router dropped it): they go, on every transport.
        self.partials: dict[int, list[int]] = {}
        self.counters = {"frames": 0, "bytes": 0, "unknown_frames": 0, "malformed": 0,
                         "fragments": 0, "reassembled": 0, "control_frames": 0, "fragments_expired": 0,
                         "sequence_gaps": 0, "frames_missing": 0, "gaps_waited": 0, "frames_late": 0,
                         "callback_errors": 0}
        # topic index -> the sequence number its next frame should carry: a frame past it means
        # the ones between were lost (a router dropped them, or LBT-RM gave them up).
        self.next_sqns: dict[int, int] = {}
        # How long (s) a gap is waited for before it is declared (router.um.reorder_window):
        # TCP and LBT-IPC streams take it from transport_*_dro_loss_recovery_timeout; 0 = at once.
        self.loss_recovery_timeout = 0.0
        self.windows: dict[int, ReorderWindow] = {}     # topic index -> its open gap
        # The context's running totals (router.um.context): what a stream counts ends with it.
        self.context_counters: dict[str, int] | None = None
        self.paused = False
        self.closed = False

    def subscribe(self, tidx: int, subscription: Subscription) -> None:
        self.subscriptions.setdefault(tidx, []).append(subscription)
        if getattr(subscription, "raw", False):
            self.raw_indexes.add(tidx)

    def unsubscribe(self, tidx: int, subscription: Subscription) -> None:
        subs = self.subscriptions.get(tidx, [])
        if subscription in subs:
            subs.remove(subscription)
        if not subs:
            self.subscriptions.pop(tidx, None)
            self.raw_indexes.discard(tidx)
            self.next_sqns.pop(tidx, None)       # whoever subscribes next starts where it joins
            self._drop_partials(tidx)
            window = self.windows.pop(tidx, None)
            if window is not None and window.timer is not None:
                window.timer.cancel()
        if not self.subscriptions:
            self.close(notify=False)

    def pause(self) -> None:
        """Stop taking data (the router's rings are full): the source's flow control pushes back."""

    def resume(self) -> None:
        """Take data again after `pause`."""

    def end_when_repaired(self, callback: Callable[[], None]) -> None:
        """Run `callback` (end a subscription: its source sent a final advertisement) once the
        stream holds nothing the source sent that is still to be repaired: at once on a stream
        that never loses (TCP, LBT-IPC); LBT-RM overrides it."""
        callback()

    def _control(self, data: bytes, offset: int, msglen: int, next_hdr: int) -> bool:
        """A CONTROL frame; False ends the stream (the transport decides what its controls mean)."""
        return True

    def _parse(self, data, end: int | None = None, view: memoryview | None = None) -> int:
        """Dispatch every complete frame in `data[:end]`; returns the bytes consumed.

        Payloads are sliced from one bytes object; each subscription gets the frames of one read
        as one batch (fewer Python calls per message). With `view` (a memoryview of `data`), raw
        subscriptions get their frames as slices of it, not copies: a router hands them straight
        to its ring, so they are valid only during `on_frames`."""
        if end is None:
            end = len(data)
        if view is None:
            view = data
        subscriptions, raw_indexes, next_sqns = self.subscriptions, self.raw_indexes, self.next_sqns
        batches: dict[int, list] = {}
        raw_spans: dict[int, list] = {}
        interrupted: set[int] = set()           # topic indexes whose batch holds a request or a Lost
        raw_told: list | None = None            # (tidx, sqn) a TSNI told of a raw topic, in order
        offset = frames = 0
        run_tidx, run_next, run_batch = -1, 0, None
        if end >= MIN_RUN * _MESSAGE_SIZE:
            if raw_indexes:
                frames, offset = self._uniform_run(data, end, view)
            elif subscriptions and type(data) is bytes:     # payloads are slices: never of a reused buffer
                frames, offset = self._uniform_batch(data, end)
        while end - offset >= 4:
            msglen = (data[offset + 2] << 8) | data[offset + 3]
            if msglen < 4:
                # Nothing after a broken length can be framed: the stream ends (_malformed), once
                # the whole frames before it, the source's messages, are delivered.
                self._malformed(f"frame length {msglen}")
                offset = end
                break
            if end - offset < msglen:
                break
            ver_type, next_hdr = data[offset], data[offset + 1]
            if ver_type == LBMC_TYPE_MESSAGE and msglen >= _MESSAGE_SIZE:
                _, _, _, tidx, sqn = _unpack_message(data, offset)
                if tidx in raw_indexes:
                    if next_hdr == NHDR_FRAG and msglen < _MESSAGE_SIZE + _FRAG_SIZE:
                        self._malformed("fragment shorter than its headers")
                        offset = end            # as a broken length: what came before still goes on
                        break
                    is_request = next_hdr == NHDR_REQUEST
                    run = raw_spans.get(tidx)      # [start, end, frames, longest, earlier runs, has requests]
                    if is_request and not self._valid_request(data, offset, msglen):
                        pass                        # dropped alone: the frames after it start a new run
                    elif run is None:
                        raw_spans[tidx] = [offset, offset + msglen, 1, msglen, None, is_request]
                    else:
                        if run[1] != offset:        # interleaved with another topic: a new run
                            if run[4] is None:
                                run[4] = []
                            run[4].append(view[run[0]:run[1]])
                            run[0] = offset
                        run[1] = offset + msglen
                        run[2] += 1
                        if msglen > run[3]:
                            run[3] = msglen
                        if is_request:
                            run[5] = True
                else:
                    # A run of frames of one topic in sequence is followed in locals, its batch
                    # too (the common case, cheap); next_sqns holds the rest, and the run when it
                    # ends. run_batch: None until looked up, False if nobody here subscribes.
                    if tidx != run_tidx or sqn != run_next:
                        if run_tidx >= 0:
                            next_sqns[run_tidx] = run_next
                        if next_sqns.get(tidx) != sqn and not self._in_sequence(tidx, sqn, batches):
                            run_tidx = -1
                            offset += msglen      # an old frame again: delivered already
                            frames += 1
                            continue
                        # A topic waiting out a gap has every frame looked at (no run).
                        run_tidx = tidx if tidx not in self.windows else -1
                        run_batch = None
                    run_next = sqn + 1
                    if next_hdr == NHDR_DATA:
                        if run_batch is None:
                            run_batch = False
                            if tidx in subscriptions:
                                run_batch = batches.get(tidx)
                                if run_batch is None:
                                    run_batch = batches[tidx] = []
                        if run_batch is not False:
                            run_batch.append((sqn, data[offset + _MESSAGE_SIZE:offset + msglen]))
                    elif next_hdr == NHDR_FRAG:
                        whole = self._fragment(data, offset + _MESSAGE_SIZE, offset + msglen, tidx,
                                               subscriptions.get(tidx))
                        if whole is not None:
                            batches.setdefault(tidx, []).append(whole)
                    elif next_hdr == NHDR_REQUEST:
                        request = self._request(data, offset, msglen, tidx, sqn, subscriptions.get(tidx))
                        if request is not None:
                            batches.setdefault(tidx, []).append(request)
                            interrupted.add(tidx)
                    elif next_hdr == NHDR_APPHDR_CHAIN:
                        message = self._with_properties(data, offset, msglen, tidx, sqn, subscriptions.get(tidx))
                        if message is not None:
                            batches.setdefault(tidx, []).append(message)
                            if type(message[1]) is Lost:
                                interrupted.add(tidx)
                    else:
                        self.counters["unknown_frames"] += 1
                        if tidx in subscriptions:       # a message of a kind we cannot read: lost to them
                            batches.setdefault(tidx, []).append((sqn, Lost(1)))
                            interrupted.add(tidx)
            elif ver_type == LBMC_TYPE_CONTROL:
                self.counters["control_frames"] += 1
                if run_tidx >= 0:                 # what a TSNI is compared with
                    next_sqns[run_tidx] = run_next
                    run_tidx = -1
                if next_hdr == NHDR_TSNI:
                    told = self._sequence_info(data, offset + _CONTROL_SIZE, offset + msglen, batches)
                    if told:
                        raw_told = told if raw_told is None else raw_told + told
                elif not self._control(data, offset, msglen, next_hdr):
                    return end
            else:
                self.counters["unknown_frames"] += 1
            offset += msglen
            frames += 1
        if run_tidx >= 0:
            next_sqns[run_tidx] = run_next
        self.counters["frames"] += frames
        if self.windows:
            self._settle_windows(batches)
        for tidx, batch in batches.items():
            if tidx in interrupted:
                self._deliver_split(tidx, batch, subscriptions.get(tidx, ()))
                continue
            self._tell(subscriptions.get(tidx, ()), "on_batch", batch)
        for tidx, (start, stop, count, longest, earlier, has_requests) in raw_spans.items():
            frames = view[start:stop] if earlier is None else b"".join(earlier) + view[start:stop]
            self._tell(subscriptions.get(tidx, ()), "on_request_frames" if has_requests else "on_frames",
                       frames, count, longest)
        if raw_told is not None:                # after the frames of this read they follow
            for tidx, sqn in raw_told:
                self._tell(subscriptions.get(tidx, ()), "on_sequence_info", sqn)
        return offset

    def parse_reused(self, buffer, size: int, view: memoryview) -> int:
        """Parse the first `size` bytes of a buffer its reader reuses: in place for a router's
        proxy receiver (its frames go on as views, copied into its ring before this returns), as
        one bytes object for an application (its payloads are slices of it, kept)."""
        if self.raw_indexes:
            return self._parse(buffer, size, view)
        return self._parse(bytes(view[:size]))

    def _tell(self, subs, what: str, *args) -> None:
        """Call `what(*args)` of each of a topic's subscriptions still subscribed when its turn
        comes (in_turn). What one raises (an application callback's own bug) is logged, counted
        as callback_errors and stays its own: the others are still told, and the stream goes on
        from what it has read (else the rest of the read would never be delivered to anyone)."""
        for sub in in_turn(subs):
            try:
                getattr(sub, what)(*args)
            except Exception:
                count = self.counters["callback_errors"] = self.counters["callback_errors"] + 1
                if not count & (count - 1):     # the 1st, 2nd, 4th ...: one always failing floods no log
                    log.exception("%s: a receiver's %s failed (%d so far); the stream goes on",
                                  self.description, what, count)

    def _deliver_split(self, tidx: int, batch: list, subs) -> None:
        """A batch with requests ((sqn, payload, origin) entries) or losses ((sqn, Lost) entries)
        in it: the messages before each as one batch, then the request or the loss, so the
        application sees the source's order."""
        start = 0
        for position, entry in enumerate(batch):
            if len(entry) == 3 or type(entry[1]) is Lost:
                if position > start:
                    self._tell(subs, "on_batch", batch[start:position])
                if len(entry) == 3:
                    self._tell(subs, "on_request", *entry)
                else:
                    self._declare_lost(tidx, entry[0], entry[1].count, subs)
                start = position + 1
        if start < len(batch):
            self._tell(subs, "on_batch", batch[start:])

    def _in_sequence(self, tidx: int, sqn: int, batches: dict) -> bool:
        """A frame whose sequence number is not the next one of its topic index: the first one
        seen (or past the 32-bit wrap), a jump forward (what lies between is reported lost, or
        waited for), or an old one (False: already delivered, dropped). A jump back of more than
        _OLD_FRAME_WINDOW is a new source on a reused index: followed from there."""
        window = self.windows.get(tidx)
        if window is not None:
            if distance(window.next, sqn) >= -_OLD_FRAME_WINDOW:
                return window.admit(sqn)
            # Far behind what is waited for: a new source on a reused index. The wait ends (what
            # came is delivered, the rest told lost) and the new source is followed, as without it.
            self._close_window(tidx, window, batches.pop(tidx, None) or [])
        expected = self.next_sqns.get(tidx)
        if expected is not None:
            expected &= MASK                    # a run's next number is kept unmasked (2^32 at the wrap)
        ahead = (sqn - expected) & 0xFFFFFFFF if expected is not None else 0
        if 0x80000000 <= ahead < 0x100000000 - _OLD_FRAME_WINDOW:
            ahead = 0                               # far back: start over from this one
        if ahead >= 0x80000000:
            return False
        self.next_sqns[tidx] = (sqn + 1) & 0xFFFFFFFF
        if ahead:
            self._gap(tidx, expected, ahead, batches)
            window = self.windows.get(tidx)
            if window is not None:
                window.admit(sqn)
        return True

    def _sequence_info(self, data, header: int, end: int, batches: dict) -> list | None:
        """A TSNI (router.um.wire.lbmc_tsni): each topic's last sequence number; a subscribed topic
        expecting an earlier one lost the rest. Returns what it says of raw (router) topics: the
        router passes it on, so receivers beyond it hear of a tail lost anywhere on the way."""
        if end - header < 4 or data[header + 1] < 4 or header + data[header + 1] > end:
            self._malformed("TSNI header shorter than its length says", close=False)
            return None
        count = ((data[header + 2] << 8) | data[header + 3]) & 0x7FFF
        if 4 + count * _TSNI_RECORD.size > data[header + 1]:
            self._malformed(f"TSNI of {count} records in {data[header + 1]} bytes", close=False)
            return None
        raw_told = None
        for n in range(count):
            tidx, sqn = _TSNI_RECORD.unpack_from(data, header + 4 + n * _TSNI_RECORD.size)
            if tidx in self.raw_indexes:
                if raw_told is None:
                    raw_told = []
                raw_told.append((tidx, sqn))
                continue
            window = self.windows.get(tidx)
            if window is not None:
                window.missing_before((sqn + 1) & 0xFFFFFFFF)   # a lost tail is waited for too
                continue
            expected = self.next_sqns.get(tidx)
            if expected is None or tidx not in self.subscriptions:
                continue
            expected &= MASK
            ahead = (sqn + 1 - expected) & 0xFFFFFFFF
            if 0 < ahead < 0x80000000:
                self.next_sqns[tidx] = (sqn + 1) & 0xFFFFFFFF
                self._gap(tidx, expected, ahead, batches)
        return raw_told

    def _gap(self, tidx: int, first: int, count: int, batches: dict) -> None:
        """Messages `first`.. (`count`) of a topic did not come in their place: what came before
        them in this read is delivered first; then they are waited for (loss_recovery_timeout)
        or the subscriptions are told at once."""
        subs = self.subscriptions.get(tidx, ())
        batch = batches.pop(tidx, None)
        if batch:
            self._deliver_split(tidx, batch, subs)
        if self.loss_recovery_timeout > 0 and subs and tidx not in self.raw_indexes and count <= MAX_WAITED:
            window = self.windows[tidx] = ReorderWindow(first, count)
            window.timer = self.loop.call_later(self.loss_recovery_timeout, self._window_expired, tidx, window)
            self.next_sqns[tidx] = -1            # never matches: every frame goes to the window
            self.counters["gaps_waited"] += 1
            return
        self._declare_lost(tidx, first, count, subs)

    def _declare_lost(self, tidx: int, first: int, count: int, subs) -> None:
        self.counters["sequence_gaps"] += 1
        self.counters["frames_missing"] += count
        self._tell(subs, "on_gap", first, count)

    def _settle_windows(self, batches: dict) -> None:
        """After a read: what the topics waiting out a gap got joins their held messages; what is
        now in sequence is delivered; a window whose gap filled closes."""
        for tidx, window in list(self.windows.items()):
            if self.windows.get(tidx) is not window:
                continue                        # an application callback ended it meanwhile
            batch = batches.pop(tidx, None)
            if window.too_wide():
                self._close_window(tidx, window, batch or [])
                continue
            if batch is None:
                continue
            ready = window.take(batch)
            if ready:
                self._deliver_split(tidx, ready, self.subscriptions.get(tidx, ()))
            if not window.missing:
                self._close_window(tidx, window, [])

    def _window_expired(self, tidx: int, window: ReorderWindow) -> None:
        if self.windows.get(tidx) is window:
            self._close_window(tidx, window, [])

    def _close_window(self, tidx: int, window: ReorderWindow, entries: list) -> None:
        """End a wait: held messages delivered and what is still missing declared lost, in
        sequence order; the topic is followed from past the last one seen. Application callbacks
        run here and may end subscriptions (this one too): each step looks them up again."""
        if self.windows.get(tidx) is not window:
            return                              # ended already (its subscription went)
        del self.windows[tidx]
        if window.timer is not None:
            window.timer.cancel()
        self.counters["frames_late"] += window.filled
        self.next_sqns[tidx] = window.next
        for kind, step in window.closing(entries):
            subs = self.subscriptions.get(tidx, ())
            if kind == "batch":
                self._deliver_split(tidx, step, subs)
            else:
                self._declare_lost(tidx, *step, subs)

    def _valid_request(self, data, offset: int, msglen: int) -> bool:
        problem = request_frame_problem(data, offset, msglen)
        if problem is None:
            return True
        # The frame's length is sound, so the stream's framing is: drop this frame, keep the stream.
        self._malformed(problem, close=False)
        return False

    def _request(self, data, offset: int, msglen: int, tidx: int, sqn: int, subs):
        """A request frame: (sqn, payload, origin) when the request is whole (its last fragment);
        (sqn, Lost(1)) in place of one that cannot be read."""
        valid = self._valid_request(data, offset, msglen)
        if not subs:
            return None
        if not valid:
            return sqn, Lost(1)
        origin = read_request(data, offset)
        if data[offset + REQUEST_HEADER_OFFSET] == NHDR_DATA:
            return sqn, data[offset + REQUEST_FRAME_MIN:offset + msglen], origin
        whole = self._fragment(data, offset + REQUEST_FRAME_MIN, offset + msglen, tidx, subs)
        return None if whole is None else (whole[0], whole[1], origin)

    def _with_properties(self, data, offset: int, msglen: int, tidx: int, sqn: int, subs):
        """A frame whose payload ends in message properties (router.um.wire.lbmc_properties):
        (sqn, DataWithProperties) when the message is whole. A chain header that does not say
        where the data ends drops the message, told lost in its place ((first sqn, Lost)); a
        properties block that cannot be read is counted and the message delivered without
        properties, as data is never dropped for its extras."""
        header = offset + _MESSAGE_SIZE
        end = offset + msglen
        try:
            after, block_size = read_apphdr_chain(data, header, end)
        except WireError as exc:
            self._malformed(str(exc), close=False)
            return (sqn, Lost(1)) if subs else None
        header += APPHDR_CHAIN_SIZE
        if after == NHDR_DATA:
            whole = (sqn, data[header:end])
        elif after == NHDR_FRAG:
            whole = self._fragment(data, header, end, tidx, subs)
            if whole is None:
                return None
        else:
            self.counters["unknown_frames"] += 1
            return (sqn, Lost(1)) if subs else None
        first_sqn, payload = whole
        if block_size > len(payload):
            self._malformed(f"properties block of {block_size} bytes in a message of {len(payload)}", close=False)
            # Every fragment's number went with it (one a fragment, first_sqn..sqn).
            fragments = distance(first_sqn, sqn) + 1
            return (first_sqn, Lost(fragments)) if 0 < fragments <= MAX_WAITED else (sqn, Lost(1))
        try:
            return first_sqn, with_properties(payload, block_size)
        except WireError as exc:
            self._malformed(str(exc), close=False)
            return first_sqn, payload[:len(payload) - block_size]

    def _uniform_run(self, data, end: int, view) -> tuple[int, int]:
        """A router's fast path: the equal data frames of one raw topic index at the start of
        `data` (router.um.frame_runs), handed on as one run: (frames, bytes); (0, 0) if none.
        Never a request: a run starts only on DATA or FRAG, and equal_frames compares next_hdr,
        so the first request frame ends it (the walk then gives it to on_request_frames)."""
        length = (data[2] << 8) | data[3]
        if length < _MESSAGE_SIZE or data[0] != LBMC_TYPE_MESSAGE:
            return 0, 0
        next_hdr = data[1]
        if not (next_hdr == NHDR_DATA or (next_hdr == NHDR_FRAG and length >= _MESSAGE_SIZE + _FRAG_SIZE)):
            return 0, 0
        tidx = int.from_bytes(data[4:8], "big")
        if tidx not in self.raw_indexes:
            return 0, 0
        count = equal_frames(data, 0, end, length)
        if count:
            frames = view[:count * length]
            self._tell(self.subscriptions.get(tidx, ()), "on_frames", frames, count, length)
        return count, count * length

    def _uniform_batch(self, data: bytes, end: int) -> tuple[int, int]:
        """An application receiver's fast path, the steady state of a busy stream: the equal DATA
        frames of one subscribed topic index at the start of `data`, each the next in sequence,
        go to its subscriptions as one run, at once (they come before anything after them in the
        read): (frames, bytes); (0, 0) if none. Everything else (a first frame, a gap, a topic
        waiting out one, a fragment, a request, the 32-bit wrap) does not start such a run, and
        the walk after it takes what follows frame by frame."""
        length = (data[2] << 8) | data[3]
        if length < _MESSAGE_SIZE or data[0] != LBMC_TYPE_MESSAGE or data[1] != NHDR_DATA:
            return 0, 0
        _, _, _, tidx, sqn = _unpack_message(data, 0)
        if self.next_sqns.get(tidx) != sqn or tidx not in self.subscriptions or tidx in self.windows:
            return 0, 0
        count = equal_frames(data, 0, end, length)
        if not count or sqn + count > MASK + 1:
            return 0, 0
        count = consecutive_sequence_numbers(data, count, length, sqn)
        self.next_sqns[tidx] = sqn + count        # unmasked, as a run's next number is kept
        self._tell(self.subscriptions[tidx], "on_run", data, sqn, count, length)
        return count, count * length

    def _fragment(self, data: bytes, header: int, end: int, tidx: int, subs):
        """Fold in one fragment whose FRAG header is at `header` (its frame ends at `end`); returns
        (first_sqn, payload) when the message is complete."""
        self.counters["fragments"] += 1
        if end - header < _FRAG_SIZE:
            self._malformed("fragment shorter than its headers")
            return None
        next_hdr, _, _, first_sqn, frag_offset, total = _unpack_frag(data, header)
        if next_hdr != NHDR_DATA or not subs:
            return None
        piece = data[header + _FRAG_SIZE:end]
        key = (tidx, first_sqn)
        entry = self.fragments.get(key)
        if entry is None:
            if total > MAX_REASSEMBLED:
                self._malformed(f"fragmented message of {total} bytes")
                return None
            entry = self.fragments[key] = [bytearray(total), 0, time.monotonic()]
            partials = self.partials.get(tidx)
            if partials is None:
                self.partials[tidx] = [first_sqn]
            else:
                if tidx not in self.windows:    # late fragments may still fill a gap waited for
                    self._drop_partials(tidx)
                    partials = self.partials[tidx] = []
                partials.append(first_sqn)
        if frag_offset + len(piece) > len(entry[0]):
            self._malformed("fragment beyond the message's length")
            del self.fragments[key]
            return None
        entry[0][frag_offset:frag_offset + len(piece)] = piece
        entry[1] += len(piece)
        if entry[1] < len(entry[0]):
            return None
        del self.fragments[key]
        partials = self.partials.get(tidx)
        if partials is not None and len(partials) == 1:
            del self.partials[tidx]             # the usual case; others go with the next message
        self.counters["reassembled"] += 1
        return first_sqn, bytes(entry[0])

    def _drop_partials(self, tidx: int) -> None:
        """Forget the topic's partial messages (counted as fragments_expired)."""
        fragments = self.fragments
        for first_sqn in self.partials.pop(tidx, ()):
            if fragments.pop((tidx, first_sqn), None) is not None:
                self.counters["fragments_expired"] += 1

    def expire_fragments(self, older_than: float) -> int:
        """Drop messages whose first fragment came before `older_than` (time.monotonic()) and that
        are still not whole: on a transport that may give loss up (LBT-RM) the rest never comes.
        Returns how many; counted as fragments_expired."""
        stale = [key for key, entry in self.fragments.items() if entry[2] < older_than]
        for key in stale:
            del self.fragments[key]
        self.counters["fragments_expired"] += len(stale)
        return len(stale)

    def _malformed(self, what: str, close: bool = True) -> None:
        """Count and log a malformed frame; `close` ends the stream (its framing cannot be trusted).
        Frames dropped on their own are logged at the 1st, 2nd, 4th, 8th ... so a flood cannot
        flood the log too."""
        count = self.counters["malformed"] = self.counters["malformed"] + 1
        if self.context_counters is not None:
            self.context_counters["transport_malformed"] += 1
        if close:
            log.warning("malformed %s (%s); dropped", self.description, what)
            self.loop.call_later(0, self.close)
        elif not count & (count - 1):
            log.warning("malformed frame on %s (%s); frame dropped (%d malformed so far)",
                        self.description, what, count)

    def close(self, notify: bool = True) -> None:
        if self.closed:
            return
        self.closed = True
        self._close_transport()
        for tidx, window in list(self.windows.items()):
            if notify:                  # what was held comes before the end, the loss told in place
                self._close_window(tidx, window, [])
            elif window.timer is not None:
                window.timer.cancel()
        self.windows.clear()
        subscriptions, self.subscriptions = self.subscriptions, {}
        if notify:
            for subs in subscriptions.values():
                self._tell(list(subs), "on_eos")
        self.on_closed(self)

    def _close_transport(self) -> None:
        raise NotImplementedError
