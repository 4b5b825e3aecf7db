"""The roles' static checks: ansible-lint's production profile, and the shape every role shares."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provision.ansible.roles import ROLES
from provision.resources import playbooks_dir

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# Roles that are no step of the play: other roles include them (include_role).
INCLUDED_ROLES = ("signed_repo",)
ALL_ROLES = (*ROLES, *INCLUDED_ROLES)


def test_every_role_folder_is_a_step_or_an_included_role() -> None:
    assert sorted(p.name for p in (playbooks_dir() / "roles").iterdir()) == sorted(ALL_ROLES)


def test_roles_pass_ansible_lint_production_profile() -> None:
    r = subprocess.run(
        [str(BIN / "ansible-lint"), "--profile", "production", "--offline", "--nocolor", "playbooks/"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Profile 'production' was required, and it passed" in r.stdout + r.stderr


@pytest.mark.parametrize("role", ALL_ROLES)
def test_every_role_documents_and_validates_its_interface(role: str) -> None:
    root = playbooks_dir() / "roles" / role
    defaults = yaml.safe_load((root / "defaults" / "main.yml").read_text())
    spec = yaml.safe_load((root / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert all(name.startswith(f"{role}_") for name in defaults), "defaults are prefixed by the role"
    assert set(defaults) == set(spec), "argument_specs validates exactly the documented defaults"
    assert (root / "tasks" / "main.yml").is_file() and (root / "handlers" / "main.yml").is_file()


@pytest.mark.parametrize("role", ALL_ROLES)
def test_no_role_writes_a_version(role: str) -> None:
    """Versions come from the lock: no driver/CUDA/cuDNN/framework version literal in a role."""
    root = playbooks_dir() / "roles" / role
    version = re.compile(r"(?<![\w.])(\d{3}\.\d{2,3}\.\d{2}|1[0-3]\.\d\.\d+|\d\.\d+\.\d+\.\d+|2\.\d+\.\d+\+)(?![\w.])")
    for path in root.rglob("*"):
        if path.is_file():
            assert not version.search(path.read_text()), f"{path} names a version"
