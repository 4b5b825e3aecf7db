"""render: the run dir's glue, byte for byte against golden files, and what users cannot inject.

Golden files live in tests/unit/golden/render/<os>/; the locks they come from are
tests/unit/golden/render/<os>.lock (written once by the resolver, kept fixed so that a change in
the knowledge data does not move these goldens). Regenerate after an intended change with
PROVISION_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.ansible.checks import dump
from provision.ansible.render import become_answers, render_run
from provision.ansible.rundir import write_run_dir
from provision.errors import BadInput
from provision.model import Lock, LockGroup
from provision.model.settings import AptSettings, InstallSettings, PipSettings
from tests.support.run_dir import syntax_check

GOLDEN = Path(__file__).parents[1] / "golden" / "render"
OS_RELEASES = ["ubuntu-22.04", "ubuntu-24.04", "debian-13", "debian-12", "rhel-9", "rocky-9", "amzn-2023"]
HOSTS = {
    "gpu-1.example": {"ansible_host": "10.0.0.1", "ansible_user": "ubuntu", "ansible_port": "2222"},
    "gpu-2.example": {"ansible_host": "10.0.0.2", "ansible_password": "never-copied"},
}
INSTALL = InstallSettings(
    pip=PipSettings(find_links=("/srv/wheels",)), apt=AptSettings(proxy="http://proxy.example:3128")
)
UPDATE = os.environ.get("PROVISION_UPDATE_GOLDEN") == "1"


def _lock(os_id: str) -> dict:
    return json.loads((GOLDEN / f"{os_id}.lock").read_text())


@pytest.mark.parametrize("os_id", OS_RELEASES)
def test_rendered_glue_matches_golden_files(os_id: str) -> None:
    files = render_run(Lock.from_json(_lock(os_id)), HOSTS, INSTALL, roles_path="/usr/share/provision/roles").files
    folder = GOLDEN / os_id
    if UPDATE:
        shutil.rmtree(folder, ignore_errors=True)
        for rel, text in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
    expected = {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.is_file()}
    assert files == expected


@pytest.mark.parametrize("os_id", OS_RELEASES)
def test_rendered_run_dir_passes_ansible_syntax_check(os_id: str, tmp_path: Path) -> None:
    lock = _lock(os_id)
    run = write_run_dir(tmp_path / "run", Lock.from_json(lock), json.dumps(lock), HOSTS, INSTALL)
    assert set(run.files) >= {"site.yml", "inventory.yml", "ansible.cfg", "group_vars/all.yml", "provision.lock"}
    syntax_check(run.path)
    bindir = Path(sys.executable).parent
    # the inventory Ansible sees is the one we meant: every host in its group, secrets not copied
    inv = subprocess.run(
        [str(bindir / "ansible-inventory"), "--list"],
        cwd=run.path,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"},
        check=True,
    )
    listed = json.loads(inv.stdout)
    group = lock["groups"][0]["name"].lower().replace("-", "_").replace(".", "_")
    assert sorted(listed[group]["hosts"]) == ["gpu-1.example", "gpu-2.example"]
    hostvars = listed["_meta"]["hostvars"]
    assert hostvars["gpu-1.example"]["ansible_port"] == 2222
    assert "ansible_password" not in hostvars["gpu-2.example"]


def test_group_vars_carry_the_lock_versions_and_no_role_writes_one() -> None:
    lock = _lock("debian-12")
    files = render_run(Lock.from_json(lock), HOSTS, INSTALL, roles_path="/r").files
    name = next(k for k in files if k.startswith("group_vars/") and not k.endswith("all.yml"))
    data = yaml.safe_load(files[name])
    stack = lock["groups"][0]["stack"]
    assert data["nvidia_driver_version"] == stack["driver"]["version"]
    assert data["fabric_manager_version"] == stack["driver"]["version"]
    assert data["cuda_toolkit_version"] == stack["cuda_toolkit"]["version"]
    assert data["cudnn_version"] == stack["cudnn"]["version"]
    assert data["frameworks_installs"][0]["index_url"] == stack["frameworks"]["torch"]["index_url"]
    assert data["frameworks_find_links"] == ["/srv/wheels"]


def test_strings_that_ansible_would_template_are_refused() -> None:
    assert dump({"a": "x{y}", "b": ["570"], "c": 3}) == "a: x{y}\nb:\n- '570'\nc: 3\n"
    for evil in ("{{ lookup('pipe', 'id') }}", "{% raw %}", "{# c #}"):
        with pytest.raises(BadInput, match="template marker"):
            dump({"frameworks_find_links": ["/srv", evil]})
    lock = _lock("debian-12")
    lock["groups"][0]["stack"]["frameworks"]["torch"]["index_url"] = "https://x/{{ lookup('env', 'HOME') }}"
    with pytest.raises(BadInput):
        render_run(Lock.from_json(lock), HOSTS, INSTALL, roles_path="/r")


@pytest.mark.parametrize(
    "install, what",
    [
        ({"venv": "relative/venv"}, "install.venv"),
        ({"venv": "/opt/{{ evil }}"}, "install.venv"),
        ({"pip": PipSettings(index_url="http://x/\n- hosts: all")}, "URL"),
        ({"pip": PipSettings(trusted_hosts=("a b",))}, "trusted_hosts"),
        ({"apt": AptSettings(proxy="http://proxy:3128 -o x")}, "URL"),
        ({"reboot": "sometimes"}, "install.reboot"),
    ],
)
def test_user_values_are_validated(install: dict[str, Any], what: str) -> None:
    # the settings are checked when they are built (once, at config loading), before any render
    with pytest.raises(BadInput, match=what.replace(".", r"\.")):
        render_run(Lock.from_json(_lock("debian-12")), HOSTS, InstallSettings(**install), roles_path="/r")


@pytest.mark.parametrize(
    "hosts",
    [
        {"bad host;rm -rf /": {}},
        {"gpu-1.example": {"ansible_host": "10.0.0.1\n[evil]"}},
    ],
)
def test_host_names_and_connection_values_are_validated(hosts: dict) -> None:
    lock = _lock("debian-12")
    lock["groups"][0]["hosts"] = list(hosts)
    with pytest.raises(BadInput):
        render_run(Lock.from_json(lock), hosts, INSTALL, roles_path="/r")


def test_overrides_only_name_role_variables() -> None:
    files = render_run(
        Lock.from_json(_lock("debian-12")),
        HOSTS,
        INSTALL,
        roles_path="/r",
        overrides={"nvidia_driver_debian_mirror": "http://mirror/debian"},
    ).files
    assert "nvidia_driver_debian_mirror: http://mirror/debian" in "".join(files.values())
    with pytest.raises(BadInput, match="not a role variable"):
        render_run(
            Lock.from_json(_lock("debian-12")), HOSTS, INSTALL, roles_path="/r", overrides={"ansible_become_exe": "sh"}
        )


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"frameworks_no_index": "maybe"}, "--set frameworks_no_index: 'maybe' is not a boolean"),
        ({"preflight_min_free_gib": "lots"}, "--set preflight_min_free_gib: 'lots' is not an integer"),
        ({"nvidia_driver_reboot": "sometimes"}, "--set nvidia_driver_reboot: 'sometimes' is not one of auto, never"),
        ({"verify_frameworks": ["torch"]}, "--set verify_frameworks: ['torch'] is not a mapping"),
        ({"frameworks_find_links": {"a": 1}}, "--set frameworks_find_links: {'a': 1} is not a list"),
        ({"nvidia_driver_kernel": ["6.1"]}, "--set nvidia_driver_kernel: ['6.1'] is not a string"),
        (
            {"frameworks_no_indx": True},
            "'frameworks_no_indx' is not a role variable (did you mean frameworks_no_index?)",
        ),
    ],
)
def test_overrides_are_checked_against_the_roles_argument_specs(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(BadInput) as exc:
        render_run(Lock.from_json(_lock("debian-12")), HOSTS, INSTALL, roles_path="/r", overrides=overrides)
    assert exc.value.one_line().startswith(f"error: {message}"), exc.value.one_line()


def test_overrides_take_what_ansible_converts() -> None:
    """The spellings Ansible's argument spec validation accepts pass here too."""
    ok = {
        "frameworks_no_index": "yes",
        "python_env_enabled": 0,
        "preflight_min_free_gib": "50",
        "nvidia_driver_reboot_timeout": 900,
        "frameworks_find_links": "/a,/b",
        "nvidia_driver_kernel": 6.1,
        "container_toolkit_runtime": "",
        "verify_frameworks": {},
        "cudnn_package_lock_timeout": None,
    }
    files = render_run(Lock.from_json(_lock("debian-12")), HOSTS, INSTALL, roles_path="/r", overrides=ok).files
    assert "preflight_min_free_gib: '50'" in "".join(files.values())


