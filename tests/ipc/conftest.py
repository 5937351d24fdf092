"""Fixtures for ring tests: unique shared-memory segments and child processes that are always
cleaned up, even when a test fails."""
from __future__ import annotations

import multiprocessing
import os
import uuid

import pytest

from router.ipc import layout
from router.ipc.ring import init_ring
from router.ipc.shm import SharedSegment

OWNER = "pytest"


@pytest.fixture
def unique_name() -> str:
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture
def make_ring(unique_name):
    """``make_ring(capacity, **init_ring_options) -> SharedSegment`` with an initialised ring."""
    created: list[SharedSegment] = []

    def make(capacity: int, **options) -> SharedSegment:
        segment = SharedSegment.create(OWNER, f"{unique_name}-{len(created)}", layout.segment_size(capacity))
        created.append(segment)
        init_ring(segment.memory, capacity, owner_pid=os.getpid(), **options)
        return segment

    yield make
    for segment in created:
        segment.unlink()
        try:
            segment.close()
        except BufferError:
            pass  # a failed test's traceback still holds views; the name is gone already


@pytest.fixture
def fork_context():
    return multiprocessing.get_context("fork")


@pytest.fixture
def processes():
    """A list to register started child processes in; survivors are killed at teardown."""
    started: list = []
    yield started
    for process in started:
        if process.is_alive():
            process.kill()
        process.join(10)
