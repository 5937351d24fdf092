"""Fixtures shared by the whole suite: private domains, tool processes that are always cleaned up."""
from __future__ import annotations

import pytest

from tests.support.domains import new_domain
from tests.support.processes import ToolRunner


@pytest.fixture
def domain(tmp_path):
    return new_domain(tmp_path)


@pytest.fixture
def make_domain(tmp_path):
    return lambda *extra: new_domain(tmp_path, tuple(extra))


@pytest.fixture
def tools():
    runner = ToolRunner()
    yield runner
    runner.cleanup()


@pytest.fixture
def routers(tmp_path):
    from tests.support.routers import RouterRunner
    runner = RouterRunner(tmp_path)
    yield runner
    runner.cleanup()
