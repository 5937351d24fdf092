"""Fixtures shared by the whole suite: private domains, tool processes that are always cleaned up."""
from __future__ import annotations

import pytest

from tests.support.domains import new_domain
from tests.support.processes import ToolRunner

# Lines of each process's stderr shown when a test fails: enough for a router's lifecycle log.
_STDERR_TAIL = 60


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
    for tool in runner.tools:
        _fail_on_traceback(" ".join(tool.argv[2:]), tool.stderr)


@pytest.fixture
def routers(tmp_path):
    from tests.support.routers import RouterRunner
    runner = RouterRunner(tmp_path)
    yield runner
    runner.cleanup()
    for router in runner.routers:
        _fail_on_traceback(f"router {router.name}", router.log())


def _fail_on_traceback(what: str, text: str) -> None:
    """An exception a loop or a thread caught and logged is still a bug (it cut short whatever
    raised it), even when the test's traffic got through: no test passes with one in the output of
    a router or a tool it ran."""
    lines = text.splitlines()
    first = next((n for n, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")), None)
    if first is not None:
        shown = "\n".join(lines[max(0, first - 1):first + 40])
        pytest.fail(f"a Traceback in the output of {what}:\n{shown}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test shows what its routers and tools printed: a CI failure can then be read from
    its output alone, with nothing left to reproduce by luck."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    started = [*getattr(item.funcargs.get("routers"), "routers", ())]
    processes = [(router.name, router.tool) for router in started]
    processes += [(tool.argv[2], tool) for tool in getattr(item.funcargs.get("tools"), "tools", ())]
    for name, tool in processes:
        lines = list(tool.stderr_lines)[-_STDERR_TAIL:]
        status = tool.proc.poll()
        state = "running" if status is None else f"exited {status}"
        report.sections.append((f"stderr of {name} ({state})", "".join(lines) or "(nothing)\n"))
