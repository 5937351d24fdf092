"""`<log type="file" frequency=... size=...>`: the log file rolls by size and by time, rolled files
are named NAME_PID.YYYY-MM-DD.SEQ, and no line is lost or written to a rolled file, also from
forked workers and from a running tnwgd."""
from __future__ import annotations

import logging
import os
import signal
import time

import pytest

from router.logfile import RollingLogFile
from tests.support.processes import Tool, wait_for
from tests.support.routers import endpoint_xml, write_config


def logger_with(handler: logging.Handler, name: str) -> logging.Logger:
    logger = logging.getLogger(f"test.logfile.{name}")
    logger.propagate = False
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    return logger


def lines_in(directory, stem: str) -> dict[str, list[str]]:
    return {p.name: p.read_text().splitlines() for p in sorted(directory.iterdir()) if p.name.startswith(stem)}


def test_the_file_rolls_at_its_size_and_keeps_every_line(tmp_path):
    path = tmp_path / "tnwgd.log"
    handler = RollingLogFile(str(path), size_millions=1)
    handler.claim()
    logger = logger_with(handler, "size")
    try:
        for n in range(25_000):                      # ~2.5 MB of 100-byte lines: two rolls
            logger.info("line %06d %s", n, "x" * 88)
    finally:
        handler.close()
    files = lines_in(tmp_path, "tnwgd.log")
    today = time.strftime("%Y-%m-%d")
    assert sorted(files) == ["tnwgd.log", f"tnwgd.log_{os.getpid()}.{today}.1", f"tnwgd.log_{os.getpid()}.{today}.2"]
    for name in files:
        if name != "tnwgd.log":
            assert 1_000_000 <= (tmp_path / name).stat().st_size < 1_000_200
    order = [files[f"tnwgd.log_{os.getpid()}.{today}.1"], files[f"tnwgd.log_{os.getpid()}.{today}.2"], files["tnwgd.log"]]
    assert [line[5:11] for part in order for line in part] == [f"{n:06d}" for n in range(25_000)]


def test_the_file_rolls_when_the_period_changes_and_a_forked_worker_follows(tmp_path):
    """frequency="test" rolls every second (daily and hourly work the same way, on longer periods)."""
    path = tmp_path / "tnwgd.log"
    handler = RollingLogFile(str(path), frequency="test")
    handler.claim()
    logger = logger_with(handler, "period")
    try:
        logger.info("before the roll")
        child = os.fork()
        if child == 0:                              # a worker: it writes after the supervisor rolled
            try:
                deadline = time.monotonic() + 10
                while not any(p.name != "tnwgd.log" for p in tmp_path.iterdir()) and time.monotonic() < deadline:
                    time.sleep(0.01)
                logger.info("from the worker, after the roll")
            finally:
                os._exit(0)
        start = time.strftime("%S")
        wait_for(lambda: time.strftime("%S") != start, 3, message="the next second")
        logger.info("after the roll")
        os.waitpid(child, 0)
    finally:
        handler.close()
    files = lines_in(tmp_path, "tnwgd.log")
    rolled = [name for name in files if name != "tnwgd.log"]
    assert len(rolled) == 1 and rolled[0].startswith(f"tnwgd.log_{os.getpid()}.")
    assert files[rolled[0]] == ["before the roll"]
    assert sorted(files["tnwgd.log"]) == ["after the roll", "from the worker, after the roll"]


def test_a_quiet_period_leaves_no_empty_rolled_file(tmp_path):
    path = tmp_path / "tnwgd.log"
    handler = RollingLogFile(str(path), frequency="test")
    handler.claim()
    try:
        start = time.strftime("%S")
        wait_for(lambda: time.strftime("%S") != start, 3, message="the next second")
        assert handler.roll_if_due() is False
    finally:
        handler.close()
    assert [p.name for p in tmp_path.iterdir()] == ["tnwgd.log"]


@pytest.mark.integration
def test_tnwgd_rolls_its_log_file(tmp_path, make_domain):
    log_path = tmp_path / "logs" / "router.log"
    log_path.parent.mkdir()
    lan1, lan2 = make_domain(), make_domain()
    portals = endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path)
    config = write_config(tmp_path, "rolls", portals)
    config.write_text(config.read_text().replace('<log type="console"/>',
                                                 f'<log type="file" frequency="test">{log_path}</log>'))
    router = Tool("router.cli.tnwgd", [str(config)])
    try:
        wait_for(lambda: any("portals are up" in p.read_text() for p in log_path.parent.iterdir()), 30,
                 message="the router's start in its log")
        wait_for(lambda: len(list(log_path.parent.iterdir())) >= 2, 10, message="a rolled log file")
        router.proc.send_signal(signal.SIGTERM)
        assert router.proc.wait(30) == 0
    finally:
        router.stop()
    everything = [line for p in sorted(log_path.parent.iterdir(), key=lambda p: p.stat().st_mtime)
                  for line in p.read_text().splitlines()]
    rolled = [p.name for p in log_path.parent.iterdir() if p.name != "router.log"]
    assert rolled and all(name.startswith(f"router.log_{router.proc.pid}.") for name in rolled), rolled
    # Started, saying (as the DRO's first lines do) the version and the router's node id.
    assert any("UMR-1001-1" in line and "umrouter " in line and ", node id 0x" in line for line in everything)
    assert any("portals are up" in line for line in everything)
