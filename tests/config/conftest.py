"""Fixtures for configuration tests: a writer for one-off tnw-gateway files next to the LAN configs."""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from tests.config.samples import VALID


@pytest.fixture
def write_gateway(tmp_path):
    """write_gateway(portals, daemon="", name="gateway.xml", **files) -> path in tmp_path.

    lan1.cfg .. lan3.cfg are copied alongside; extra files are given as file_name=text, with "__"
    standing for "." in the name (lan9__cfg="...").
    """
    for cfg in VALID.glob("lan*.cfg"):
        shutil.copy(cfg, tmp_path / cfg.name)

    def write(portals: str, daemon: str = "", name: str = "gateway.xml", **files: str) -> Path:
        for file_name, text in files.items():
            (tmp_path / file_name.replace("__", ".")).write_text(textwrap.dedent(text).lstrip())
        daemon_xml = f"<daemon>{daemon}</daemon>" if daemon else ""
        path = tmp_path / name
        path.write_text(f'<tnw-gateway version="1.0">\n{daemon_xml}\n<portals>\n{portals}\n</portals>\n'
                        f'</tnw-gateway>\n')
        return path
    return write
