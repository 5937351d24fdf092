"""Fixtures shared by the portal tests."""
import pytest


@pytest.fixture
def harness():
    """Peer links over real loopback sockets, each side on an event loop of its own
    (tests.portals.test_peer_link.Harness); every link and loop is closed after the test."""
    from tests.portals.test_peer_link import Harness
    made = Harness()
    yield made
    made.close()
