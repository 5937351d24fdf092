"""tnwgd's command line: -v accepts every shipped example and rejects broken files precisely; -d."""
import glob
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import wait_for

ROOT = Path(__file__).resolve().parents[2]
BROKEN = ROOT / "tests" / "config" / "broken"


def tnwgd(*args):
    return subprocess.run([sys.executable, "-m", "router.cli.tnwgd", *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)


@pytest.mark.parametrize("config", sorted((ROOT / "conf").glob("*.xml")), ids=lambda p: p.name)
def test_every_shipped_configuration_validates(config):
    result = tnwgd("-v", config)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("broken", sorted(BROKEN.glob("*.xml")), ids=lambda p: p.name)
def test_broken_files_are_rejected_with_file_and_line(broken):
    result = tnwgd("-v", broken)
    assert result.returncode != 0
    # The error is the last line (warnings about what loads with a warning may come before it).
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("tnwgd: "), result.stderr
    assert ".xml:" in message or ".cfg:" in message, message     # names the file and line
    header = broken.read_text().split("BROKEN:", 1)[-1].split("-->", 1)[0].strip()
    assert message, f"no message for {broken.name} ({header})"


def test_dump_dtd_prints_the_commented_dtd():
    result = tnwgd("-d")
    assert result.returncode == 0
    assert "<!ELEMENT tnw-gateway" in result.stdout and "<!--" in result.stdout


def test_dump_dtd_into_a_reader_that_left_exits_quietly():
    """`tnwgd -d | head`: the reader leaves before the DTD is written; tnwgd exits as if SIGPIPE
    had killed it (141), without a traceback."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    daemon = subprocess.Popen([sys.executable, "-m", "router.cli.tnwgd", "-d"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, cwd=ROOT, env=env)
    try:
        daemon.stdout.close()
        _, stderr = daemon.communicate(timeout=60)
        assert daemon.returncode == 128 + signal.SIGPIPE and stderr == b"", stderr.decode()
    finally:
        daemon.kill()
        daemon.wait()


def test_missing_file_is_a_clear_error(tmp_path):
    result = tnwgd("-v", tmp_path / "absent.xml")
    assert result.returncode == 2
    assert "absent.xml" in result.stderr


def _two_lan_config(tmp_path, make_domain, pidfile: Path) -> Path:
    from tests.support.routers import endpoint_xml, write_config
    lan1, lan2 = make_domain(), make_domain()
    portals = endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path)
    return write_config(tmp_path, f"pid{os.getpid() % 10000}", portals, f"    <pidfile>{pidfile}</pidfile>\n")


@pytest.mark.usefixtures("runtime_dir")
def test_a_pidfile_that_cannot_be_written_is_a_clear_error_not_a_traceback(tmp_path, make_domain):
    pidfile = tmp_path / "absent-directory" / "tnwgd.pid"
    result = tnwgd(_two_lan_config(tmp_path, make_domain, pidfile))
    assert result.returncode == 2, result.stderr        # the <pidfile> setting: restarting would not help
    assert "Traceback" not in result.stderr and str(pidfile) in result.stderr, result.stderr


@pytest.mark.usefixtures("runtime_dir")
def test_detach_returns_once_the_pidfile_is_written_and_reports_a_pidfile_it_cannot_write(tmp_path, make_domain):
    unwritable = tmp_path / "absent-directory" / "tnwgd.pid"
    failed = tnwgd("-f", _two_lan_config(tmp_path, make_domain, unwritable))
    # The daemon cannot say so itself (its standard error is /dev/null): the shell must hear it.
    assert failed.returncode == 2, failed.stderr
    assert "Traceback" not in failed.stderr and str(unwritable) in failed.stderr, failed.stderr

    pidfile = tmp_path / "tnwgd.pid"
    config = _two_lan_config(tmp_path, make_domain, pidfile)
    started = tnwgd("-f", config)
    daemon = None
    try:
        assert started.returncode == 0, started.stderr
        # An init script reads the pidfile as soon as `tnwgd -f` returns.
        daemon = int(pidfile.read_text())
        os.kill(daemon, 0)
    finally:
        if daemon is None and started.returncode == 0:
            wait_for(pidfile.exists, 10, message="the detached daemon's pidfile, to stop it")
            daemon = int(pidfile.read_text())
        if daemon is not None:
            os.kill(daemon, signal.SIGTERM)
            try:
                wait_for(lambda: not pidfile.exists(), 30, message="the detached daemon's exit")
            except AssertionError:
                os.kill(daemon, signal.SIGKILL)
                raise
            for segment in glob.glob(f"/dev/shm/umr.{config.stem}.{daemon}.*"):
                os.unlink(segment)


@pytest.mark.usefixtures("runtime_dir")
def test_a_second_daemon_with_a_running_ones_pidfile_refuses_to_start_and_leaves_that_pidfile(
        tmp_path, make_domain, routers):
    from tests.support.routers import endpoint_xml
    pidfile = tmp_path / "tnwgd.pid"
    lan1, lan2 = make_domain(), make_domain()
    portals = endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path)
    extra = f"    <pidfile>{pidfile}</pidfile>\n"
    first = routers.start(portals, extra).wait_ready()
    assert pidfile.read_text() == f"{first.pid}\n"
    # `service tnwgd start` run once too often: an init script then stops whatever the pidfile names.
    second = routers.start(portals, extra)
    wait_for(lambda: second.tool.proc.poll() is not None or pidfile.read_text() not in ("", f"{first.pid}\n"), 30,
             message="the second daemon to exit or to take the pidfile")
    assert pidfile.read_text() == f"{first.pid}\n", second.log()
    assert second.tool.proc.wait(30) == 2, second.log()
    assert str(pidfile) in second.log() and str(first.pid) in second.log(), second.log()
    assert "Traceback" not in second.log()
    assert first.stop() == 0
    assert not pidfile.exists()         # the first one's, removed by it at its stop


NOBODY = 65534


@pytest.mark.usefixtures("runtime_dir")
def test_a_daemon_that_drops_root_leaves_no_pidfile_naming_it(tmp_path, make_domain, routers):
    """<pidfile> in a directory only root may write (/run/tnwgd.pid), with <uid>: the daemon
    writes the file as root and, as that user, cannot remove it at its stop. It must not leave
    it naming its pid: an init script would take a process that reused the pid for the router."""
    import shutil
    import tempfile
    from tests.support.routers import endpoint_xml
    root_only = Path(tempfile.mkdtemp(prefix="umr-run-", dir="/tmp"))
    try:
        root_only.chmod(0o755)
        pidfile = root_only / "tnwgd.pid"
        lan1, lan2 = make_domain(), make_domain()
        router = routers.start(endpoint_xml("LAN1", 1, lan1.config_path) + endpoint_xml("LAN2", 2, lan2.config_path),
                               f"    <uid>{NOBODY}</uid>\n    <gid>{NOBODY}</gid>\n    <pidfile>{pidfile}</pidfile>\n")
        router.wait_ready()
        assert pidfile.read_text() == f"{router.pid}\n"
        assert router.stop() == 0, router.log()
        assert not pidfile.exists() or pidfile.read_text() == "", \
            f"the pidfile still names the stopped daemon: {pidfile.read_text()!r}"
        if os.geteuid() == 0:
            assert "pidfile" in router.log() and str(pidfile) in router.log(), router.log()
    finally:
        shutil.rmtree(root_only, ignore_errors=True)
