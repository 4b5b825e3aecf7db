"""The roles' static checks: ansible-lint's production profile, and the shape every role shares."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.ansible.render import render_run
from provision.ansible.roles import ROLES
from provision.model import Lock
from provision.model.defaults import DEFAULT_VENV, INSTALL_METHODS, STANDALONE_PYTHON_DIR
from provision.model.settings import InstallSettings
from provision.resources import playbooks_dir
from tests.integration.roles_harness import GPU_LESS

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
# Roles that are no step of the play: other roles include them (include_role).
INCLUDED_ROLES = ("signed_repo", "package_plan")
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
        # a filter plugin's byte code (Ansible loads the plugin, Python caches it) is not the role's
        if path.is_file() and "__pycache__" not in path.parts:
            assert not version.search(path.read_text()), f"{path} names a version"


# --- the roles' layout: meta/main.yml, vars/<OS>.yml, tags, no test-only switch in the interface ---

# The releases preflight admits, as Galaxy names them: what every role's meta/main.yml claims.
GALAXY_PLATFORMS = {
    "debian-12": ("Debian", "bookworm"),
    "debian-13": ("Debian", "trixie"),
    "ubuntu-22.04": ("Ubuntu", "jammy"),
    "ubuntu-24.04": ("Ubuntu", "noble"),
    "rhel-8": ("EL", "8"),
    "rhel-9": ("EL", "9"),
    "rhel-10": ("EL", "10"),
    "rocky-8": ("EL", "8"),
    "rocky-9": ("EL", "9"),
    "amzn-2023": ("Amazon Linux", "2023"),
}


def _role_yaml(role: str, rel: str) -> Any:
    return yaml.safe_load((playbooks_dir() / "roles" / role / rel).read_text())


@pytest.mark.parametrize("role", ALL_ROLES)
def test_every_role_names_the_platforms_preflight_supports(role: str) -> None:
    supported = _role_yaml("preflight", "defaults/main.yml")["preflight_supported_os"]
    info = _role_yaml(role, "meta/main.yml")["galaxy_info"]
    claimed = {(p["name"], v) for p in info["platforms"] for v in p["versions"]}
    assert claimed == {GALAXY_PLATFORMS[os_id] for os_id in supported}
    assert info["role_name"] == role


def test_the_venv_path_is_defined_once_and_the_other_roles_derive_it() -> None:
    """python_env_path is provision's default install.venv; frameworks_venv and verify_venv keep
    their names (the roles' interface) and default to it."""
    assert _role_yaml("python_env", "defaults/main.yml")["python_env_path"] == DEFAULT_VENV
    assert _role_yaml("python_env", "defaults/main.yml")["python_env_standalone_dir"] == STANDALONE_PYTHON_DIR
    assert _role_yaml("frameworks", "defaults/main.yml")["frameworks_venv"] == "{{ python_env_path }}"
    assert _role_yaml("verify", "defaults/main.yml")["verify_venv"] == "{{ python_env_path }}"
    assert ROLES.index("python_env") < ROLES.index("frameworks") < ROLES.index("verify")


def test_the_roles_install_method_choices_are_the_python_list() -> None:
    """The roles keep YAML `choices:` (Ansible validates without provision); they are
    provision.model.defaults.INSTALL_METHODS, the one list config, the CLI and the resolver use."""
    found = {}
    for role in ALL_ROLES:
        spec = _role_yaml(role, "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
        defaults = _role_yaml(role, "defaults/main.yml")
        for name, option in spec.items():
            if name.endswith("_method"):
                found[name] = option.get("choices")
                assert defaults[name] in INSTALL_METHODS, name
    assert set(found) == {"nvidia_driver_method", "cuda_toolkit_method"}
    assert all(choices == list(INSTALL_METHODS) for choices in found.values()), found


@pytest.mark.parametrize("role", ALL_ROLES)
def test_the_gpu_less_switches_are_documented_role_variables(role: str) -> None:
    """What the role tests set on their GPU-less hosts is each role's documented interface: a bool
    that defaults to true (a real host's run), with a description; no hidden switch is read."""
    defaults = _role_yaml(role, "defaults/main.yml")
    spec = _role_yaml(role, "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    for name in [n for n in GPU_LESS if n.startswith(f"{role}_")]:
        assert defaults[name] is True and GPU_LESS[name] is False, name
        assert spec[name]["type"] == "bool" and spec[name]["description"], name
    if role == "nvidia_driver":  # the run-lock test's stand-in for a reboot, off on real hosts
        assert defaults["nvidia_driver_reboot_lock_only"] is False
        assert spec["nvidia_driver_reboot_lock_only"]["type"] == "bool"
    for path in (playbooks_dir() / "roles" / role).rglob("*.yml"):
        assert "testonly" not in path.read_text(), path.name


@pytest.mark.parametrize("role", ALL_ROLES)
def test_every_task_carries_the_role_tag(role: str) -> None:
    """Top-level tasks carry it; what they include inherits it (blocks, include_tasks, include_role)."""
    for task in _role_yaml(role, "tasks/main.yml"):
        assert role in task.get("tags", []), f"{role}: {task['name']}"


@pytest.mark.parametrize("role", ALL_ROLES)
def test_os_vars_files_define_the_same_variables(role: str) -> None:
    """Each vars/<OS>.yml answers every question the tasks ask of it, under internal names."""
    files = sorted((playbooks_dir() / "roles" / role / "vars").glob("*.yml"))
    names = [set(yaml.safe_load(f.read_text())) for f in files]
    for f, keys in zip(files, names, strict=True):
        assert keys == names[0], f.name
        assert all(k.startswith(f"__{role}_") for k in keys), f.name
    defaults = (playbooks_dir() / "roles" / role / "defaults" / "main.yml").read_text()
    assert "ansible_os_family" not in defaults and "ansible_distribution" not in defaults


def test_the_lock_alone_gives_the_nvidia_repository() -> None:
    """The package plan names the repositories (the lock's packages.repositories); render passes
    each role the ones its packages come from and the roles build none (they used to build a URL
    from facts, then a key URL beside it)."""
    for role in ("nvidia_driver", "fabric_manager", "cuda_toolkit", "cudnn", "container_toolkit", "dcgm"):
        assert _role_yaml(role, "defaults/main.yml")[f"{role}_repositories"] == [], role
    golden = REPO / "tests" / "unit" / "golden" / "render"
    mirror = [
        {"name": "cuda", "url": "http://mirror/r", "key_url": "http://mirror/r/k.pub", "key_fingerprint": "A" * 40}
    ]
    for path in sorted(golden.glob("*.lock")):
        lock = yaml.safe_load(path.read_text())
        for overrides in ({}, {"nvidia_driver_repositories": mirror}):
            files = render_run(Lock.from_json(lock), {}, InstallSettings(), roles_path="/r", overrides=overrides).files
            [group] = [v for k, v in files.items() if k.startswith("group_vars/") and k != "group_vars/all.yml"]
            repos = yaml.safe_load(group)["nvidia_driver_repositories"]
            if overrides:
                assert repos == mirror, path.name
            else:
                # NVIDIA's CUDA repository (nvidia-repo), and EPEL's where dkms comes from it (RHEL, Rocky)
                cuda = [r for r in repos if r["name"] == "cuda"]
                nvidia_repo = lock["groups"][0]["stack"]["driver"]["install_method"] == "nvidia-repo"
                assert len(cuda) == (1 if nvidia_repo else 0), path.name
                assert all(r["url"].startswith("https://developer.download.nvidia.com/") for r in cuda), path.name
                assert {r["name"] for r in repos} <= {"cuda", "epel"}, path.name
