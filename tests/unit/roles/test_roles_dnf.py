"""The roles' dnf paths (and the apt pin), templated by Ansible itself with per-OS package plans.

The RPM families cannot run here (the test hosts are Debian): each case is a lock group whose
``packages`` is written by hand in the contract's shape (provision.lock/2) for rhel-9, rocky-9,
rhel-10 and amzn-2023 at a branch below and from 590, rendered through role_vars into a run dir
that `ansible-playbook --syntax-check` reads, and the task arguments of the dnf paths are
templated with Ansible's own Templar on top of the roles' defaults and vars/<OS>.yml, as the
play would see them. The versions and names are the ones docs/explanation/packaging.md cites (research part).
The versionlock module is tested on real entry lines (NVIDIA's Version-locking page).
"""

from __future__ import annotations

import base64
import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from provision.ansible.role_vars import group_vars
from provision.ansible.rundir import write_run_dir
from provision.model import Lock, LockGroup
from provision.model.settings import InstallSettings
from provision.resources import playbooks_dir
from tests.support.run_dir import syntax_check

ROLES = playbooks_dir() / "roles"
GOLDEN = Path(__file__).parents[1] / "golden" / "render"
CUDA = "https://developer.download.nvidia.com/compute/cuda/repos"
# rhel8/9 and amzn2023: D42D0685 (cuda-repo-management SIGNATURES.md). rhel10's CDF6BA43 has no
# published fingerprint yet: the test uses a stand-in one (the role checks whatever the plan pins).
D42D0685 = "610C7B14E068A878070DA4E99CD0A493D42D0685"
STANDIN_CDF6BA43 = "C" * 32 + "CDF6BA43"
KEYS = {"rhel9": ("D42D0685", D42D0685), "rhel10": ("CDF6BA43", STANDIN_CDF6BA43), "amzn2023": ("D42D0685", D42D0685)}
FACTS = {
    "rhel-9": {"ansible_distribution": "RedHat", "ansible_distribution_major_version": "9"},
    "rocky-9": {"ansible_distribution": "Rocky", "ansible_distribution_major_version": "9"},
    "rhel-10": {"ansible_distribution": "RedHat", "ansible_distribution_major_version": "10"},
    "amzn-2023": {"ansible_distribution": "Amazon", "ansible_distribution_major_version": "2023"},
}
KERNEL = "5.14.0-503.11.1.el9_5.x86_64"


def _plan(os_id: str, driver: str) -> dict[str, Any]:
    """The contract's packages for an HGX H100 group with the toolkit and cuDNN (Driver
    Installation Guide: from 575 `nvidia-driver:<b>-open` + nvidia-open on EL8/9/AL2023, no
    streams on EL10; below, <b>-open with kmod-nvidia-open-dkms; FM renamed at 580)."""
    branch = int(driver.split(".", maxsplit=1)[0])
    repo_dir = {"rhel-9": "rhel9", "rocky-9": "rhel9", "rhel-10": "rhel10", "amzn-2023": "amzn2023"}[os_id]
    key, fpr = KEYS[repo_dir]
    url = f"{CUDA}/{repo_dir}/x86_64/"
    ver = f"3:{driver}"
    driver_pkgs = ["nvidia-open"] if branch >= 575 else ["nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-open-dkms"]
    fm = "nvidia-fabricmanager" if branch >= 580 else "nvidia-fabric-manager"
    install = [
        *({"name": n, "version": ver, "role": "nvidia_driver", "repository": "cuda"} for n in driver_pkgs),
        {"name": fm, "version": driver, "role": "fabric_manager", "repository": "cuda"},
        {"name": "cuda-toolkit-12-8", "version": None, "role": "cuda_toolkit", "repository": "cuda"},
        {"name": "libcudnn9-cuda-12", "version": "9.10.2.21", "role": "cudnn", "repository": "cuda"},
        {"name": "libcudnn9-devel-cuda-12", "version": "9.10.2.21", "role": "cudnn", "repository": "cuda"},
    ]
    return {
        "manager": "dnf",
        "repositories": [{"name": "cuda", "url": url, "key_url": f"{url}{key}.pub", "key_fingerprint": fpr}],
        "module_streams": [] if os_id == "rhel-10" else [f"nvidia-driver:{branch}-open"],
        "install": install,
        "holds": [e["name"] for e in install],
        "services": [
            {"name": "nvidia-persistenced", "role": "nvidia_driver"},
            {"name": "nvidia-fabricmanager", "role": "fabric_manager"},
        ],
        "pip": None,
    }


