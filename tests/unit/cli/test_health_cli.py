"""`provision health` through the real CLI, on this machine (--local, the real local Transport)
and on an inventory host nobody listens for. The host program is the real one
(provision/remote/health/), put on PATH as `provision-health` by a STAND-IN launcher (the health
role's, pointed at a spec and state in a temporary folder instead of /etc and /var/lib)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from provision.fleet.health import LAUNCHER
from provision.fleet.state import State

REPO = Path(__file__).resolve().parents[3]
LOCK_HASH = "0123456789abcdef"


def spec(python_packages: list[dict[str, str]], venv: str | None) -> dict[str, Any]:
    """A host with no GPU and no driver in its lock (as the CPU test hosts)."""
    return {
        "schema": "provision.health/1",
        "lock_hash": LOCK_HASH,
        "group": "cpu",
        "expected": {},
        "driver": {"manager": "apt", "package": None},
        "gpus": {"count": 0, "models": [], "nvswitches": None},
        "fabric_manager": None,
        "persistence": False,
        "venv": venv,
        "python_packages": python_packages,
        "verify": {"verdict": "pass", "at": "2026-12-01T10:00:00+00:00", "max_age_s": None},
    }


def provision(tmp: Path, *args: str, launcher: bool = True) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp / "bin"
    if launcher:
        path = f"{bin_dir}:{os.environ['PATH']}"
    elif Path(LAUNCHER).exists():
        # this machine has the real launcher (`make demo` installs it), which `provision health`
        # falls back to: a STAND-IN on PATH answers as sh does for a missing command (127)
        absent = tmp / "absent"
        absent.mkdir(exist_ok=True)
        (absent / "provision-health").write_text("#!/bin/sh\nexit 127\n")
        (absent / "provision-health").chmod(0o755)
        path = f"{absent}:{os.environ['PATH']}"
    else:
        path = os.environ["PATH"]
    return subprocess.run(
        [sys.executable, "-m", "provision", *args, "--state", str(tmp / "state.db")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp,
        env={**os.environ, "PATH": path, "PYTHONPATH": str(REPO), "COLUMNS": "250"},  # a table on one line a row
    )


@pytest.fixture
def host(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    argv = [
        sys.executable, "-m", "provision.remote.health", "--spec", str(tmp_path / "health.json"),
        "--state", str(tmp_path / "health-state.json"), "--last-verify", str(tmp_path / "last-verify.json"),
    ]  # fmt: skip
    launcher = bin_dir / "provision-health"
    launcher.write_text(f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(REPO))} exec {shlex.join(argv)} "$@"\n')
    launcher.chmod(0o755)
    venv = Path(sys.prefix)  # this venv, with one of its real distributions locked
    pins = [{"name": "iniconfig", "version": version("iniconfig"), "sha256": "0" * 64}]
    (tmp_path / "health.json").write_text(json.dumps(spec(pins, str(venv))))
    state = State(tmp_path / "state.db")
    state.record_applied("r1", "localhost", LOCK_HASH, 3)  # `up` ran here: status lists the host
    state.close()
    return tmp_path


def test_a_healthy_host_is_exit_0_and_its_health_is_in_status(host: Path) -> None:
    ran = provision(host, "health", "--local", "--json")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    doc = json.loads(ran.stdout)
    assert doc["ok"] is True and doc["counts"] == {"healthy": 1}
    (h,) = doc["hosts"]
    assert (h["host"], h["status"], h["problems"], h["lock_hash"]) == ("localhost", "healthy", [], LOCK_HASH)
    assert h["report"]["facts"]["verify"]["verdict"] == "pass"
    status = json.loads(provision(host, "status", "--json").stdout)
    (listed,) = status["hosts"]
    assert listed["health"]["status"] == "healthy" and listed["health"]["lock_hash"] == LOCK_HASH
    table = provision(host, "health", "--local")
    assert table.returncode == 0 and "healthy" in table.stdout and LOCK_HASH in table.stdout


def test_a_drifted_host_is_exit_1_naming_it_and_status_shows_it(host: Path) -> None:
    doc = json.loads((host / "health.json").read_text())
    doc["python_packages"].append({"name": "torch-not-here", "version": "2.13.0", "sha256": "0" * 64})
    (host / "health.json").write_text(json.dumps(doc))
    ran = provision(host, "health", "--local")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "unhealthy" in ran.stdout and "drift torch-not-here: locked 2.13.0, found none" in ran.stdout
    status = provision(host, "status")
    assert "unhealthy" in status.stdout and "torch-not-here" in status.stdout, status.stdout
    (listed,) = json.loads(provision(host, "status", "--json").stdout)["hosts"]
    assert listed["health"]["problems"] == ["drift torch-not-here: locked 2.13.0, found none"]


def test_a_host_without_the_program_or_unreachable_is_exit_1_and_says_so(host: Path) -> None:
    ran = provision(host, "health", "--local", "--json", launcher=False)
    assert ran.returncode == 1
    (h,) = json.loads(ran.stdout)["hosts"]
    assert h["status"] == "not-installed" and "run `provision up`" in ran.stderr
    # a host nobody listens for: port 9 (discard) on this machine, refused at once
    inventory = host / "hosts.ini"
    inventory.write_text("[gpu]\nnobody ansible_host=127.0.0.1 ansible_port=9 ansible_user=root\n")
    ran = provision(host, "health", "-i", str(inventory), "--json", "--connect-timeout", "3")
    assert ran.returncode == 1
    (h,) = json.loads(ran.stdout)["hosts"]
    assert h["status"] == "unreachable" and h["error"] and ran.stderr.strip() == h["error"]


def test_bad_input_is_exit_2_in_one_line_before_any_host(host: Path) -> None:
    inventory = host / "hosts.ini"
    inventory.write_text("[gpu]\ngpu-1 ansible_host=127.0.0.1 ansible_port=9\n")
    ran = provision(host, "health", "-i", str(inventory), "--limit", "cpu*")
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1 and "matches no host" in ran.stderr, ran.stderr
    assert not json.loads(provision(host, "status", "--json").stdout)["hosts"][0]["health"]
