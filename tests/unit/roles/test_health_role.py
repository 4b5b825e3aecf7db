"""The health role run for real by ansible-playbook (through run_playbook) on this machine, its
places moved under a temporary folder: it installs the program, the launcher and the spec; a
second run changes nothing; check mode changes nothing; the launcher runs the program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provision.ansible.apply import run_playbook
from provision.fleet.health_spec import group_hash, health_spec, write_program
from provision.model.lock import parse_lock
from provision.remote.health import FILES
from provision.resources import playbooks_dir

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "render"
PLAY = """\
- name: The health role on this machine
  hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: health
"""

# The role makes its files root's: only root can give a file away.
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the role chowns to root: run as root")


def run_dir(tmp: Path) -> tuple[Path, dict[str, Any]]:
    (tmp / "site.yml").write_text(PLAY)
    (tmp / "ansible.cfg").write_text(f"[defaults]\nroles_path = {playbooks_dir() / 'roles'}\n")
    (tmp / "inventory.yml").write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
    )
    group = parse_lock((GOLDEN / "debian-12.lock").read_text()).groups[0]
    root = tmp / "root"
    values = {
        "health_spec": health_spec(group, group_hash(group), "/opt/provision/venv"),
        "health_sources": write_program(tmp),
        "health_lib_dir": str(root / "lib"),
        "health_launcher": str(root / "sbin" / "provision-health"),
        "health_spec_file": str(root / "etc" / "health.json"),
        "health_state_dir": str(root / "state"),
        "health_python": sys.executable,
    }
    return tmp, values


def apply(tmp: Path, values: dict[str, Any], name: str, check: bool = False) -> int:
    got = run_playbook(
        tmp, "site.yml", inventory=tmp / "inventory.yml", artifacts=tmp / name, extravars=values, check=check
    )
    assert got.ok and got.hosts["localhost"].ok, got.error or got.hosts["localhost"].message
    return got.hosts["localhost"].changed


def test_the_role_installs_the_program_once_and_the_launcher_runs_it(tmp_path: Path) -> None:
    tmp, values = run_dir(tmp_path)
    root = tmp / "root"
    # check mode first: it says what it would change and writes nothing
    assert apply(tmp, values, "check", check=True) > 0
    assert not root.exists()
    (root / "sbin").mkdir(parents=True)  # as /usr/local/sbin is on every OS (the role makes no system folder)
    assert apply(tmp, values, "first") > 0
    assert sorted(p.name for p in (root / "lib" / "health").iterdir()) == sorted(FILES)
    spec = root / "etc" / "health.json"
    assert json.loads(spec.read_text()) == values["health_spec"]
    assert spec.stat().st_mode & 0o777 == 0o644 and spec.stat().st_uid == 0
    launcher = root / "sbin" / "provision-health"
    assert launcher.stat().st_mode & 0o777 == 0o755
    assert apply(tmp, values, "second") == 0  # idempotent: a second run changes nothing

    # the launcher runs the installed copy with the spec and state the role placed; this machine
    # is no A100 host with the lock's driver, so it is unhealthy, naming the lock's driver
    ran = subprocess.run([str(launcher), "--json"], capture_output=True, text=True, timeout=60, cwd="/")
    doc = json.loads(ran.stdout)
    assert ran.returncode == 1 and doc["exit"] == 1 and doc["status"] == "unhealthy", ran.stdout + ran.stderr
    assert doc["lock_hash"] == values["health_spec"]["lock_hash"]
    assert any(p.startswith("drift driver: locked 595.58.03") for p in doc["problems"]), doc["problems"]
    assert (root / "state" / "health-state.json").is_file()


def test_the_integrations_files_are_written_as_given_once(tmp_path: Path) -> None:
    """integrations.slurm's files (health_files, from provision/fleet/integrations.py role_vars):
    written as root with their modes, nothing in check mode, nothing more on a second run. (The
    export timer needs systemd as PID 1, which this machine lacks: the Slurm integration test on
    the SSH test hosts runs it.)"""
    tmp, values = run_dir(tmp_path)
    root = tmp / "root"
    slurm = root / "slurm"
    values["health_files"] = [
        {"path": str(root / "lib" / "provision-health-slurm"), "content": "#!/bin/sh\nexit 0\n", "mode": "0755"},
        {"path": str(slurm / "helpers.conf"), "content": "# mark\nFeature=f Helper=/x\n", "mode": "0644"},
    ]
    values["health_export_unit"] = "provision-health-export-unit-test"  # no such unit here: nothing to stop
    (root / "sbin").mkdir(parents=True)
    slurm.mkdir()
    assert apply(tmp, values, "check", check=True) > 0
    assert not (slurm / "helpers.conf").exists()
    assert apply(tmp, values, "first") > 0
    program = root / "lib" / "provision-health-slurm"
    assert program.read_text() == "#!/bin/sh\nexit 0\n" and program.stat().st_mode & 0o777 == 0o755
    assert (slurm / "helpers.conf").stat().st_mode & 0o777 == 0o644 and program.stat().st_uid == 0
    assert apply(tmp, values, "second") == 0