def _lock(os_id: str, driver: str) -> dict[str, Any]:
    golden = "rhel-9" if os_id == "rhel-10" else os_id
    lock: dict[str, Any] = json.loads((GOLDEN / f"{golden}.lock").read_text())
    group = lock["groups"][0]
    group["host"]["os"] = os_id
    stack = group["stack"]
    stack["driver"].update(version=driver, branch=driver.split(".", maxsplit=1)[0], install_method="nvidia-repo")
    stack["fabric_manager"] = {"version": driver}
    stack["cuda_toolkit"] = {"version": "12.8"}
    stack["cudnn"] = {"version": "9.10.2.21", "cuda_major": 12}
    group["packages"] = _plan(os_id, driver)
    return lock


CASES = [(os_id, d) for os_id in FACTS for d in ("570.124.06", "595.58.03")]


@pytest.mark.parametrize(("os_id", "driver"), CASES)
def test_dnf_plans_render_a_run_dir_that_passes_the_syntax_check(os_id: str, driver: str, tmp_path: Path) -> None:
    lock = _lock(os_id, driver)
    run = write_run_dir(
        tmp_path / "run", Lock.from_json(lock), json.dumps(lock), {"gpu-1": {"ansible_host": "10.0.0.1"}}, INSTALL
    )
    syntax_check(run.path)


INSTALL = InstallSettings()


# --- the task arguments, templated by Ansible ----------------------------------------------------


def _load(path: Path) -> Any:
    """YAML as Ansible loads it: ansible-core 2.19 templates only strings its own loader read."""
    from ansible.parsing.dataloader import DataLoader

    return DataLoader().load_from_file(str(path), trusted_as_template=True)


def _task(role: str, file: str, name: str) -> dict[str, Any]:
    tasks = _load(ROLES / role / "tasks" / file)
    for task in tasks:
        if task["name"] == name:
            return dict(task)
        for inner in task.get("block", []):
            if inner["name"] == name:
                return dict(inner)
    raise KeyError(name)


class Play:
    """The variables one role sees on a host, and Ansible's Templar over them."""

    def __init__(self, os_id: str, driver: str, role: str = "nvidia_driver") -> None:
        lock = _lock(os_id, driver)
        self.vars: dict[str, Any] = {}
        for r in ("signed_repo", "package_plan", role):
            self.vars.update(_load(ROLES / r / "defaults" / "main.yml"))
        self.vars.update(_load(ROLES / role / "vars" / "RedHat.yml") if (ROLES / role / "vars").is_dir() else {})
        self.vars.update(group_vars(LockGroup.from_json(lock["groups"][0]), INSTALL))
        self.vars.update(FACTS[os_id], ansible_pkg_mgr="dnf", ansible_architecture="x86_64", ansible_kernel=KERNEL)

    def template(self, value: Any) -> Any:
        from ansible.parsing.dataloader import DataLoader
        from ansible.template import Templar

        return Templar(loader=DataLoader(), variables=self.vars).template(value)

    def when(self, task: dict[str, Any], item: Any = None) -> bool:
        from ansible.parsing.dataloader import DataLoader
        from ansible.template import Templar

        conds = task.get("when", [])
        variables = {**self.vars, "item": item}
        templar = Templar(loader=DataLoader(), variables=variables)
        return all(templar.evaluate_conditional(c) for c in (conds if isinstance(conds, list) else [conds]))

    def with_item(self, item: Any) -> Play:
        other = copy.copy(self)
        other.vars = {**self.vars, "item": item}
        return other

    def set_facts(self, role: str, file: str, name: str) -> None:
        self.vars.update(self.template(_task(role, file, name)["ansible.builtin.set_fact"]))

    def include(self, role: str, file: str, name: str) -> None:
        """An include_role's vars, as the included role sees them."""
        self.vars.update(_task(role, file, name)["vars"])


