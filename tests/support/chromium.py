"""Debian's chromium, headless, as the web monitor's browser: render a page, keep a screenshot.

A missing chromium is an error, never a skip: `make test` installs it (scripts/install-sysdeps.sh).
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
         "--window-size=1280,1800"]


@dataclass
class Rendered:
    url: str
    dom: str
    screenshot: Path


def chromium_path() -> str:
    path = shutil.which("chromium")
    if path is None:
        raise AssertionError("chromium is not installed; run `make sysdeps` (scripts/install-sysdeps.sh) "
                             "or `apt-get install -y chromium`")
    return path


def render(url: str, screenshot: Path, profile: Path, timeout: float = 60.0) -> Rendered:
    """Load `url` once: the DOM after loading, and a PNG screenshot of the page at `screenshot`."""
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    argv = [chromium_path(), *FLAGS, f"--user-data-dir={profile}", f"--screenshot={screenshot}", "--dump-dom", url]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if done.returncode != 0 or not screenshot.exists():
        raise AssertionError(f"chromium failed on {url} (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return Rendered(url, done.stdout, screenshot)
