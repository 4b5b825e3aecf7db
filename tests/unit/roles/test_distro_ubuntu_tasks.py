"""nvidia_driver's Ubuntu distro tasks, templated by Ansible's own Templar (no Ubuntu host here).

The kernel flavour the tasks work out on the host must be the one probe works out from the same
dpkg rows (provision.hosts.parse_packages.kernel_flavour), and the plan's {kernel_flavour} and
{kernel} are filled in with it. The rows are dpkg-query's `${Package} ${Version} ${Status}`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provision.hosts import parse_packages as pp
from provision.resources import playbooks_dir

TASKS = playbooks_dir() / "roles" / "nvidia_driver" / "tasks" / "distro-ubuntu.yml"
DEFAULTS = playbooks_dir() / "roles" / "nvidia_driver" / "defaults" / "main.yml"


def _load(path: Path) -> Any:
    from ansible.parsing.dataloader import DataLoader

    return DataLoader().load_from_file(str(path), trusted_as_template=True)


def _template(variables: dict[str, Any], value: Any) -> Any:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    return Templar(loader=DataLoader(), variables=variables).template(value)


def _task(name: str) -> dict[str, Any]:
    return next(t for t in _load(TASKS) if t["name"].startswith(name))


def _flavour_on_host(kernel: str, metas: dict[str, str]) -> str:
    rows = [f"linux-image-{kernel} {kernel.replace('-', '.', 1)} install ok installed"]
    rows += [f"linux-image-{f} {v} install ok installed" for f, v in metas.items()]
    rows.append("linux-image-generic-hwe-20.04 5.15.0.91.88 deinstall ok config-files")
    variables: dict[str, Any] = {**_load(DEFAULTS), "nvidia_driver_kernel": kernel}
    variables["nvidia_driver_kernel_images"] = {"stdout_lines": rows}
    task = _task("Work out the kernel's flavour")
    variables.update(task["vars"])
    return str(_template(variables, task["ansible.builtin.set_fact"])["nvidia_driver_ubuntu_flavour"]).strip()


@pytest.mark.parametrize(
    ("kernel", "metas"),
    [
        ("5.15.0-91-generic", {"generic": "5.15.0.91.88", "generic-hwe-22.04": "6.8.0.52.53~22.04.1"}),
        ("6.8.0-52-generic", {"generic": "5.15.0.91.88", "generic-hwe-22.04": "6.8.0.52.53~22.04.1"}),
        ("6.8.0-52-generic", {"generic-hwe-22.04": "6.8.0.57.57~22.04.1"}),
        ("6.8.0-1021-aws", {"aws": "6.8.0.1024.26~22.04.1"}),
        ("6.8.0-1019-gcp", {}),
        ("5.15.0-1071-azure", {"azure": "5.15.0.1071.69", "generic": "5.15.0.91.88"}),
    ],
)
def test_the_host_works_out_the_flavour_probe_does(kernel: str, metas: dict[str, str]) -> None:
    assert _flavour_on_host(kernel, metas) == pp.kernel_flavour(kernel, metas)


def test_a_plan_made_without_the_host_is_filled_in_on_it() -> None:
    from tests.support.driver_plans import ubuntu_entries

    entries = ubuntu_entries(None, "580.95.05")
    variables = {
        "nvidia_driver_packages": [{"name": n, "version": v} for n, v in entries],
        "nvidia_driver_ubuntu_flavour": "generic-hwe-22.04",
        "nvidia_driver_kernel": "6.8.0-52-generic",
    }
    named = _template(variables, _task("Name the plan's packages")["ansible.builtin.set_fact"])
    assert [p["name"] for p in named["nvidia_driver_ubuntu_packages"]] == [
        "nvidia-headless-no-dkms-580-server-open",
        "nvidia-utils-580-server",
        "linux-modules-nvidia-580-server-open-generic-hwe-22.04",
        "linux-modules-nvidia-580-server-open-6.8.0-52-generic",
    ]


def test_the_host_reads_the_version_its_kernels_modules_were_built_for() -> None:
    """The same record probe reads (apt-cache show of the running kernel's module package)."""
    from tests.support.probe_fixtures import fixture

    record = fixture("ubuntu-driver-index/hwe-22.04-show.txt").split("\n\n")[1]
    task = _task("Read the driver version of the running kernel's precompiled modules")
    take = next(t for t in task["block"] if t["name"].startswith("Take the driver version"))
    variables = {"nvidia_driver_branch": "580", "nvidia_driver_precompiled": {"stdout": record}, **take["vars"]}
    facts = _template(variables, take["ansible.builtin.set_fact"])
    assert facts["nvidia_driver_version"] == "580.95.05" and facts["nvidia_driver_ubuntu_decided_on_host"] is True
