"""`python -m provision` run as a user runs it, for the tests: its own process, no terminal on
standard input, and this venv's tools (ansible-playbook, ansible-inventory) first on PATH, as an
activated venv or a pipx install puts them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def provision(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "provision", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
    )
