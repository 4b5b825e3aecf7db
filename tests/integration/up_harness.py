"""How the `provision up` tests run it on the SSH test hosts: the CPU torch config, the command
line, and the environment (shared by test_up.py and test_up_fleet.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.hosts import harness


def up_args(hostset: harness.HostSet, config: Path, *extra: str, inventory: Path | None = None) -> list[str]:
    inv = inventory or hostset.inventory
    return [
        sys.executable,
        "-m",
        "provision",
        "up",
        "-i",
        str(inv),
        "-F",
        str(hostset.ssh_config),
        "-c",
        str(config),
        "--set",
        "frameworks_no_index=true",
        "--yes",
        "--json",
        *extra,
    ]


def up_env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def run_up(cwd: Path, args: list[str]) -> tuple[int, dict[str, Any]]:
    r = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=up_env(), timeout=1500)
    assert r.stdout.strip(), r.stderr[-3000:]
    return r.returncode, json.loads(r.stdout)


def up_until(
    cwd: Path, args: list[str], marker: str, sig: signal.Signals, wait_s: float
) -> tuple[subprocess.Popen[str], list[str]]:
    """Start `up` (plain progress lines: stdout is not a terminal) in its own process group and
    send ``sig`` to the whole group once a line holding ``marker`` appears (or after ``wait_s``),
    as a terminal's Ctrl-C or a kill of everything would. Returns the process and the lines seen."""
    proc = subprocess.Popen(
        args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=up_env(), start_new_session=True
    )
    assert proc.stdout is not None
    seen = []
    deadline = time.monotonic() + wait_s
    for line in proc.stdout:
        seen.append(line)
        if marker in line or time.monotonic() > deadline:
            break
    os.killpg(proc.pid, sig)
    return proc, seen