@pytest.mark.parametrize(("os_id", "driver"), CASES)
def test_the_driver_installs_exactly_the_plans_packages_with_dnf_versions(os_id: str, driver: str) -> None:
    play = Play(os_id, driver)
    play.include("nvidia_driver", "nvidia-repo-dnf.yml", "Install and lock the driver packages of the plan")
    play.set_facts("package_plan", "main.yml", "Name the packages with their versions")
    want = (
        ["nvidia-open"]
        if driver.startswith("595")
        else ["nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-open-dkms"]
    )
    assert play.vars["package_plan_specs"] == [f"{n}-3:{driver}" for n in want]
    assert [p["name"] for p in play.vars["package_plan_locks"]] == want
    install = play.template(_task("package_plan", "dnf.yml", "Install the packages at exactly the plan's versions"))
    assert install["ansible.builtin.dnf"]["name"] == [f"{n}-3:{driver}" for n in want]
    assert not any("pinning" in n for n in install["ansible.builtin.dnf"]["name"])  # apt-only packages


@pytest.mark.parametrize(("os_id", "driver"), CASES)
def test_the_toolkit_and_cudnn_get_locks_on_dnf_too(os_id: str, driver: str) -> None:
    for role, names in (
        ("cuda_toolkit", ["cuda-toolkit-12-8"]),
        ("cudnn", ["libcudnn9-cuda-12", "libcudnn9-devel-cuda-12"]),
    ):
        play = Play(os_id, driver, role)
        play.include(role, "main.yml", "Install and hold the plan's packages")
        play.set_facts("package_plan", "main.yml", "Name the packages with their versions")
        assert [p["name"] for p in play.vars["package_plan_locks"]] == names
        play.vars["package_plan_gone"] = []
        lock = _task("package_plan", "dnf.yml", "Lock the held packages at their installed versions")
        assert (
            play.when(lock)
            and play.template(lock["package_plan_versionlock"])["locks"] == play.vars["package_plan_locks"]
        )


AL2023_KERNELS = {"6.1.115-126.197.amzn2023.x86_64": "kernel", "6.12.40-63.114.amzn2023.x86_64": "kernel6.12"}


@pytest.mark.parametrize("kernel", list(AL2023_KERNELS))
def test_amazon_linux_names_the_kernel_lines_packages(kernel: str) -> None:
    play = Play("amzn-2023", "595.58.03")
    play.vars["ansible_kernel"] = kernel
    prefix = AL2023_KERNELS[kernel]
    play.set_facts("nvidia_driver", "main.yml", "Work out the method's task file and whether DKMS builds the module")
    assert play.vars["nvidia_driver_headers"] == f"{prefix}-devel-{kernel}"
    play.set_facts("nvidia_driver", "nvidia-repo-dnf.yml", "Name what the OS needs before the driver")
    headers = play.template(
        _task("nvidia_driver", "nvidia-repo-dnf.yml", "Install the kernel headers and what DKMS needs from the OS")
    )
    assert headers["ansible.builtin.dnf"]["name"] == [f"{prefix}-devel-{kernel}", f"{prefix}-modules-extra-{kernel}"]
    preflight = {**_load(ROLES / "preflight" / "vars" / "Amazon.yml"), "preflight_kernel": kernel}
    play.vars.update(preflight)
    assert play.template(play.vars["__preflight_headers_prefix"]) == f"{prefix}-devel-"


@pytest.mark.parametrize("os_id", [o for o in FACTS if o != "amzn-2023"])
def test_crb_is_enabled_on_9_for_epels_dkms_which_the_plan_installs(os_id: str) -> None:
    """EPEL (its repository, pinned key) and dkms come from the package plan (test_packages.py pins
    those rows); the role enables only what EPEL's packages need from the OS: CRB on 9."""
    play = Play(os_id, "595.58.03")
    play.vars["nvidia_driver_headers"] = f"kernel-devel-{KERNEL}"
    play.set_facts("nvidia_driver", "nvidia-repo-dnf.yml", "Name what the OS needs before the driver")
    crb = _task("nvidia_driver", "nvidia-repo-dnf.yml", "Ask dnf whether CodeReady Builder (CRB) is enabled")
    major = os_id.split("-")[1]
    assert play.when(crb) == (major == "9")
    if major == "9":
        enable = play.template(
            _task("nvidia_driver", "nvidia-repo-dnf.yml", "Enable CodeReady Builder (CRB), which EPEL's packages need")
        )
        argv = enable["ansible.builtin.command"]["argv"]
        assert argv == (
            ["dnf", "config-manager", "--set-enabled", "crb"]
            if os_id == "rocky-9"
            else ["subscription-manager", "repos", "--enable", "codeready-builder-for-rhel-9-x86_64-rpms"]
        )
    headers = play.template(
        _task("nvidia_driver", "nvidia-repo-dnf.yml", "Install the kernel headers and what DKMS needs from the OS")
    )
    assert headers["ansible.builtin.dnf"]["name"] == [f"kernel-devel-{KERNEL}"]


