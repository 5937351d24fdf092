"""systemd/umrouter@.service: systemd accepts it, and it agrees with what the daemon does."""
import configparser
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


def service_section() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, strict=True, empty_lines_in_values=False)
    parser.optionxform = str                      # systemd keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser["Service"]


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
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"         # reload() is SIGHUP's handler
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
