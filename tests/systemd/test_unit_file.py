"""systemd/umrouter@.service: systemd accepts it, and it agrees with what the daemon does."""
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from router.admin import client
from router.cli import routerctl
from router.supervisor import EXIT_BOOT_FAILED, EXIT_CONFIG_ERROR
from tests.support.processes import ROOT

UNIT = ROOT / "systemd" / "umrouter@.service"
INSTALLED_TNWGD = "/usr/local/bin/tnwgd"


def service_settings() -> dict[str, list[str]]:
    """[Service]'s settings, each with its values in order (systemd runs repeated Exec lines in turn)."""
    settings, section = {}, None
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            key, _, value = line.partition("=")      # systemd keys are case-sensitive
            settings.setdefault(key, []).append(value)
    return settings


def service_section() -> dict[str, str]:
    """[Service]'s single-valued settings."""
    settings = service_settings()
    return {key: values[-1] for key, values in settings.items()}


def test_systemd_analyze_verify_accepts_the_unit(tmp_path):
    # verify insists that ExecStart's binary exists: point it at this checkout's tnwgd, which
    # `make test` installs next to the interpreter; the unit file itself keeps the install path.
    tnwgd = Path(sys.executable).parent / "tnwgd"
    assert tnwgd.exists(), f"{tnwgd} missing: install the package (pip install -e .)"
    text = UNIT.read_text()
    assert f"ExecStart={INSTALLED_TNWGD} /etc/umrouter/%i.xml" in text
    instance = tmp_path / "umrouter@two-lans.service"
    instance.write_text(text.replace(INSTALLED_TNWGD, str(tnwgd)))
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: run scripts/install-sysdeps.sh (package systemd)"
    done = subprocess.run([analyze, "verify", str(instance)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stderr.strip(), f"exit {done.returncode}:\n{done.stderr}"


def test_the_unit_matches_the_daemons_contract():
    service = service_section()
    assert service["Type"] == "notify" and service["NotifyAccess"] == "main"
    # The file is checked first, then the router reloads it (reload() is SIGHUP's handler).
    assert service_settings()["ExecReload"] == [f"{INSTALLED_TNWGD} -v /etc/umrouter/%i.xml", "/bin/kill -HUP $MAINPID"]
    assert service["WatchdogSec"]
    assert service["Restart"] == "on-failure"
    assert {int(code) for code in service["RestartPreventExitStatus"].split()} == {EXIT_CONFIG_ERROR, EXIT_BOOT_FAILED}
    assert service["User"] == "umrouter" and service["RuntimeDirectory"] == "umrouter"
    for setting in ("NoNewPrivileges", "ProtectHome", "PrivateTmp"):
        assert service[setting] == "yes", setting
    assert service["ProtectSystem"] == "strict"
    # The rings and counters live in /dev/shm: a private /dev or IPC namespace would hide them.
    assert "PrivateDevices" not in service and "PrivateIPC" not in service
    assert "InaccessiblePaths" not in service


def test_routerctl_looks_where_the_unit_puts_the_socket(monkeypatch):
    monkeypatch.delenv("RUNTIME_DIRECTORY", raising=False)
    assert Path("/run") / service_section()["RuntimeDirectory"] in client.search_dirs()
    assert routerctl.EXIT_USAGE == 2       # argparse's own usage exit status, which routerctl keeps


def test_systemctl_reload_of_an_invalid_file_fails_with_the_validators_message():
    """A bare SIGHUP always succeeds for systemd, even when the router refuses the file: the
    unit's first ExecReload command, run as systemd runs it, fails on an invalid file and names it."""
    tnwgd = str(Path(sys.executable).parent / "tnwgd")
    check, _signal = service_settings()["ExecReload"]

    def run_check(config: Path) -> subprocess.CompletedProcess:
        argv = [tnwgd if word == INSTALLED_TNWGD else word.replace("/etc/umrouter/%i.xml", str(config))
                for word in shlex.split(check)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)

    broken = run_check(ROOT / "tests" / "config" / "broken" / "ace-without-match.xml")
    assert broken.returncode == EXIT_CONFIG_ERROR
    assert "ace-without-match.xml:11: <ace>: missing required attribute 'match'" in broken.stderr
    valid = run_check(ROOT / "conf" / "two-lans.xml")
    assert valid.returncode == 0, valid.stderr
