"""The lock's package plan (contract shape) split into each role's variables (role_vars.package_vars),
and the shapes its one reader (PackagePlan.from_json) refuses: one line each, before any host is touched."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from provision.ansible.role_vars import package_vars
from provision.errors import BadInput
from provision.model.packages import PackagePlan

URL = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
PLAN: dict[str, Any] = {
    "manager": "apt",
    "repositories": [
        {
            "name": "cuda",
            "url": URL,
            "key_url": f"{URL}3bf863cc.pub",
            "key_fingerprint": "EB693B3035CD5710E231E123A4B469963BF863CC",
        },
        {
            "name": "unused",
            "url": "https://example.invalid/r/",
            "key_url": "https://example.invalid/k",
            "key_fingerprint": "A" * 40,
        },
    ],
    "module_streams": [],
    "install": [
        {"name": "nvidia-driver-pinning-595.58.03", "version": None, "role": "nvidia_driver", "repository": "cuda"},
        {"name": "nvidia-open", "version": "595.58.03-*", "role": "nvidia_driver", "repository": "cuda"},
        {"name": "nvidia-fabricmanager", "version": "595.58.03-*", "role": "fabric_manager", "repository": "cuda"},
        {"name": "nvlsm", "version": None, "role": "fabric_manager", "repository": "cuda"},
        {"name": "nvidia-cuda-toolkit", "version": None, "role": "cuda_toolkit", "repository": None},
    ],
    "holds": ["nvidia-open", "nvidia-fabricmanager", "nvidia-cuda-toolkit"],
    "services": [
        {"name": "nvidia-fabricmanager", "role": "fabric_manager"},
        {"name": "nvidia-imex", "role": "fabric_manager"},
    ],
    "pip": None,
}


def test_the_plan_splits_into_each_roles_variables_in_order() -> None:
    out = package_vars(PackagePlan.from_json(PLAN))
    assert out["nvidia_driver_packages"] == [
        {"name": "nvidia-driver-pinning-595.58.03", "version": None},
        {"name": "nvidia-open", "version": "595.58.03-*"},
    ]
    assert out["nvidia_driver_holds"] == ["nvidia-open"]
    assert [r["name"] for r in out["nvidia_driver_repositories"]] == ["cuda"]  # only the ones its packages use
    assert out["nvidia_driver_repositories"][0]["key_fingerprint"] == "EB693B3035CD5710E231E123A4B469963BF863CC"
    assert out["fabric_manager_services"] == ["nvidia-fabricmanager", "nvidia-imex"]
    assert [p["name"] for p in out["fabric_manager_packages"]] == ["nvidia-fabricmanager", "nvlsm"]
    assert out["cuda_toolkit_repositories"] == [] and out["cuda_toolkit_holds"] == ["nvidia-cuda-toolkit"]
    assert out["dcgm_packages"] == [] and out["nvidia_driver_module_streams"] == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p.update(manager="zypper"), "packages.manager is not apt or dnf"),
        (lambda p: p["holds"].append("nvidia-imex"), "is not in packages.install"),
        (lambda p: p["install"][0].update(role="kernel"), "install[0].role"),
        (lambda p: p["install"][0].update(repository="nope"), "install[0].repository"),
        (lambda p: p["install"][1].update(version="595 58"), "install[1].version"),
        (
            lambda p: p["repositories"][0].update(key_fingerprint="3BF863CC"),
            "full (40 upper-case hex digit) fingerprint",
        ),
        (lambda p: p.update(module_streams=["nvidia-driver:595-open"]), "dnf module:stream"),
        (lambda p: p["install"][0].pop("version"), "an object with name, version, role"),
    ],
)
def test_a_plan_of_the_wrong_shape_is_refused_in_one_line(change: Any, message: str) -> None:
    plan = copy.deepcopy(PLAN)
    change(plan)
    with pytest.raises(BadInput, match="packages") as err:
        PackagePlan.from_json(plan)
    assert message in str(err.value) and "\n" not in str(err.value)