def _module_file(stream: str, state: str) -> dict[str, Any]:
    text = f"[nvidia-driver]\nname=nvidia-driver\nstream={stream}\nprofiles=\nstate={state}\n"
    return {"content": base64.b64encode(text.encode()).decode(), "item": "nvidia-driver:x"}


@pytest.mark.parametrize(
    ("os_id", "now", "reset", "enable"),
    [
        ("rhel-9", None, False, True),  # a fresh host: no module file
        ("rocky-9", ("595-open", "enabled"), False, False),  # converged
        ("amzn-2023", ("580-open", "enabled"), True, True),  # a branch change: reset, then enable
        ("rhel-9", ("595-open", "disabled"), False, True),
        ("rhel-10", None, False, False),  # no module streams on EL10: the plan has none
    ],
)
def test_module_streams_are_enabled_and_another_stream_is_reset_first(
    os_id: str, now: tuple[str, str] | None, reset: bool, enable: bool
) -> None:
    play = Play(os_id, "595.58.03")
    streams = play.vars["nvidia_driver_module_streams"]
    assert streams == ([] if os_id == "rhel-10" else ["nvidia-driver:595-open"])
    play.vars["nvidia_driver_module_state"] = {
        "results": [_module_file(*now) if now else {"failed": True, "item": s} for s in streams]
    }
    play.set_facts("nvidia_driver", "nvidia-repo-dnf.yml", "Name the streams enabled now")
    for name, expected in (
        ("Reset a module enabled at another stream (a branch change)", reset),
        ("Enable the plan's module streams", enable),
    ):
        task = _task("nvidia_driver", "nvidia-repo-dnf.yml", name)
        items = play.template(task["loop"])
        ran = [item for item in items if play.when(task, item)]
        assert bool(ran) == expected, name
        for item in ran:
            argv = Play.with_item(play, item).template(task["ansible.builtin.command"]["argv"])
            want = ["reset", "nvidia-driver"] if "Reset" in name else ["enable", "nvidia-driver:595-open"]
            assert argv == ["dnf", "-y", "module", *want]


def test_the_container_toolkit_repository_checks_metadata_signatures_as_nvidia_s_repo_file() -> None:
    play = Play("rocky-9", "595.58.03", "container_toolkit")
    play.include("container_toolkit", "main.yml", "Install and hold the plan's packages")
    play.vars["package_plan_repository"] = {
        "name": "container-toolkit",
        "url": "https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch",
        "key_url": "https://nvidia.github.io/libnvidia-container/gpgkey",
        "key_fingerprint": "C95B321B61E88C1809C4F759DDCAE044F796ECB0",
    }
    repo = play.template(
        _task("package_plan", "repository.yml", "Add the repository {{ package_plan_repository.name }}")["vars"]
    )
    assert repo["signed_repo_dnf_gpgcheck"] is False and repo["signed_repo_dnf_repo_gpgcheck"] is True
    assert repo["signed_repo_dnf_baseurl"].endswith("/stable/rpm/$basearch")
    play.vars["package_plan_repository"]["name"] = "cuda"
    repo = play.template(
        _task("package_plan", "repository.yml", "Add the repository {{ package_plan_repository.name }}")["vars"]
    )
    assert repo["signed_repo_dnf_gpgcheck"] is True and repo["signed_repo_dnf_repo_gpgcheck"] is False


# --- apt: the pin does not pin NVIDIA's pinning packages to the driver's version -----------------