def test_forks_follow_the_fleet() -> None:
    lock = _lock("debian-12")
    lock["groups"][0]["hosts"] = [f"h{i}" for i in range(80)]
    cfg = render_run(Lock.from_json(lock), {}, INSTALL, roles_path="/r").files["ansible.cfg"]
    assert "forks = 50\n" in cfg and "pipelining = True" in cfg and "ControlPersist=60s" in cfg
    assert "fact_caching = jsonfile" in cfg and "roles_path = /r\n" in cfg


def test_a_sudo_password_is_a_prompt_of_the_play_never_a_value_in_a_file() -> None:
    hosts = {**HOSTS, "gpu-1.example": {**HOSTS["gpu-1.example"], "ansible_become_password": "s3cret{{x}}"}}
    files = render_run(
        Lock.from_json(_lock("debian-12")), hosts, INSTALL, roles_path="/usr/share/provision/roles"
    ).files
    assert not any("s3cret" in text for text in files.values())
    inventory = yaml.safe_load(files["inventory.yml"])
    [group] = inventory["all"]["children"].values()
    assert group["hosts"]["gpu-1.example"]["ansible_become_password"] == "{{ provision_become_password_1 }}"
    assert "ansible_become_password" not in group["hosts"]["gpu-2.example"]
    [play] = yaml.safe_load(files["site.yml"])
    # unsafe: the answer is never templated (a password may hold "{{")
    assert play["vars_prompt"] == [
        {
            "name": "provision_become_password_1",
            "prompt": "sudo password for gpu-1.example",
            "private": True,
            "unsafe": True,
        }
    ]
    [(pattern, answer)] = become_answers({"gpu-1.example": "s3cret{{x}}"}).items()
    assert answer == "s3cret{{x}}"
    assert re.search(pattern, "sudo password for gpu-1.example: ", re.M)
    assert not re.search(pattern, "sudo password for gpu-1Xexample: ", re.M)


