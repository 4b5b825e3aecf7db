"""`python -m provision` run as a user runs it, for the tests: its own process, no terminal on
standard input, and this venv's tools (ansible-playbook, ansible-inventory) first on PATH, as an
activated venv or a pipx install puts them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent

# `offline=True`: the same command with every socket connect and name lookup of its process
# refused, each attempt named on stderr after OFFLINE_MARK (a stand-in for a machine without a
# network, for commands that must reach nothing, such as `plan --assume`). Only this process:
# a child it starts is not covered.
OFFLINE_MARK = "provision tests: network use refused:"
_OFFLINE = f"""
import runpy, socket, sys
def refuse(*args, **kwargs):
    print({OFFLINE_MARK!r}, repr(args), file=sys.stderr)
    raise OSError("network use refused (tests/cli_run.py offline)")
socket.socket.connect = socket.socket.connect_ex = refuse
socket.getaddrinfo = socket.create_connection = refuse
runpy.run_module("provision", run_name="__main__", alter_sys=True)
"""


def provision(
    *args: str, cwd: Path | None = None, timeout: float = 120, offline: bool = False
) -> subprocess.CompletedProcess[str]:
    launch = ["-c", _OFFLINE] if offline else ["-m", "provision"]
    return subprocess.run(
        [sys.executable, *launch, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
    )