def test_the_apt_pin_leaves_the_pinning_packages_to_the_repository() -> None:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    lock = json.loads((GOLDEN / "debian-12.lock").read_text())
    group = copy.deepcopy(lock["groups"][0])
    url = f"{CUDA}/debian12/x86_64/"
    group["packages"] = {
        "manager": "apt",
        "repositories": [
            {
                "name": "cuda",
                "url": url,
                "key_url": f"{url}3bf863cc.pub",
                "key_fingerprint": "EB693B3035CD5710E231E123A4B469963BF863CC",
            }
        ],
        "module_streams": [],
        "install": [
            {"name": "nvidia-driver-pinning-595.58.03", "version": None, "role": "nvidia_driver", "repository": "cuda"},
            {"name": "nvidia-open", "version": "595.58.03-*", "role": "nvidia_driver", "repository": "cuda"},
        ],
        "holds": ["nvidia-open"],
        "services": [],
        "pip": None,
    }
    variables = {
        **_load(ROLES / "nvidia_driver" / "defaults" / "main.yml"),
        **group_vars(LockGroup.from_json(group), INSTALL),
    }
    variables["ansible_managed"] = "managed"
    source = (ROLES / "nvidia_driver" / "templates" / "apt-pin.j2").read_text()
    text = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(source))
    stanzas = [s for s in text.split("\n\n") if "Package:" in s]
    by_package = {
        next(line for line in s.splitlines() if line.startswith("Package:")).split(": ", 1)[1]: s for s in stanzas
    }
    assert "Pin: version *" in by_package["nvidia-driver-pinning-595.58.03"]
    assert "Pin-Priority: 500" in by_package["nvidia-driver-pinning-595.58.03"]
    assert "Pin: version 595.58.03-*" in by_package["nvidia-open"]
    # the pinning package's stanza comes first: apt gives a version the first pin that matches it
    assert text.index("nvidia-driver-pinning-595.58.03\n") < text.index("Package: nvidia-open")
    variables2 = {
        **_load(ROLES / "package_plan" / "defaults" / "main.yml"),
        **variables,
        "ansible_pkg_mgr": "apt",
        "package_plan_packages": variables["nvidia_driver_packages"],
    }
    specs = Templar(loader=DataLoader(), variables=variables2).template(
        _task("package_plan", "main.yml", "Name the packages with their versions")["ansible.builtin.set_fact"]
    )
    assert specs["package_plan_specs"] == ["nvidia-driver-pinning-595.58.03", "nvidia-open=595.58.03-*"]


# --- versionlock entries: parsed, not searched ------------------------------------------------------