def test_a_users_ssh_args_are_still_checked_for_template_markers() -> None:
    hosts = {"gpu-1.example": {"ansible_ssh_common_args": "-o ProxyCommand={{ lookup('pipe', 'id') }}"}}
    with pytest.raises(BadInput, match="template marker"):
        render_run(Lock.from_json(_lock("debian-12")), hosts, INSTALL, roles_path="/usr/share/provision/roles")


def test_a_standalone_python_renders_uv_from_the_knowledge_and_the_install_settings() -> None:
    """stack.python_source standalone: python_env gets uv's pinned version (os.yaml), the mirror
    settings and install.pip's index options; the OS packages are only what runs uv (python3-venv)."""
    from provision.ansible.role_vars import group_vars
    from provision.matrix import load

    lock = _lock("debian-12")
    group = lock["groups"][0]
    group["stack"] = {**group["stack"], "python": "3.12", "python_source": "standalone"}
    install = InstallSettings(
        pip=PipSettings(index_url="https://mirror.example/simple", trusted_hosts=("mirror.example",)),
        python_mirror="https://mirror.example/pbs",
        python_downloads_json="file:///srv/python/downloads.json",
    )
    out = group_vars(LockGroup.from_json(group), install)
    sp = load().t.standalone_python
    assert sp is not None
    assert out["python_env_source"] == "standalone" and out["python_env_python"] == "3.12"
    assert out["python_env_uv_version"] == sp.uv
    assert out["python_env_os_packages"] == ["python3", "python3-venv"]  # Debian 12's own 3.11 runs uv
    assert out["python_env_python_mirror"] == "https://mirror.example/pbs"
    assert out["python_env_python_downloads_json"] == "file:///srv/python/downloads.json"
    assert out["python_env_pip_args"] == ["--index-url=https://mirror.example/simple", "--trusted-host=mirror.example"]
    os_group = {**group, "stack": {**group["stack"], "python_source": "os"}}
    assert "python_env_uv_version" not in group_vars(LockGroup.from_json(os_group), install)
    with pytest.raises(BadInput, match="python_source"):
        group_vars(LockGroup.from_json({**group, "stack": {**group["stack"], "python_source": "conda"}}), install)
    with pytest.raises(BadInput, match="URL"):
        group_vars(LockGroup.from_json(group), InstallSettings(python_mirror="https://x/ -o evil"))


