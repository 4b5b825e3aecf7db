"""package_plan's converged fast path on apt: the role's own tasks (read from apt.yml, not copied)
run by the real ansible-playbook on this machine's loopback connection, fed dpkg-query lines in
the shape dpkg-query(1) prints for ``${Package} ${Version} ${Status}``. The install task runs
exactly when some package of the plan is not installed at the plan's version, or when the
previous plan's removal ran (autoremove may have taken a package this plan names).

The role's apt path on real hosts (a real downgrade, then the converged run that skips apt) is
test_up_lock.py's tzdata rollback; test_roles' second runs are converged applies of the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.resources import playbooks_dir

pytestmark = pytest.mark.unit

APT_TASKS = playbooks_dir() / "roles" / "package_plan" / "tasks" / "apt.yml"
FACTS = "Name the installed and the held packages"
UNMET = "Name the plan's packages not installed at their versions"
INSTALL = "Install the packages at exactly the plan's versions"


def _task(name: str) -> dict[str, Any]:
    tasks: list[dict[str, Any]] = yaml.safe_load(APT_TASKS.read_text())
    return next(t for t in tasks if t["name"] == name)


def _outcome(tmp_path: Path, specs: list[str], lines: list[str], *, removed: bool = False) -> dict[str, Any]:
    """What the role computes from dpkg-query's ``lines``: the install task's condition, the
    installed and the held names."""
    install = _task(INSTALL)
    out = tmp_path / "out.json"
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                "package_plan_specs": specs,
                "package_plan_dpkg": {"stdout_lines": lines},
                "package_plan_removed": {"changed": removed},
            },
            "tasks": [
                _task(FACTS),
                _task(UNMET),
                {
                    "name": "Write what the role decided",
                    "ansible.builtin.copy": {
                        "dest": str(out),
                        "mode": "0600",
                        "content": "{{ {'install': (" + install["when"] + "), 'installed':"
                        " package_plan_installed_names, 'held': package_plan_held_names} | to_json }}",
                    },
                },
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = {**os.environ, "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"}
    run = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-c", "local", str(tmp_path / "play.yml")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


DPKG = [
    "tzdata 2025b-0+deb12u2 hold ok installed",
    "nvidia-open 1:620.70.06-1 install ok installed",
    "python3-venv 3.11.2-1+b1 install ok installed",
    "nvidia-open-575 575.51.03-1 hold ok installed",
    "g++ 4:12.2.0-3 install ok installed",
    "old-conf 1.0 deinstall ok config-files",
    "half 2.0-1 install ok half-configured",
]


def test_a_plan_installed_at_its_versions_skips_apt_and_names_the_holds(tmp_path: Path) -> None:
    specs = ["tzdata=2025b-0+deb12u2", "nvidia-open=1:620.70.06-1", "python3-venv", "g++=4:12.2.0-3"]
    doc = _outcome(tmp_path, [*specs, "nvidia-open-575=575.51.03-*"], DPKG)  # a wildcard, as the plan pins a release
    assert doc["install"] is False
    assert doc["installed"] == ["tzdata", "nvidia-open", "python3-venv", "nvidia-open-575", "g++"]
    assert doc["held"] == ["tzdata", "nvidia-open-575"]


@pytest.mark.parametrize(
    "spec",
    [
        "tzdata=2024a-0+deb12u1",  # installed at another version: the rollback's downgrade
        "nvidia-open=620.70.06-1",  # the epoch is part of the version dpkg and apt compare
        "nvidia-open-575=580.95.05-*",  # the branch's other release
        "nvidia-open-575=575.51.0-*",  # a wildcard matches the whole version, not a prefix of it
        "g+=4:12.2.0-3",  # "+" is no regular expression's here
        "half=2.0-1",  # unpacked but not configured: apt must finish it
        "old-conf",  # removed, its conffiles left: not installed
        "absent",
    ],
)
def test_apt_runs_when_one_package_is_not_installed_at_the_plans_version(tmp_path: Path, spec: str) -> None:
    assert _outcome(tmp_path, ["tzdata=2025b-0+deb12u2", spec], DPKG)["install"] is True


def test_apt_runs_after_the_previous_plans_removal_even_when_the_plan_was_installed(tmp_path: Path) -> None:
    assert _outcome(tmp_path, ["tzdata=2025b-0+deb12u2"], DPKG, removed=True)["install"] is True
