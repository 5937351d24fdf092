"""Memory ordering for integers shared between processes: the one place it is decided.

Every cross-process shared integer the rings read or write goes through ``load_acquire``,
``store_release`` and ``full_fence`` here, over slot arrays made by ``int64_slots``.

Why plain loads and stores are enough on x86-64
-----------------------------------------------
x86-64 is TSO (Intel SDM vol. 3, §8.2.2; AMD APM vol. 2, §7.2): stores are not reordered with
other stores, loads are not reordered with other loads, and a naturally aligned 8-byte load or store
is a single atomic access (§8.1.1). So a producer that writes a payload and then stores the tail
position, and a consumer that loads the tail and then reads the payload, see each other's writes in
order: every plain store is a release and every plain load an acquire.

They must really be single aligned 8-byte accesses. ``int64_slots`` returns ``memoryview.cast('q')``
over 8-aligned offsets of the mapping (mmap is page-aligned; ``layout`` keeps every slot offset a
multiple of 8). Item assignment on such a view goes through CPython's ``pack_single``, whose 'q'
case is ``memcpy(ptr, &x, 8)``; disassembling CPython 3.11's ``pack_single`` shows that case
compiled to one ``mov %r14,(%r12)``, and ``unpack_single`` to one 8-byte ``mov`` load: no torn
halves. (``struct.pack_into`` would also copy 8 bytes, but through a generic byte loop we cannot
point at.) The compiler cannot move these accesses across each other either: each is a separate
opaque C call from the interpreter loop.

The one reordering TSO allows is a store followed by a load of a *different* location (the store
sits in the store buffer). The park/wake handshake is exactly that pattern on both sides
(consumer: store park flag, load tail; producer: store tail, load park flag), so it needs a full
fence; ``full_fence`` provides one. On x86-64 it acquires and releases a private lock: glibc's
``sem_trywait``/``sem_post`` behind CPython's lock are ``lock cmpxchg``/``lock xadd``, locked
instructions that drain the store buffer, and POSIX (XBD 4.12) lists them as memory-synchronising.
It costs about 150 ns; the ``atomics`` package's seq-cst exchange costs 11 µs here.

Other architectures
-------------------
Elsewhere (ARM, POWER, ...) plain accesses give no ordering, so slots are ``atomics`` views with
acquire loads, release stores and a seq-cst exchange as the fence. That path is correct but slow
(microseconds per access in the ``atomics`` package); it exists so the code runs, not to be fast.
"""
from __future__ import annotations

import operator
import platform
import threading

TSO_MACHINES = frozenset({"x86_64", "amd64", "AMD64"})
IS_TSO = platform.machine() in TSO_MACHINES


def int64_slots(memory: memoryview):
    """An indexable sequence of int64 slots over ``memory`` (8-aligned, length a multiple of 8)."""
    if len(memory) % 8:
        raise ValueError(f"slot region of {len(memory)} bytes is not a whole number of int64 slots")
    if IS_TSO:
        return memory.cast("B").cast("q")
    return AtomicInt64Slots(memory)


def release_slots(slots) -> None:
    """Drop the slots' hold on the shared mapping so the segment can be unmapped."""
    slots.release()


if IS_TSO:
    # C-level getitem/setitem: no Python frame on the hot path.
    load_acquire = operator.getitem
    store_release = operator.setitem
    _fence_lock = threading.Lock()

    def full_fence() -> None:
        """StoreLoad barrier: earlier stores become visible before later loads are performed."""
        _fence_lock.acquire()
        _fence_lock.release()

else:  # pragma: no cover - exercised only on weakly ordered machines

    def load_acquire(slots, index: int) -> int:
        return slots[index]

    def store_release(slots, index: int, value: int) -> None:
        slots[index] = value

    _fence_word = None

    def full_fence() -> None:
        global _fence_word
        if _fence_word is None:
            import atomics

            _fence_word = atomics.atomic(width=8, atype=atomics.INT)
        _fence_word.exchange(0)  # a seq-cst read-modify-write: a full barrier


class AtomicInt64Slots:  # pragma: no cover - exercised only on weakly ordered machines
    """int64 slots whose loads are acquire and stores release, through the ``atomics`` package."""

    def __init__(self, memory: memoryview):
        import atomics

        self._atomics = atomics
        self._memory = memory.cast("B")
        self._views: dict[int, object] = {}
        self._contexts: list = []

    def __len__(self) -> int:
        return len(self._memory) // 8

    def _view(self, index: int):
        view = self._views.get(index)
        if view is None:
            buffer = self._memory[index * 8 : index * 8 + 8]
            context = self._atomics.atomicview(buffer=buffer, atype=self._atomics.INT)
            view = self._views[index] = context.__enter__()
            self._contexts.append(context)
        return view

    def __getitem__(self, index: int) -> int:
        return self._view(index).load(self._atomics.MemoryOrder.ACQUIRE)

    def __setitem__(self, index: int, value: int) -> None:
        self._view(index).store(value, self._atomics.MemoryOrder.RELEASE)

    def release(self) -> None:
        for context in self._contexts:
            context.__exit__(None, None, None)
        self._contexts.clear()
        self._views.clear()
        self._memory.release()