def test_lock_owned_variables_are_exactly_what_group_vars_takes_from_the_lock() -> None:
    """role_vars.LOCK_OWNED (what plan and up refuse to --set) against group_vars itself: render
    every golden lock with two install settings that differ in every value. What stays the same
    came from the lock and must be in LOCK_OWNED; what moved came from the settings and must not."""
    from provision.ansible.role_vars import LOCK_OWNED, WHERE_FROM, group_vars
    from provision.ansible.roles import role_argument_specs

    plain = InstallSettings()
    other = InstallSettings(
        venv="/srv/other/venv",
        pip=PipSettings("https://mirror.example/simple", ("https://x.example/s",), ("/w",), ("x.example",)),
        apt=AptSettings(mirror="http://mirror.example/debian", proxy="http://proxy.example:3128"),
        reboot="never",
        reboot_controller=True,
        mok_key="/k.priv",
        mok_cert="/k.der",
        installer="pip",
    )
    # a wheel closure (on an index the mirror does not replace) for install.installer to act on
    closure = {
        "name": "torch",
        "version": "2.13.0+cpu",
        "sha256": "0" * 64,
        "url": "https://download.pytorch.org/whl/cpu/torch.whl",
        "index": "https://download.pytorch.org/whl/cpu",
    }
    from_lock: set[str] = set()
    from_settings: set[str] = set()
    for os_id in OS_RELEASES:
        for group in (g for lg in _lock(os_id)["groups"] for g in (lg, {**lg, "python_packages": [closure]})):
            a, b = group_vars(LockGroup.from_json(group), plain), group_vars(LockGroup.from_json(group), other)
            for key in a.keys() | b.keys():
                (from_lock if a.get(key, ...) == b.get(key, ...) else from_settings).add(key)
    from_lock -= from_settings  # moved in any lock: a setting reaches it
    # group_vars renders these two only from a lock that plans the container toolkit or DCGM,
    # which no resolve does yet; they come from the lock's stack when it does
    unplanned = {"container_toolkit_version", "dcgm_version"}
    owned = set(LOCK_OWNED)
    assert not owned & WHERE_FROM
    expected = (owned | WHERE_FROM) - unplanned
    assert from_lock == expected, (sorted(from_lock - expected), sorted(expected - from_lock))
    assert owned | WHERE_FROM <= set(role_argument_specs()), sorted((owned | WHERE_FROM) - set(role_argument_specs()))
