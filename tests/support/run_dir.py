"""Checks of a written run dir that more than one test module makes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def syntax_check(run: Path) -> None:
    """`ansible-playbook --syntax-check site.yml` in a written run dir passes."""
    bindir = Path(sys.executable).parent
    result = subprocess.run(
        [str(bindir / "ansible-playbook"), "--syntax-check", "site.yml"],
        cwd=run,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"},
    )
    assert result.returncode == 0, result.stderr
