"""TRANSITIONAL: a provision.lock/1 group's ``packages`` (os_family, driver names, ...) in the
contract's provision.lock/2 shape, so that locks the resolver writes today still render while the
knowledge table and PackagePlan v2 (the core part of issue 14) land.

Every rule here is the one role_vars.py and the role defaults applied to v1 locks before the
package plan named everything (the names and the key are v1's, not verified ones); delete this
module when the resolver writes provision.lock/2 packages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provision.stack.packages import PackagePlan

# v1's one key for every NVIDIA CUDA repository (the 2022 rotation, 3bf863cc).
_V1_KEY = ("3bf863cc.pub", "EB693B3035CD5710E231E123A4B469963BF863CC")
# v1's libnvidia-container repository and key (container_toolkit/defaults/main.yml before lock/2).
_V1_CTK = (
    "https://nvidia.github.io/libnvidia-container/stable",
    "https://nvidia.github.io/libnvidia-container/gpgkey",
    "C95B321B61E88C1809C4F759DDCAE044F796ECB0",
)


def is_v1(doc: Mapping[str, Any]) -> bool:
    return "manager" not in doc


def from_v1(doc: Mapping[str, Any], stack: Mapping[str, Any], distro: str) -> dict[str, Any]:
    """The contract's ``packages`` for a v1 lock group's ``packages``."""
    v1 = PackagePlan.from_json(doc)
    apt = (v1.os_family or distro) in ("debian", "ubuntu") or distro in ("debian", "ubuntu")
    manager = "apt" if apt else "dnf"
    out: dict[str, Any] = {"manager": manager, "repositories": [], "module_streams": [], "install": []}
    out["holds"], out["services"] = [], []

    def add(name: str, version: str | None, role: str, repository: str | None, hold: bool = True) -> None:
        out["install"].append({"name": name, "version": version, "role": role, "repository": repository})
        if hold and version is not None:
            out["holds"].append(name)

    def exact(version: str) -> str:
        return f"{version}-*" if apt else version

    driver = stack.get("driver")
    repo = None
    if driver and v1.driver:
        version, flavour = str(driver.get("version")), driver.get("kernel_modules")
        if v1.driver.method == "nvidia-repo" and v1.driver.repo:
            url = v1.driver.repo.rstrip("/")
            out["repositories"].append(
                {"name": "cuda", "url": url, "key_url": f"{url}/{_V1_KEY[0]}", "key_fingerprint": _V1_KEY[1]}
            )
            repo = "cuda"
            for name in v1.driver.names:
                if name.startswith("@nvidia-driver:"):
                    out["module_streams"].append(name[1:])
                    dkms = "kmod-nvidia-open-dkms" if flavour == "open" else "kmod-nvidia-latest-dkms"
                    for n in ("nvidia-driver", "nvidia-driver-cuda", dkms):
                        add(n, exact(version), "nvidia_driver", repo)
                elif name.startswith("nvidia-driver-pinning-"):
                    add(name, None, "nvidia_driver", repo)
                else:
                    add(name, exact(version), "nvidia_driver", repo)
        elif v1.driver.method == "distro":
            for name in v1.driver.names:
                floating = name.startswith(("linux-modules-nvidia-", "linux-headers-"))
                add(name, None if floating else exact(version), "nvidia_driver", None)
            if "nvidia-driver" in v1.driver.names:
                add("nvidia-persistenced", None, "nvidia_driver", None)
        out["services"].append({"name": "nvidia-persistenced", "role": "nvidia_driver"})
    fm = stack.get("fabric_manager")
    if fm:
        for name in v1.fabric_manager:
            add(name.split("=")[0].split(f"-{fm['version']}")[0], exact(str(fm["version"])), "fabric_manager", repo)
        out["services"].append({"name": "nvidia-fabricmanager", "role": "fabric_manager"})
    if stack.get("cuda_toolkit"):
        # the toolkit package's version follows the toolkit's major.minor in its name (v1: unversioned)
        distro_toolkit = bool(v1.driver and v1.driver.method == "distro")
        for name in ("nvidia-cuda-toolkit",) if distro_toolkit else v1.cuda_toolkit[:1]:
            add(name, None, "cuda_toolkit", None if distro_toolkit else repo)
            out["holds"].append(name)
    cudnn = stack.get("cudnn")
    if cudnn:
        for name in v1.cudnn:
            add(name, exact(str(cudnn["version"])), "cudnn", repo)
    ctk = stack.get("container_toolkit")
    if ctk:
        url, key, fpr = _V1_CTK
        out["repositories"].append(
            {
                "name": "container-toolkit",
                "url": f"{url}/deb/$(ARCH)" if apt else f"{url}/rpm/$basearch",
                "key_url": key,
                "key_fingerprint": fpr,
            }
        )
        for name in ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools"):
            add(name, exact(str(ctk["version"])), "container_toolkit", "container-toolkit")
        add("libnvidia-container1", exact(str(ctk["version"])), "container_toolkit", "container-toolkit")
    dcgm = stack.get("dcgm")
    if dcgm:
        # DCGM versions carry an epoch ("1:4.2.3-1")
        version = f"*{dcgm['version']}-*" if apt else str(dcgm["version"])
        for name in ("datacenter-gpu-manager-4-core", f"datacenter-gpu-manager-4-cuda{dcgm.get('cuda_major')}"):
            add(name, version, "dcgm", repo)
        out["services"].append({"name": "nvidia-dcgm", "role": "dcgm"})
    return out
