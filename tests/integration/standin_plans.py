"""Package plans in the lock's ``packages`` shape that the STAND-IN NVIDIA repository is built
from (every release side by side, as NVIDIA's repository carries them), and the stand-in's place
in a resolver's plan (:func:`standin_repository`).

:func:`apt_plan` writes, by hand from NVIDIA's names (the facts standin_repo.RULES cites), what
the repository must carry; the role tests install the resolver's own plans from it (the packaging
table), so a name the table and these facts disagree on fails the install. Nothing here is product code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The branches from which NVIDIA's apt repositories drop the branch from the driver's names (and
# the plan installs the exact-version pinning package first: Driver Installation Guide, "Recent
# Updates") and from Fabric Manager's (gpu-driver-container commit 78fa4ac0, "add driver
# 580.65.06"): /work/notes/i14-facts.md sections 2 and 3.
UNVERSIONED_FROM = 590
UNVERSIONED_FABRIC_MANAGER_FROM = 580
NVIDIA_REPOS = "https://developer.download.nvidia.com/compute/cuda/repos"
# The real keys the stand-in keys stand in for ([facts] section 1, /work/notes/i14-facts.md).
KEYS = {
    "debian13": ("8793F200.pub", "02182E60104FCDC26EAE1B8597A5D4CB8793F200"),
    "apt": ("3bf863cc.pub", "EB693B3035CD5710E231E123A4B469963BF863CC"),
}


def _entry(name: str, version: str | None, role: str, repository: str | None = "cuda") -> dict[str, Any]:
    return {"name": name, "version": version, "role": role, "repository": repository}


def apt_plan(
    distro: str,
    driver: str,
    *,
    fabric_manager: bool = False,
    cuda: tuple[str, str] | None = None,  # (12.8, 12.8.93)
    cudnn: str | None = None,
    kernel: str | None = None,
) -> dict[str, Any]:
    """The plan of NVIDIA's apt repository for ``distro`` (debian12, debian13, ubuntu2404, ...): the
    open kernel modules at exactly ``driver``, optionally Fabric Manager, the toolkit and cuDNN."""
    branch = int(driver.split(".", maxsplit=1)[0])
    key_file, fingerprint = KEYS.get(distro, KEYS["apt"])
    url = f"{NVIDIA_REPOS}/{distro}/x86_64/"
    exact = f"{driver}-*"
    install: list[dict[str, Any]] = []
    holds: list[str] = []
    if kernel:
        install.append(_entry(f"linux-headers-{kernel}", None, "nvidia_driver", None))
    if branch >= UNVERSIONED_FROM:
        # the exact-version pinning package carries the version in its name (its own is <x.y.z>-N)
        install += [
            _entry(f"nvidia-driver-pinning-{driver}", None, "nvidia_driver"),
            _entry("nvidia-open", exact, "nvidia_driver"),
        ]
        holds += ["nvidia-open"]
    else:
        install.append(_entry(f"nvidia-open-{branch}", exact, "nvidia_driver"))
        holds.append(f"nvidia-open-{branch}")
    fm = "nvidia-fabricmanager" if branch >= UNVERSIONED_FABRIC_MANAGER_FROM else f"nvidia-fabricmanager-{branch}"
    services = [{"name": "nvidia-persistenced", "role": "nvidia_driver"}]
    if fabric_manager:
        install.append(_entry(fm, exact, "fabric_manager"))
        holds.append(fm)
        services.append({"name": "nvidia-fabricmanager", "role": "fabric_manager"})
    if cuda:
        minor, full = cuda
        name = f"cuda-toolkit-{minor.replace('.', '-')}"
        install.append(_entry(name, f"{full}-*", "cuda_toolkit"))
        holds.append(name)
    if cuda and cudnn:
        major = cuda[0].split(".")[0]
        m = cudnn.split(".")[0]
        names = [f"libcudnn{m}-cuda-{major}", f"libcudnn{m}-dev-cuda-{major}", f"libcudnn{m}-headers-cuda-{major}"]
        names.append(f"cudnn{m}-cuda-{major}")
        install += [_entry(n, f"{cudnn}-*", "cudnn") for n in names]
        holds += names
    return {
        "manager": "apt",
        "repositories": [{"name": "cuda", "url": url, "key_url": url + key_file, "key_fingerprint": fingerprint}],
        "module_streams": [],
        "install": install,
        "holds": holds,
        "services": services,
        "pip": None,
    }


def standin_repository(packages: Mapping[str, Any], url: str, key_file: str, fingerprint: str) -> dict[str, Any]:
    """``packages`` with its NVIDIA repository pointed at the stand-in (what a mirror setting does):
    the roles then add the stand-in through the contract's own repository entry."""
    repositories = [
        {**r, "url": f"{url}/", "key_url": f"{url}/{key_file}", "key_fingerprint": fingerprint}
        if r["name"] == "cuda"
        else r
        for r in packages["repositories"]
    ]
    return {**packages, "repositories": repositories}