def _versionlock() -> Any:
    path = ROLES / "package_plan" / "library" / "package_plan_versionlock.py"
    spec = importlib.util.spec_from_file_location("package_plan_versionlock", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# `dnf4 versionlock list` after `dnf4 versionlock \*nvidia\*575\*` (NVIDIA Driver Installation
# Guide, "Version locking"), plus a DCGM (epoch 1), an epoch-0 toolkit entry and an exclude.
LOCKS = """\
kmod-nvidia-open-dkms-3:575.51-1.fc41.*
nvidia-open-3:575.51-1.fc41.*
nvidia-driver-cuda-3:575.51-1.fc41.*
libnvidia-ml-3:575.51-1.fc41.*
datacenter-gpu-manager-4-core-1:4.2.3-1.*
cuda-toolkit-12-8-0:12.8.1-1.*
!nvidia-driver-3:580.65.06-1.el9.*
"""


def test_versionlock_entries_parse_into_name_and_epoch_version_release() -> None:
    vl = _versionlock()
    lines = LOCKS.splitlines()
    assert vl.parse_entry(lines[0]) == ("kmod-nvidia-open-dkms", "3:575.51-1.fc41")
    assert vl.parse_entry(lines[4]) == ("datacenter-gpu-manager-4-core", "1:4.2.3-1")
    assert vl.parse_entry(lines[5]) == ("cuda-toolkit-12-8", "0:12.8.1-1")
    assert vl.parse_entry(lines[6]) is None  # an exclude is no lock
    assert vl.parse_entry("Last metadata expiration check: 0:01:02 ago on Tue Dec  1 15:00:00 2026.") is None
    assert vl.parse_entry("nvidia-open-575.51-1.el9") == ("nvidia-open", "0:575.51-1.el9")  # no epoch written


def test_versionlock_matches_the_plans_version_expression() -> None:
    vl = _versionlock()
    assert vl.matches("3:575.51-1.fc41", "575.51") and vl.matches("3:575.51-1.fc41", "3:575.51")
    assert vl.matches("3:575.51-1.fc41", "575.51-1.fc41") and vl.matches("1:4.2.3-1", "4.2.3")
    assert not vl.matches("3:575.51-1.fc41", "575.5") and not vl.matches("3:575.51-1.fc41", "2:575.51")
    assert not vl.matches("3:575.51-1.fc41", "580.65.06") and vl.matches("0:12.8.1-1", None)


def test_versionlock_touches_only_its_own_packages() -> None:
    vl = _versionlock()
    lines = LOCKS.splitlines()
    # the same plan again: nothing to delete, nothing to add (the substring check re-added each run)
    same = [{"name": "nvidia-open", "version": "3:575.51"}, {"name": "kmod-nvidia-open-dkms", "version": "575.51"}]
    assert vl.plan(lines, same, [], "release") == ([], [])
    assert vl.plan(lines, same, [], "lock") == ([], [])
    # a branch change: only this role's entries at the other version go, DCGM's and the toolkit's stay
    new = [{"name": "nvidia-open", "version": "3:595.58.03"}]
    delete, add = vl.plan(lines, new, ["kmod-nvidia-open-dkms", "nvidia-driver-cuda"], "release")
    assert delete == [
        "kmod-nvidia-open-dkms-3:575.51-1.fc41.*",
        "nvidia-driver-cuda-3:575.51-1.fc41.*",
        "nvidia-open-3:575.51-1.fc41.*",
    ]
    assert add == []
    after = [line for line in lines if line not in delete]
    assert vl.plan(after, new, [], "lock") == ([], ["nvidia-open"])
    # a role without a version (the toolkit follows its name) keeps whatever EVR it locked
    assert vl.plan(lines, [{"name": "cuda-toolkit-12-8", "version": None}], [], "release") == ([], [])


def test_apt_names_the_installed_and_held_packages_from_dpkg_query() -> None:
    """The previous plan's packages are released and removed only if these names are right."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    task = _task("package_plan", "apt.yml", "Name the installed and the held packages")
    lines = [
        "nvidia-open-570 570.211.01-1 hold ok installed",
        "bash 5.2.15-2+b7 install ok installed",
        "old 1.0 deinstall ok config-files",
    ]
    variables = {"package_plan_dpkg": {"stdout_lines": lines}, **task["vars"]}
    out = Templar(loader=DataLoader(), variables=variables).template(task["ansible.builtin.set_fact"])
    assert out == {
        "package_plan_installed_names": ["nvidia-open-570", "bash"],
        "package_plan_held_names": ["nvidia-open-570"],
        # what package_plan's converged fast path compares the plan with (test_package_plan_converged.py)
        "package_plan_installed_specs": ["nvidia-open-570=570.211.01-1", "bash=5.2.15-2+b7", "nvidia-open-570", "bash"],
    }


@pytest.mark.parametrize("os_id", list(FACTS))
def test_a_rollback_on_dnf_downgrades_and_moves_the_versionlock_back(os_id: str) -> None:
    """Issue 30 on the RPM path (no RHEL host runs here: the rendered tasks, templated by Ansible,
    and the versionlock module's plan on the lines `dnf versionlock add` writes): lock B had the
    driver at 595.58.03, locked; rolling back to lock A's 590.44.01 (same package names) releases
    B's lock before the install, installs A's exact version with downgrades allowed, and locks it."""
    newer, older = "595.58.03", "590.44.01"
    play = Play(os_id, older)  # the rolled-back lock's plan, as the driver role includes package_plan
    play.include("nvidia_driver", "nvidia-repo-dnf.yml", "Install and lock the driver packages of the plan")
    play.set_facts("package_plan", "main.yml", "Name the packages with their versions")
    play.vars["package_plan_gone"] = []  # same names in both locks: nothing of B's plan goes
    install = play.template(_task("package_plan", "dnf.yml", "Install the packages at exactly the plan's versions"))
    assert install["ansible.builtin.dnf"]["name"] == [f"nvidia-open-3:{older}"]
    assert install["ansible.builtin.dnf"]["allow_downgrade"] is True  # dnf would refuse a lower EVR without it
    vl = _versionlock()
    listed = [f"nvidia-open-3:{newer}-1.el9.*", "datacenter-gpu-manager-4-core-1:4.2.3-1.*"]  # B's entry, DCGM's
    release = _task("package_plan", "dnf.yml", "Release this role's locks at other versions")
    args = play.template(release["package_plan_versionlock"])
    assert play.when(release) and args["stage"] == "release"
    assert vl.plan(listed, args["locks"], args["drop"], "release") == ([listed[0]], [])  # DCGM's stays
    lock = play.template(_task("package_plan", "dnf.yml", "Lock the held packages at their installed versions"))
    assert vl.plan(listed[1:], lock["package_plan_versionlock"]["locks"], [], "lock") == ([], ["nvidia-open"])
    # the apt path the same way: downgrades allowed over a held package
    apt = _task("package_plan", "apt.yml", "Install the packages at exactly the plan's versions")["ansible.builtin.apt"]
    assert apt["allow_downgrade"] is True and apt["allow_change_held_packages"] is True
