"""Fixtures shared by the UM library's tests."""
import pytest

from router.um.loop import EventLoop


@pytest.fixture
def loop():
    """An event loop running on a thread of its own, closed after the test."""
    running = EventLoop("um-test")
    running.start_thread()
    yield running
    running.close()
