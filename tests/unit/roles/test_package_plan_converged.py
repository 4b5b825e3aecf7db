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
UNMET_TASK = "Name the plan's packages not installed at their versions"
INSTALL = "Install the packages at exactly the plan's versions"


def _task(name: str) -> dict[str, Any]:
    tasks: list[dict[str, Any]] = yaml.safe_load(APT_TASKS.read_text())
    return next(t for t in tasks if t["name"] == name)


DPKG = [
    "tzdata 2025b-0+deb12u2 hold ok installed",
    "nvidia-open 1:620.70.06-1 install ok installed",
    "python3-venv 3.11.2-1+b1 install ok installed",
    "nvidia-open-575 575.51.03-1 hold ok installed",
    "g++ 4:12.2.0-3 install ok installed",
    "old-conf 1.0 deinstall ok config-files",
    "half 2.0-1 install ok half-configured",
]
TZDATA = "tzdata=2025b-0+deb12u2"
CONVERGED = [TZDATA, "nvidia-open=1:620.70.06-1", "python3-venv", "g++=4:12.2.0-3", "nvidia-open-575=575.51.03-*"]
UNMET = [
    "tzdata=2024a-0+deb12u1",  # installed at another version: the rollback's downgrade
    "nvidia-open=620.70.06-1",  # the epoch is part of the version dpkg and apt compare
    "nvidia-open-575=580.95.05-*",  # the branch's other release
    "nvidia-open-575=575.51.0-*",  # a wildcard matches the whole version, not a prefix of it
    "g+=4:12.2.0-3",  # "+" is no regular expression's here
    "half=2.0-1",  # unpacked but not configured: apt must finish it
    "old-conf",  # removed, its conffiles left: not installed
    "absent",
]
# case -> (the plan's specs, whether the previous plan's removal ran)
CASES: dict[str, tuple[list[str], bool]] = {
    "converged": (CONVERGED, False),  # a wildcard among them, as the plan pins a release
    **{spec: ([TZDATA, spec], False) for spec in UNMET},
    "removed": ([TZDATA], True),
}


@pytest.fixture(scope="module")
def decided(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """What the role decides in each case (the install task's condition, the installed and the held
    names), from one ansible-playbook run with a play per case."""
    tmp = tmp_path_factory.mktemp("package-plan")
    install = _task(INSTALL)
    plays = [
        {
            "name": case,
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                "package_plan_specs": specs,
                "package_plan_dpkg": {"stdout_lines": DPKG},
                "package_plan_removed": {"changed": removed},
            },
            "tasks": [
                _task(FACTS),
                _task(UNMET_TASK),
                {
                    "name": "Write what the role decided",
                    "ansible.builtin.copy": {
                        "dest": str(tmp / f"{i}.json"),
                        "mode": "0600",
                        "content": "{{ {'install': (" + install["when"] + "), 'installed':"
                        " package_plan_installed_names, 'held': package_plan_held_names} | to_json }}",
                    },
                },
            ],
        }
        for i, (case, (specs, removed)) in enumerate(CASES.items())
    ]
    (tmp / "play.yml").write_text(yaml.safe_dump(plays))
    env = {**os.environ, "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"}
    run = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-c", "local", str(tmp / "play.yml")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return {case: json.loads((tmp / f"{i}.json").read_text()) for i, case in enumerate(CASES)}


def test_a_plan_installed_at_its_versions_skips_apt_and_names_the_holds(decided: dict[str, dict[str, Any]]) -> None:
    doc = decided["converged"]
    assert doc["install"] is False
    assert doc["installed"] == ["tzdata", "nvidia-open", "python3-venv", "nvidia-open-575", "g++"]
    assert doc["held"] == ["tzdata", "nvidia-open-575"]


@pytest.mark.parametrize("spec", UNMET)
def test_apt_runs_when_one_package_is_not_installed_at_the_plans_version(
    decided: dict[str, dict[str, Any]], spec: str
) -> None:
    assert decided[spec]["install"] is True


def test_apt_runs_after_the_previous_plans_removal_even_when_the_plan_was_installed(
    decided: dict[str, dict[str, Any]],
) -> None:
    assert decided["removed"]["install"] is True
