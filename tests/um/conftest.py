"""Fixtures shared by the UM library's tests."""
import pytest

from router.um.context import Context
from router.um.loop import EventLoop


@pytest.fixture
def loop():
    """An event loop running on a thread of its own, closed after the test."""
    running = EventLoop("um-test")
    running.start_thread()
    yield running
    running.close()


@pytest.fixture
def contexts(domain):
    """Opens UM contexts in the test's domain (keyword arguments: more options); closes them after."""
    opened = []

    def open_context(**extra):
        ctx = Context(**domain.overrides(), **extra)
        opened.append(ctx)
        return ctx
    yield open_context
    for ctx in opened:
        ctx.close()
