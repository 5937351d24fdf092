"""tnwgd's command line: -v accepts every shipped example and rejects broken files precisely; -d."""
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_missing_file_is_a_clear_error(tmp_path):
    result = tnwgd("-v", tmp_path / "absent.xml")
    assert result.returncode == 2
    assert "absent.xml" in result.stderr
